// `troupe serve MODEL_DIR`: serves a model a job wrote through the Open Inference Protocol
// (docs/serving.md); `troupe serve reload`: swaps a running server to another model (`status` and
// `stop`: serve_admin.cpp); `troupe serve-replica`: one of its model replicas (started by the server, not by
// hand).
#include <filesystem>
#include <memory>
#include <sstream>
#include <vector>

#include "command.hpp"
#include "serve_admin.hpp"
#include "suggest.hpp"
#include "troupe/cluster/own_path.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/model/model_dir.hpp"
#include "troupe/serve/serve.hpp"

namespace troupe::cli {
namespace {

namespace fs = std::filesystem;

struct serve_flags {
  std::string model_dir, config;
  std::vector<std::string> sets;
  // Flags that override the config file's [serve] keys, as "key=value" (kept as given).
  struct flag_override {
    std::string key, value, origin;  // serve.<key> = value (TOML), set by `origin` ("--replicas -1")
  };
  std::vector<flag_override> overrides;
  bool quiet = false;
  // reload
  std::string reload_dir, reload_name, reload_root = "jobs";
  double reload_timeout_s = 300;
};

void add_override(CLI::App& sub, serve_flags& f, const std::string& flag, const std::string& key,
                  const std::string& help, bool quoted) {
  if (!quoted) {
    // A number (a negative one too: as a string, "-1" read as an unknown flag); its range is the
    // setting's, checked with the rest.
    sub.add_option_function<std::int64_t>(
           flag,
           [&f, flag, key](std::int64_t v) {
             f.overrides.push_back({key, std::to_string(v), flag + " " + std::to_string(v)});
           },
           help)
        ->type_name("INT");
    return;
  }
  auto* o = sub.add_option_function<std::string>(
      flag,
      [&f, flag, key](const std::string& v) {
        // Strings go in quoted (TOML).
        std::string value = "\"";
        for (char c : v) {
          if (c == '"' || c == '\\') value += '\\';
          value += c;
        }
        value += "\"";
        f.overrides.push_back({key, value, flag + " " + v});
      },
      help);
  o->type_name("TEXT");
}

int serve(const serve_flags& f) {
  // The file's paths are relative to it, as a job file's are.
  auto doc = f.config.empty() ? config_doc::from_string("", "<flags>")
                              : job::read_settings_file(f.config, {{"serve", "model"},
                                                                   {"serve", "watch"},
                                                                   {"serve", "root"},
                                                                   {"transport", "token_file"},
                                                                   {"log", "file"}});
  if (!doc) return usage_error(doc.err());
  for (const auto& o : f.overrides)
    if (auto r = doc->apply_override("serve." + o.key + "=" + o.value, o.origin); !r)
      return usage_error(r.err());
  for (const auto& s : f.sets)
    if (auto r = doc->apply_override(s); !r) return usage_error(r.err());
  auto settings = serve::read_settings(*doc);
  if (!settings) return usage_error(settings.err());
  auto& cfg = settings->serve;
  if (!f.model_dir.empty()) cfg.model = f.model_dir;
  if (f.quiet) cfg.progress = false;
  // A --watch directory that is not one is a typo that silently turned automatic deployment off.
  if (std::error_code ec; !cfg.watch.empty() && !std::filesystem::is_directory(cfg.watch, ec))
    return usage_error("serve: --watch " + cfg.watch + ": " +
                       (std::filesystem::exists(cfg.watch, ec) ? "not a directory" : "no such directory"));
  if (cfg.model.empty() && !cfg.watch.empty()) {
    auto newest = serve::newest_watched_model(cfg.watch);
    if (!newest) return usage_error(newest.err().context());
    cfg.model = *newest;
  }
  if (cfg.model.empty())
    return usage_error("serve: no model: give MODEL_DIR (a job's model/ directory) or --watch DIR");
  // `troupe serve stpo`: a mistyped subcommand reads as a model directory that is not there.
  if (std::error_code ec; !std::filesystem::exists(cfg.model, ec) && cfg.model.find('/') == std::string::npos)
    if (auto near = nearest(cfg.model, {"status", "stop", "reload"}))
      return usage_error("serve " + cfg.model + ": no model directory '" + cfg.model +
                         "', and no subcommand (did you mean 'troupe serve " + *near + "'?)");
  return serve::run_frontend(*settings);
}

int reload(const serve_flags& f) {
  quiet_logs();
  auto found =
      f.reload_name.empty() ? only_server("reload", f.reload_root) : expected<std::string>(f.reload_name);
  if (!found)
    return found.err() == core_errc::invalid_argument ? usage_error(found.err()) : run_error(found.err());
  const std::string name = *found;
  std::string dir = f.reload_dir;
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec))
    return usage_error("serve reload " + dir + ": no such directory (a model directory: jobs/<id>/model)");
  if (!dir.empty()) dir = fs::absolute(dir).string();
  auto r =
      serve::request_reload(f.reload_root, name, dir,
                            std::chrono::milliseconds(static_cast<std::int64_t>(f.reload_timeout_s * 1000)));
  if (!r) return run_error(r.err());
  std::printf("%s now serves version %s (generation %u)\n", name.c_str(), r->version.c_str(), r->generation);
  return 0;
}

const command_registrar reg{
    "serve", "Serve a trained model over HTTP (Open Inference Protocol; docs/serving.md)",
    [](CLI::App& sub) -> runner {
      auto f = std::make_shared<serve_flags>();
      sub.add_option("model_dir", f->model_dir, "the model directory (a job's jobs/<id>/model/, or a copy)");
      sub.add_option("--config", f->config, "a TOML file with [serve] (and [cluster], [transport]) settings")
          ->check(CLI::ExistingFile);
      sub.add_option("--set", f->sets, "override a setting: --set serve.max_batch=32 (repeatable)");
      add_override(sub, *f, "--name", "name", "the model's name in the URLs (default: model.json's model)",
                   true);
      add_override(sub, *f, "--replicas", "replicas", "model replicas (processes; default 1)", false);
      add_override(sub, *f, "--listen", "listen", "the HTTP address, host:port (default 127.0.0.1:8000)",
                   true);
      add_override(sub, *f, "--threads", "threads", "libtorch threads per replica (default 1)", false);
      add_override(sub, *f, "--max-batch", "max_batch", "rows per batch, and per request (default 64)",
                   false);
      add_override(sub, *f, "--max-delay-us", "max_delay_us",
                   "how long a batch waits for more rows while a replica is free (default 0)", false);
      add_override(sub, *f, "--max-queue-rows", "max_queue_rows",
                   "rows that may wait; past it 503 (default 4096)", false);
      add_override(sub, *f, "--watch", "watch", "a directory to watch for newer models (e.g. jobs/)", true);
      add_override(sub, *f, "--root", "root",
                   "the jobs root: state in <root>/serve/<name>/ (serve-UID/ where <root>/serve is not this "
                   "user's own; default jobs)",
                   true);
      add_override(sub, *f, "--device", "device", "cpu, cuda or cuda:N (default cpu)", true);
      sub.add_flag("--quiet", f->quiet, "no progress line");

      auto* rl = sub.add_subcommand(
          "reload", "Swap a running server to another model (or the same directory, re-read)");
      rl->add_option("model_dir", f->reload_dir,
                     "the new model directory (default: the one it serves, read again)");
      rl->add_option("--name", f->reload_name,
                     "the server's model name (default: the only running server under the root)");
      rl->add_option("--root", f->reload_root, "the jobs root (default jobs)");
      rl->add_option("--timeout", f->reload_timeout_s, "seconds to wait for the swap (default 300)")
          ->check(CLI::Range(0.1, 86400.0));
      auto admin = add_serve_admin(sub);
      return [f, rl, admin]() -> int {
        if (auto code = admin()) return *code;
        return rl->parsed() ? reload(*f) : serve(*f);
      };
    }};

const command_registrar reg_replica{
    "serve-replica", "One model replica of 'troupe serve' (started by it; docs/serving.md)",
    [](CLI::App& sub) -> runner {
      auto o = std::make_shared<serve::replica_options>();
      auto cpus_text = std::make_shared<std::string>();
      sub.add_option("--connect", o->connect, "the front end's transport address")->required();
      sub.add_option("--name", o->name, "node name")->required();
      sub.add_option("--incarnation", o->incarnation, "restart count");
      sub.add_option("--generation", o->generation, "model generation");
      sub.add_option("--model", o->model_dir, "model directory")->required();
      sub.add_option("--version", o->version, "the version its answers name");
      sub.add_option("--threads", o->threads, "libtorch threads")->check(CLI::Range(1, 1024));
      sub.add_option("--device", o->device, "cpu, cuda, cuda:N");
      sub.add_option("--max-batch", o->max_batch, "largest batch")->check(CLI::Range(1, 1 << 16));
      sub.add_option("--warmup", o->warmup, "warm-up forwards per size")->check(CLI::Range(0, 100000));
      sub.add_option("--cpus", *cpus_text, "pin to these CPUs: 0,1");
      sub.add_option("--token-file", o->token_file, "the front end's token")->required();
      auto hb = std::make_shared<std::pair<std::int64_t, std::int64_t>>(500, 5000);
      sub.add_option("--heartbeat-ms", hb->first, "heartbeat interval")->check(CLI::Range(1, 60000));
      sub.add_option("--heartbeat-timeout-ms", hb->second, "heartbeat timeout")->check(CLI::Range(2, 600000));
      sub.group("");  // not for people: the front end starts it
      return [o, cpus_text, hb]() -> int {
        o->heartbeat_interval = std::chrono::milliseconds(hb->first);
        o->heartbeat_timeout = std::chrono::milliseconds(std::max(hb->second, hb->first + 1));
        std::stringstream in(*cpus_text);
        std::string c;
        while (std::getline(in, c, ','))
          if (!c.empty()) o->cpus.push_back(std::stoi(c));
        return serve::run_replica(*o);
      };
    }};

}  // namespace
}  // namespace troupe::cli
