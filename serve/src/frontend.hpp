// The front end of `troupe serve` (serve.hpp): the HTTP endpoint, the scheduling core, the
// replicas' supervisor and the model swaps. Split by concern over frontend.cpp (set-up, the
// ticker, signals), frontend_replicas.cpp (launching, exits, relaunches), frontend_swaps.cpp
// (generations: reloads, commits, refusals), frontend_watch.cpp (--watch), routes.cpp (the HTTP
// API) and server_state.cpp (server.json, the progress line, the latency window).
//
// Threads and locks: HTTP threads (routes), the transport's io thread (replica frames, peers
// down, reload requests), the launcher's thread (exit reports, queued for the ticker), the ticker
// (everything that launches, signals or waits on time) and the main thread (signals). The core has
// its own lock; `mu_` guards the replica slots, generations and pending reloads; `views_mu_` the
// model views the routes read. Launches and signals happen on the ticker without `mu_` held.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "access_log.hpp"
#include "core.hpp"
#include "infer_codec.hpp"
#include "serve_metrics.hpp"
#include "troupe/cluster/cut_off_hosts.hpp"
#include "troupe/cluster/launcher.hpp"
#include "troupe/core/signal_wait.hpp"
#include "troupe/job/row_encoder.hpp"
#include "troupe/model/model_dir.hpp"
#include "troupe/observe/http_server.hpp"
#include "troupe/observe/metrics.hpp"
#include "troupe/serve/serve.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::serve {

// A model directory found under --watch `root` ("root/x" or "root/x/model") whose every component
// below the root, model.json and model.pt are the user's own and no link (frontend_watch.cpp).
bool own_model_dir(const std::string& root, const std::string& dir);
// A model directory's key in the swaps tried (absolute, normalised: a reload's and --watch's agree).
std::string watch_key(const std::string& dir);
// What a swap tried in a model directory: its version's time, and its model.pt's size and change
// time. A model refused while its model.pt was still being copied (cp, scp: not a rename) is tried
// again once the file changes (it was never taken again: the deployment was lost).
struct watch_stamp {
  std::int64_t created_unix_ms = 0;
  std::int64_t pt_size = -1, pt_mtime_ns = -1;  // -1: no model.pt
  bool operator==(const watch_stamp&) const = default;
};
watch_stamp stamp_of(const std::string& dir, std::int64_t created_unix_ms);

// One model version as the routes see it: what requests are checked against and answers say.
struct model_view {
  model::model_info info;
  model_shape shape;
  // Raw rows (the troupe_rows extension) encoded as the model's data was imported; null when
  // model.json has no columns (`rows_why` says why).
  std::shared_ptr<const job::row_encoder> rows;
  std::string rows_why;
  std::uint32_t generation = 0;
  std::int64_t serving_since_ms = 0;
};

// A window of request latencies for the progress line and server.json (p50, p99 of the last
// interval). Thread-safe.
class latency_window {
 public:
  void add(double seconds);
  struct summary {
    std::size_t count = 0;
    double p50 = 0, p99 = 0;
  };
  summary take();

 private:
  std::mutex mu_;
  std::vector<float> samples_;
  std::size_t seen_ = 0;
};

// "1234 ms"
std::string ms_text(clock::duration d);

class frontend final : public replica_link {
 public:
  frontend(serve_settings settings, model::model_info first, troupe::clock& clk);
  ~frontend() override;
  int run();

  bool send_batch(const std::string& node, std::uint64_t batch_id, const std::vector<request_ptr>& requests,
                  std::size_t rows) override;

 private:
  // A replica process's place: generation and slot, and its current incarnation.
  struct slot {
    std::uint32_t generation = 0;
    std::size_t index = 0;
    std::string node;
    std::uint64_t incarnation = 0;
    std::optional<cluster::node_handle> handle;
    bool ready = false, retired = false;
    int failures = 0;  // exits in a row without having served a while
    std::optional<clock::time_point> relaunch_at;
    clock::time_point launched{}, ready_at{};
    std::string last_exit;
    std::string peer_host;           // the address its connection comes from (where Slurm placed it)
    std::string fenced_for;          // the server fenced this incarnation: why (its exit says so)
    std::vector<std::string> avoid;  // the launch's: hosts cut off when it began (begin_launch)
  };
  enum class gen_state { staging, active, draining };
  // A generation's copy of its model directory, and what its model.pt holds (XXH64).
  struct snapshot_copy {
    model::model_info info;
    std::uint64_t pt_digest = 0;
  };
  struct generation {
    model::model_info info;  // its snapshot in <state>/models/<generation>/
    std::uint64_t pt_digest = 0;
    gen_state state = gen_state::staging;
    clock::time_point deadline{};
    std::string failure;           // staging: why it cannot become active
    std::vector<message> waiting;  // reload requests to answer once it is active or refused
  };
  struct reload_request {
    std::string dir;
    std::optional<message> reply;  // `troupe serve reload`'s request, to answer
    std::string source;            // "reload", "SIGHUP", "watch"
  };

  // frontend.cpp
  int setup();
  int claim_state_dir();
  std::string place_problem(const std::string& servers) const;
  int open_control();
  int stage_first_generation();
  bool first_generation_up();
  void ticker_loop();
  void on_message(const message& m);
  void wait_for_signals();
  // SIGHUP: with --watch, a look for a newer model now; else the served directory read again.
  void on_sighup();
  bool hup_while_starting_ = false;  // a SIGHUP while the first model loaded: taken once it serves
  // Under mu_: the directory the active generation was asked to serve (the last reload's, not
  // --model's); --model before the first is up.
  std::string served_dir() const;
  void stop_everything();
  void stop_replicas_at_exit();  // SIGTERM, then SIGKILL what is left after 2 s
  // frontend_replicas.cpp
  expected<snapshot_copy> snapshot(const model::model_info& m, std::uint32_t gen);  // (swaps)
  void launch_due();
  // Under mu_: the slot's next incarnation, made known to the core; its generation's version, or
  // nullopt when the slot is no longer to be launched. `copy` is what launch() then takes.
  std::optional<std::string> begin_launch(const std::string& node, slot& copy);
  // Under mu_: the launch's handle kept, or its failure recorded (a staging generation fails; a
  // serving slot is tried again in 1 s).
  void end_launch(const std::string& node, const slot& copy, const expected<void>& launched);
  expected<void> launch(slot& s, const std::string& version);
  std::vector<std::string> replica_argv(const slot& s, const std::string& version) const;
  void on_exit(const cluster::node_handle& h, const cluster::exit_status& st);
  void handle_exits();
  void handle_exit(const cluster::node_handle& h, const cluster::exit_status& st);  // mu_ held
  void schedule_relaunch(slot& s, const std::string& why);                          // mu_ held
  // mu_ held: a replica the local launcher sent to another host ended before it reached the front
  // end (not retired, not fenced or killed by someone: cluster::start_failure): its host is cut off
  // for cluster::cut_off_hosts::period (said once), the next launches go to other hosts with a free slot.
  // True when that is what happened.
  bool note_cut_off(const slot& s, const cluster::node_handle& h, const cluster::exit_status& st,
                    bool fenced);
  void on_ready(const message& m);
  void on_failed(const message& m);
  // frontend_swaps.cpp (advance_swaps' steps run with mu_ held)
  void start_reloads();
  // The next reload to start, popped, with the serving model's view; nullopt while none can start
  // (stopping, a swap under way, the first model not up yet).
  std::optional<reload_request> next_reload(model_view& serving);
  void refuse_reload(const reload_request& req, const model_view& serving, const std::string& why);
  // mu_ held: generation `gen` of `snap` staged, its slots due for launch now.
  void stage(const reload_request& req, std::uint32_t gen, snapshot_copy snap);
  std::uint64_t served_digest(std::uint32_t gen);  // its model.pt's XXH64 (0: none such)
  void advance_swaps();
  void drop_drained_generations();
  void fence_slow_loaders(clock::time_point now, std::vector<cluster::node_handle>& to_fence);
  std::optional<std::uint32_t> check_staged(clock::time_point now,
                                            std::vector<cluster::node_handle>& to_fence);
  void refuse(std::uint32_t gen, std::vector<cluster::node_handle>& to_fence);
  // <state>/models/<gen>/, its generation gone; and the replica logs of generations more than
  // kept_log_generations behind the newest (two files a swap, kept for good, grew the logs directory
  // without end under --watch).
  void drop_snapshot(std::uint32_t gen);
  static constexpr std::uint32_t kept_log_generations = 3;
  // An earlier run's replica logs go to <state>/logs/previous/ (the one before is removed): the
  // generations start at 1 again, and a new run appended to the old replica-1-*.log.
  void set_aside_earlier_logs();
  void publish_view(std::uint32_t gen);  // the routes' view of generation gen, made the active one
  void commit(std::uint32_t gen);
  void answer_reload(const message& request, bool ok, const std::string& error, const std::string& version,
                     std::uint32_t generation);
  void stop_replicas(const std::vector<std::string>& nodes);
  // Fences each (SIGKILL through the launcher), `why` remembered for its exit's line.
  void fence_replicas(const std::vector<replica_ref>& who, const std::string& why);
  // A replica that missed its heartbeats (transport's peer-down), fenced by the next tick.
  void replica_silent(const replica_ref& who, const std::string& why);
  std::vector<std::pair<replica_ref, std::string>> take_silent();
  void watch_for_models();
  // The newest model under --watch that `current`'s clients could use, the user's own, not refused.
  std::optional<model::model_info> newest_watched(const model::model_info& current);
  // --watch does not take the model `m` in `d`: not newer than `current`, or clients could not use
  // it (each logged once).
  bool passes_over(const std::string& d, const model::model_info& current, const model::model_info& m);
  slot* find_slot(const std::string& node);
  generation* gen_of(const slot& s);  // null once its generation was dropped (refused)
  std::string in_their_words(std::string text, std::uint32_t gen);
  // routes.cpp
  bool open_http();  // the HTTP endpoint, or false (logged)
  void handle_http(observe::http_request&& r, observe::http_responder respond);
  // /v2/models/<name>[/versions/<version>][/ready|/infer|/rows]
  void model_route(const observe::http_request& r, const std::vector<std::string>& parts,
                   observe::http_responder respond);
  void infer(const observe::http_request& r, const std::shared_ptr<const model_view>& view,
             observe::http_responder respond);
  // POST .../rows (rows_request.hpp): raw rows encoded, then as infer.
  void infer_rows(const observe::http_request& r, const std::shared_ptr<const model_view>& view,
                  observe::http_responder respond);
  // A parsed request (or why it was not) into the core; answered when its outcome comes.
  // `encoded_by`: the view whose encoder made `in` from raw rows (`body`), null for inputs as sent.
  void submit(expected<infer_input>&& in, clock::time_point t0, observe::http_responder respond,
              const model_view* encoded_by = nullptr, std::string_view body = {});
  // request::reencode for raw rows `body`: encodes them as generation g's view does.
  std::function<std::string(request&, std::uint32_t)> reencoder(std::string_view body);
  // A request's answer from its outcome (the logits' JSON, or the failure's status).
  void answer_infer(const observe::http_responder& respond, clock::time_point arrived, const std::string& id,
                    unsigned outputs, std::size_t rows, outcome&& o);
  // A request answered with `status`: counted, and its latency observed.
  void count_request(int status, clock::time_point arrived);
  observe::http_response metadata(const model_view& v);
  observe::http_response ready_answer(bool model_route);
  void drain();
  std::shared_ptr<const model_view> current_view() const;
  std::shared_ptr<const model_view> view_of(std::uint32_t generation) const;
  // server_state.cpp
  void write_state(bool final);
  // server.json of a server not serving yet or any more: its state ("starting", "failed", "stopped"),
  // pid and start time.
  void write_phase(const char* state);
  // The request and row rates since the last call, when at least 0.2 s ago (the first: none).
  void update_rates(clock::time_point now, std::uint64_t ok, std::uint64_t rows);
  nlohmann::json replicas_state(const core_stats& stats);
  nlohmann::json swap_state();  // mu_ held: the swap under way or the last refused, else null
  void print_progress(bool final);

  serve_settings settings_;
  const serve_config& cfg_;
  troupe::clock& clock_;
  std::string name_, state_dir_, token_, control_address_;
  std::int64_t started_ms_ = 0;
  int lock_fd_ = -1;  // <state>/server.lock, flock'ed while this server runs
  clock::time_point started_{};
  observe::registry registry_;
  serve_metrics metrics_;
  std::unique_ptr<endpoint> net_;
  std::unique_ptr<cluster::launcher> launcher_;
  std::unique_ptr<serving_core> core_;
  std::unique_ptr<access_log> access_;  // [serve] access_log; before http_, whose threads write it
  std::unique_ptr<observe::http_server> http_;
  latency_window latencies_;
  std::atomic<std::uint64_t> next_request_{1};
  // failed: the server's (5xx: no replica, a timeout); refused: the client's (4xx: bad JSON, a wrong
  // shape, another model's name), apart since 2026-12-01 (the progress line's errors counted both).
  std::atomic<std::uint64_t> requests_ok_{0}, requests_failed_{0}, requests_refused_{0}, rows_answered_{0};

  mutable std::mutex views_mu_;
  std::map<std::uint32_t, std::shared_ptr<const model_view>> views_;
  std::uint32_t active_ = 0;  // under views_mu_

  std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::string, slot> slots_;  // by node name
  std::map<std::uint32_t, generation> gens_;
  std::uint32_t next_gen_ = 1;
  std::deque<reload_request> reloads_;
  std::deque<std::pair<cluster::node_handle, cluster::exit_status>> exits_;
  cluster::cut_off_hosts cut_off_;  // hosts the next launches avoid (note_cut_off)
  // Replicas whose heartbeats stopped (SIGSTOP, a hung host), with the transport's words: fenced.
  std::vector<std::pair<replica_ref, std::string>> silent_;
  std::string last_swap_error_;
  std::map<std::string, watch_stamp> tried_;     // watch_key(model dir) -> what was swapped to or refused
  std::map<std::string, watch_stamp> settling_;  // a tried dir changed since: its stamp at the last poll
  // Whether --watch may take the model dir `key` as `stamp` says it is now: never tried, or tried
  // and changed since and then unchanged for a poll (under mu_).
  bool untried_or_settled(const std::string& key, const watch_stamp& stamp);
  std::set<std::string> passed_over_;  // model dirs --watch found not the user's own (logged once)
  std::set<std::string> older_seen_;   // model dirs --watch found older than the one serving
  bool watch_primed_ = false;          // --watch has looked once: an older dir seen after is logged
  std::map<std::string, std::int64_t> incompatible_;  // model dir -> created_unix_ms of other inputs (logged)
  bool hup_look_ = false;  // a SIGHUP asked --watch to look now: its outcome is logged
  std::uint64_t restarts_ = 0;
  bool stopping_ = false;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> announced_{false};  // server.json written for this server (ready_answer)
  std::atomic<bool> draining_{false};   // stopping after drain_ms: readiness 503 (ready_answer)
  std::thread ticker_;
  std::optional<signal_waiter> signals_;  // SIGINT, SIGTERM: stop; SIGHUP: reload
  // Progress and state: counters at the last report.
  std::optional<clock::time_point> last_progress_;
  std::uint64_t last_ok_ = 0, last_rows_ = 0;
  clock::time_point last_rate_at_{};
  double req_rate_ = 0, row_rate_ = 0;
  std::unordered_map<std::string, double> last_version_rows_;
  latency_window::summary last_latency_;
  std::optional<clock::time_point> next_watch_;
};

}  // namespace troupe::serve
