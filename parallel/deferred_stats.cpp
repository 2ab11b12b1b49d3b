#include <echelon/parallel/deferred_stats.h>

#include <cmath>
#include <string>
#include <utility>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/loss.h>
#endif

namespace echelon::parallel {

DeferredStats::DeferredStats(Device device)
    : device_(device), guard_(Tensor::zeros({}, kFloat32, device)) {}

ops::StepStatistics DeferredStats::next_statistics(const Tensor& logits) const {
  // The correct count as correct_count (layers/loss.h) computes it, left on the device, and the
  // guard += 0 * loss (0 for a finite loss, NaN otherwise: the guard stays NaN once it turned).
  return {guard_, Tensor::empty({}, kFloat32, logits.device())};
}

void DeferredStats::record(const BatchResult& meta, const Tensor& loss, const Tensor& correct,
                           const Tensor& labels, int64_t classes) {
  ECH_CHECK(labels.dim() == 1 && correct.numel() == 1 && classes > 0,
            "deferred statistics: expected labels (N), a correct count and classes > 0, got ",
            labels.shape(), ", ", correct.shape(), " and ", classes);
  Pending p;
  p.meta = meta;
  p.loss = loss.detach();  // the value only: the autograd graph is freed by the backward
  p.correct = correct;
  p.labels = labels;
  p.classes = classes;
  pending_.push_back(std::move(p));
}

std::vector<BatchResult> DeferredStats::read() {
  std::vector<Pending> read;
  read.swap(pending_);
  if (read.empty()) return {};
  NoGradGuard no_grad;
  // Every loss, then every correct count, in one device tensor: one copy, one synchronisation.
  std::vector<Tensor> parts;
  parts.reserve(2 * read.size());
  for (const Pending& p : read) parts.push_back(p.loss.reshape({1}));
  for (const Pending& p : read) parts.push_back(p.correct.reshape({1}));
  const std::vector<float> values = ops::concat(parts, 0).cpu().to_vector<float>();
#if ECHELON_WITH_CUDA
  // The copy above waited for the stream, so every recorded cross-entropy has completed.
  try {
    cuda::check_deferred_target_errors();
  } catch (const Error& e) {
    fail_on_bad_label(read, e.what());
  }
#endif
  std::vector<BatchResult> results;
  results.reserve(read.size());
  bool all_finite = true;
  for (size_t i = 0; i < read.size(); ++i) {
    BatchResult r = read[i].meta;
    r.loss = values[i];
    r.correct = std::lround(values[read.size() + i]);
    r.finite = std::isfinite(r.loss);
    all_finite = all_finite && r.finite;
    results.push_back(r);
  }
  if (!all_finite) ops::fill_(guard_, 0.0);  // the caller decides whether training goes on
  return results;
}

void DeferredStats::take_last_as_template() {
  ECH_CHECK(!pending_.empty(), "deferred statistics: the captured step recorded no result");
  template_ = std::move(pending_.back());
  pending_.pop_back();
}

void DeferredStats::record_replay(const BatchResult& meta) {
  ECH_CHECK(template_.has_value(), "deferred statistics: a replay before any capture");
  NoGradGuard no_grad;
  Pending p;
  p.meta = meta;
  p.loss = template_->loss.clone();
  p.correct = template_->correct.clone();
  p.labels = template_->labels.clone();
  p.classes = template_->classes;
  pending_.push_back(std::move(p));
}

void DeferredStats::fail_on_bad_label(const std::vector<Pending>& read, const std::string& found) {
  // The error path only: the labels of the batches since the last read, back on the host.
  for (const Pending& p : read) {
    const std::vector<int64_t> labels = p.labels.cpu().to_vector<int64_t>();
    for (size_t row = 0; row < labels.size(); ++row) {
      if (labels[row] >= 0 && labels[row] < p.classes) continue;
      ECH_FAIL("training batch ", p.meta.batch_index, ": label[", row, "] = ", labels[row],
               " is not a class index in [0, ", p.classes,
               "); found on the device by the deferred label check and raised when the ",
               read.size(),
               " steps since the previous read were read back (that step's update and all later "
               "ones were not applied)");
    }
  }
  ECH_FAIL(found);  // the recorded batch is no longer among these: report what the device saw
}

ScopedDeferredTargetChecks::ScopedDeferredTargetChecks() {
#if ECHELON_WITH_CUDA
  previous_ = cuda::deferred_target_checks();
  cuda::set_deferred_target_checks(true);
#endif
}

ScopedDeferredTargetChecks::~ScopedDeferredTargetChecks() {
#if ECHELON_WITH_CUDA
  cuda::set_deferred_target_checks(previous_);
#endif
}

}  // namespace echelon::parallel
