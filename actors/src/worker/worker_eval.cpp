// A worker's evaluation on the test set (the master's Evaluate): the test store read once, from the
// local store or (served records) from the master's record server.
#include <spdlog/spdlog.h>

#include <limits>

#include "troupe/nn/metrics.hpp"
#include "troupe/wire/messages.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

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
  const auto& test = *st.test;
  std::size_t bs = std::max<std::size_t>(1, st.node->spec().nn.train.eval_batch_size);
  std::vector<float> scores;
  std::size_t width = 0;
  double loss_sum = 0;
  for (std::size_t first = 0; first < test.rows; first += bs) {
    nn::batch b(test, first, std::min(bs, test.rows - first));
    if (auto p = st.strat->prepare_eval(*st.ctx, b); !p) return fail(p.err().to_string());
    auto loss = st.backend->predict(b);
    if (!loss) return fail(loss.err().to_string());
    loss_sum += *loss * static_cast<double>(b.size());
    auto probs = st.backend->probabilities();
    width = st.backend->output_width();
    scores.insert(scores.end(), probs.begin(), probs.begin() + static_cast<std::ptrdiff_t>(b.size() * width));
  }
  auto m =
      nn::score_predictions(scores, width, std::span<const float>(test.labels.data(), test.rows), loss_sum);
  res.setRows(test.rows);
  res.setLoss(m.loss);
  res.setAccuracy(m.accuracy);
  // AUC is for binary models (EvalResult): NaN for a multi-class one.
  res.setAuc(width == 1 ? m.auc : std::numeric_limits<double>::quiet_NaN());
  spdlog::info("evaluation on {} rows: loss {:.4f} accuracy {:.4f} auc {:.4f}", test.rows, res.getLoss(),
               res.getAccuracy(), res.getAuc());
  (void)st.node->reply(request, std::move(o.out), "worker");
}

}  // namespace troupe::actors
