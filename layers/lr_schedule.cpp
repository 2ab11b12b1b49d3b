#include <echelon/layers/lr_schedule.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <echelon/base/error.h>

namespace echelon {

namespace {
double fractional_epoch(int64_t epoch, int64_t step_in_epoch, int64_t steps_per_epoch) {
  ECH_CHECK(epoch >= 0 && step_in_epoch >= 0 && steps_per_epoch >= 1,
            "lr_at: invalid position epoch=", epoch, " step=", step_in_epoch,
            " steps_per_epoch=", steps_per_epoch);
  return static_cast<double>(epoch) +
         static_cast<double>(step_in_epoch) / static_cast<double>(steps_per_epoch);
}
}  // namespace

ConstantLr::ConstantLr(double base_lr) : base_lr_(base_lr) {
  ECH_CHECK(base_lr > 0, "lr schedule: base lr must be > 0, got ", base_lr);
}
double ConstantLr::lr_at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  fractional_epoch(epoch, step, steps_per_epoch);
  return base_lr_;
}
std::string ConstantLr::describe() const {
  return str("constant(lr=", base_lr_, ")");
}

StepLr::StepLr(double base_lr, int64_t step_size, double gamma)
    : base_lr_(base_lr), step_size_(step_size), gamma_(gamma) {
  ECH_CHECK(base_lr > 0 && step_size >= 1 && gamma > 0, "step schedule: invalid lr=", base_lr,
            " step_size=", step_size, " gamma=", gamma);
}
double StepLr::lr_at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  fractional_epoch(epoch, step, steps_per_epoch);
  const int64_t decays = epoch / step_size_;  // whole steps only: the LR drops at their ends
  return base_lr_ * std::pow(gamma_, static_cast<double>(decays));
}
std::string StepLr::describe() const {
  return str("step(lr=", base_lr_, ", step_size=", step_size_, ", gamma=", gamma_, ")");
}

MultiStepLr::MultiStepLr(double base_lr, std::vector<int64_t> milestones, double gamma)
    : base_lr_(base_lr), milestones_(std::move(milestones)), gamma_(gamma) {
  ECH_CHECK(base_lr > 0 && gamma > 0, "multistep schedule: invalid lr=", base_lr, " gamma=", gamma);
  ECH_CHECK(!milestones_.empty() && std::is_sorted(milestones_.begin(), milestones_.end()) &&
                milestones_.front() >= 0,
            "multistep schedule: milestones must be a non-empty, increasing list of epochs, got ",
            milestones_);
}
double MultiStepLr::lr_at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  fractional_epoch(epoch, step, steps_per_epoch);
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lr_ * std::pow(gamma_, static_cast<double>(passed));
}
std::string MultiStepLr::describe() const {
  return str("multistep(lr=", base_lr_, ", milestones=", milestones_, ", gamma=", gamma_, ")");
}

CosineLr::CosineLr(double base_lr, double total_epochs, double min_lr)
    : base_lr_(base_lr), total_epochs_(total_epochs), min_lr_(min_lr) {
  ECH_CHECK(base_lr > 0 && total_epochs > 0 && min_lr >= 0 && min_lr <= base_lr,
            "cosine schedule: invalid lr=", base_lr, " total_epochs=", total_epochs,
            " min_lr=", min_lr);
}
double CosineLr::lr_at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  const double t = std::min(fractional_epoch(epoch, step, steps_per_epoch), total_epochs_);
  return min_lr_ +
         (base_lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * t / total_epochs_));
}
std::string CosineLr::describe() const {
  return str("cosine(lr=", base_lr_, ", epochs=", total_epochs_, ", min_lr=", min_lr_, ")");
}

WarmupLr::WarmupLr(std::shared_ptr<LrSchedule> inner, double warmup_epochs, double start_factor)
    : inner_(std::move(inner)), warmup_epochs_(warmup_epochs), start_factor_(start_factor) {
  ECH_CHECK(inner_ != nullptr && warmup_epochs > 0 && start_factor >= 0 && start_factor <= 1,
            "warm-up schedule: invalid warmup_epochs=", warmup_epochs,
            " start_factor=", start_factor);
}
double WarmupLr::lr_at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  const double t = fractional_epoch(epoch, step, steps_per_epoch);
  const double lr = inner_->lr_at(epoch, step, steps_per_epoch);
  if (t >= warmup_epochs_) return lr;
  return lr * (start_factor_ + (1.0 - start_factor_) * t / warmup_epochs_);
}
std::string WarmupLr::describe() const {
  return str("warmup(epochs=", warmup_epochs_, ", start_factor=", start_factor_, ") + ",
             inner_->describe());
}

std::shared_ptr<LrSchedule> make_lr_schedule(const LrScheduleOptions& o) {
  std::shared_ptr<LrSchedule> schedule;
  if (o.kind == "constant") {
    schedule = std::make_shared<ConstantLr>(o.base_lr);
  } else if (o.kind == "step") {
    schedule = std::make_shared<StepLr>(o.base_lr, o.step_size, o.gamma);
  } else if (o.kind == "multistep") {
    schedule = std::make_shared<MultiStepLr>(o.base_lr, o.milestones, o.gamma);
  } else if (o.kind == "cosine") {
    schedule = std::make_shared<CosineLr>(o.base_lr, o.total_epochs, o.min_lr);
  } else {
    ECH_FAIL("lr schedule: unknown kind '", o.kind, "' (known: constant, step, multistep, cosine)");
  }
  if (o.warmup_epochs > 0) {
    schedule = std::make_shared<WarmupLr>(schedule, o.warmup_epochs, o.warmup_start_factor);
  }
  return schedule;
}

}  // namespace echelon
