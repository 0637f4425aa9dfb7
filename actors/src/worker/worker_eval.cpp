// A worker's evaluation on the test set (the master's Evaluate): the test store read once, from the
// local store or (served records) from the master's record server.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <span>

#include "troupe/nn/metrics.hpp"
#include "troupe/storage/disk_fault.hpp"
#include "troupe/wire/messages.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

namespace {

// The model's outputs on rows [first, last) of `test`, in eval_batch_size batches.
struct scored_rows {
  std::vector<float> scores;  // width per row
  std::size_t width = 0;
  double loss_sum = 0;  // the batches' mean losses weighted by their rows
};

expected<scored_rows> score_rows(worker_state& st, const nn::dataset& test, std::size_t first,
                                 std::size_t last) {
  const std::size_t bs = std::max<std::size_t>(1, st.node->spec().nn.train.eval_batch_size);
  scored_rows out;
  for (std::size_t at = first; at < last; at += bs) {
    nn::batch b(test, at, std::min(bs, last - at));
    if (auto p = st.strat->prepare_eval(*st.ctx, b); !p) return p.err();
    auto loss = st.backend->predict(b);
    if (!loss) return loss.err();
    out.loss_sum += *loss * static_cast<double>(b.size());
    auto probs = st.backend->probabilities();
    out.width = st.backend->output_width();
    out.scores.insert(out.scores.end(), probs.begin(),
                      probs.begin() + static_cast<std::ptrdiff_t>(b.size() * out.width));
  }
  return out;
}

// The part's metrics; for a binary model (width 1) its scores and labels too, for the master's AUC
// of every part (AUC is NaN for a multi-class one).
void write_result(schema::EvalResult::Builder res, const scored_rows& scored, std::span<const float> labels) {
  const auto& scores = scored.scores;
  auto m = nn::score_predictions(scores, scored.width, labels, scored.loss_sum);
  res.setRows(m.rows);
  res.setLoss(m.loss);
  res.setAccuracy(m.accuracy);
  res.setAuc(scored.width == 1 ? m.auc : std::numeric_limits<double>::quiet_NaN());
  if (scored.width != 1) return;
  auto s = res.initScores(static_cast<unsigned>(scores.size()));
  auto l = res.initLabels(static_cast<unsigned>(labels.size()));
  for (std::size_t i = 0; i < scores.size() && i < labels.size(); ++i) {
    s.set(static_cast<unsigned>(i), scores[i]);
    l.set(static_cast<unsigned>(i), labels[i]);
  }
}

// The job's final state, for an evaluation. A disk fault pauses the job's end: it is reported to
// the master (DiskFault "final state") until a write succeeds, and the master asks again (the runner
// fails the job after job.disk_full_timeout_ms).
expected<void> write_evaluated_state(worker_state& st) {
  auto w = write_final_state(st);
  const std::string fault = !w && storage::is_disk_fault(w.err()) ? w.err().to_string() : "";
  if (fault != st.final_state_fault) {
    st.final_state_fault = fault;
    if (auto r = st.node->send("master", "master", wire::disk_fault("final state", fault), "worker"); !r)
      spdlog::debug("disk fault report: {}", r.err().to_string());
  }
  if (!w) spdlog::error("{}", w.err().to_string());
  return w;
}

}  // namespace

void evaluate(worker_state& st, const message& request) {
  auto o = wire::job_reply(request);
  auto res = o.body.initEvalResult();
  auto fail = [&](const std::string& e) {
    res.setError(e);
    (void)st.node->reply(request, std::move(o.out), "worker");
  };
  if (!st.test) {
    auto d = st.feed->test_set();
    if (!d) return fail(d.err().to_string());
    st.test = std::move(*d);
  }
  const auto ask = request.body().getJob().getEvaluate();
  const std::uint64_t parts = ask.getParts(),
                      part = std::min<std::uint64_t>(ask.getPart(), parts ? parts - 1 : 0);
  const auto& test = *st.test;
  // Part `part` of `parts`: rows [rows*part/parts, rows*(part+1)/parts); parts 0: all of them.
  const std::size_t first = parts ? test.rows * part / parts : 0,
                    last = parts ? test.rows * (part + 1) / parts : test.rows;
  auto scored = score_rows(st, test, first, last);
  if (!scored) return fail(scored.err().to_string());
  write_result(res, *scored, std::span<const float>(test.labels.data() + first, last - first));
  spdlog::info("evaluation of rows {}..{} of {}: loss {:.4f} accuracy {:.4f} auc {:.4f}", first, last,
               test.rows, res.getLoss(), res.getAccuracy(), res.getAuc());
  // What was scored is the job's model: one whose state could not be written is no evaluation
  // (the job ended "ok" with nothing to export, and it could not be resumed).
  if (parts == 0 || ask.getWriteState())
    if (auto w = write_evaluated_state(st); !w) {
      res.setDiskFault(!st.final_state_fault.empty());
      return fail(w.err().to_string());
    }
  (void)st.node->reply(request, std::move(o.out), "worker");
}

}  // namespace troupe::actors
