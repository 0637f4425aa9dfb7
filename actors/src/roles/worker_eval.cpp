// A worker's evaluation on the test set (the master's Evaluate): the test store read once, from the
// local store or (served records) from the master's record server.
#include <spdlog/spdlog.h>

#include <limits>

#include "troupe/job/data.hpp"
#include "troupe/nn/metrics.hpp"
#include "troupe/wire/messages.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

namespace {
expected<nn::dataset> load_test_set(worker_state& st) {
  if (st.fetch) return st.fetch->test_set(std::chrono::seconds(60));
  auto store = storage::record_store::open(st.data.test_dir);
  if (!store) return store.err();
  return job::read_all(*store);
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
    auto d = load_test_set(st);
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
  std::span<const float> labels(test.labels.data(), test.rows);
  res.setRows(test.rows);
  res.setLoss(test.rows ? loss_sum / static_cast<double>(test.rows) : 0.0);
  if (width == 1) {
    std::size_t right = 0;
    for (std::size_t i = 0; i < test.rows; ++i) right += (scores[i] >= 0.5f) == (labels[i] >= 0.5f);
    res.setAccuracy(test.rows ? static_cast<double>(right) / static_cast<double>(test.rows) : 0.0);
    res.setAuc(nn::auc(scores, labels));
  } else {
    res.setAccuracy(nn::accuracy(scores, width, labels));
    res.setAuc(std::numeric_limits<double>::quiet_NaN());  // AUC is for binary models (EvalResult)
  }
  spdlog::info("evaluation on {} rows: loss {:.4f} accuracy {:.4f} auc {:.4f}", test.rows, res.getLoss(),
               res.getAccuracy(), res.getAuc());
  (void)st.node->reply(request, std::move(o.out), "worker");
}

}  // namespace troupe::actors
