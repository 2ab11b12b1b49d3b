// Learning-rate schedules: a pure function lr_at(epoch, step_in_epoch, steps_per_epoch), so a
// resumed run gets the same rates. Step and multistep change at epoch boundaries (as PyTorch's
// StepLR/MultiStepLR stepped once per epoch); cosine and the linear warm-up are evaluated at the
// fractional epoch t = epoch + step_in_epoch / steps_per_epoch, so they move every step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace echelon {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr_at(int64_t epoch, int64_t step_in_epoch, int64_t steps_per_epoch) const = 0;
  virtual std::string describe() const = 0;
};

class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double base_lr);
  double lr_at(int64_t epoch, int64_t step_in_epoch, int64_t steps_per_epoch) const override;
  std::string describe() const override;

 private:
  double base_lr_;
};

// base * gamma^(epoch / step_size).
class StepLr : public LrSchedule {
 public:
  StepLr(double base_lr, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch, int64_t step_in_epoch, int64_t steps_per_epoch) const override;
  std::string describe() const override;

 private:
  double base_lr_;
  int64_t step_size_;
  double gamma_;
};

// base * gamma^(number of milestones <= epoch).
class MultiStepLr : public LrSchedule {
 public:
  MultiStepLr(double base_lr, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t epoch, int64_t step_in_epoch, int64_t steps_per_epoch) const override;
  std::string describe() const override;

 private:
  double base_lr_;
  std::vector<int64_t> milestones_;
  double gamma_;
};

// min + (base - min) * (1 + cos(pi * t / total_epochs)) / 2, constant min after total_epochs.
class CosineLr : public LrSchedule {
 public:
  CosineLr(double base_lr, double total_epochs, double min_lr = 0.0);
  double lr_at(int64_t epoch, int64_t step_in_epoch, int64_t steps_per_epoch) const override;
  std::string describe() const override;

 private:
  double base_lr_, total_epochs_, min_lr_;
};

// Linear warm-up composed with any schedule: for t < warmup_epochs the rate is
// inner(t) * (start_factor + (1 - start_factor) * t / warmup_epochs); afterwards inner unchanged.
class WarmupLr : public LrSchedule {
 public:
  WarmupLr(std::shared_ptr<LrSchedule> inner, double warmup_epochs, double start_factor = 0.0);
  double lr_at(int64_t epoch, int64_t step_in_epoch, int64_t steps_per_epoch) const override;
  std::string describe() const override;

 private:
  std::shared_ptr<LrSchedule> inner_;
  double warmup_epochs_, start_factor_;
};

struct LrScheduleOptions {
  std::string kind = "constant";  // constant | step | multistep | cosine
  double base_lr = 0.01;
  double gamma = 0.1;                    // step, multistep
  int64_t step_size = 30;                // step: epochs between decays
  std::vector<int64_t> milestones = {};  // multistep
  double total_epochs = 0;               // cosine (required > 0)
  double min_lr = 0;                     // cosine
  double warmup_epochs = 0;              // > 0 wraps the schedule in WarmupLr
  double warmup_start_factor = 0;
};

// Builds the schedule; throws echelon::Error naming the bad field or unknown kind.
std::shared_ptr<LrSchedule> make_lr_schedule(const LrScheduleOptions& options);

}  // namespace echelon
