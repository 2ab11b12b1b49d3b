// Gradient mode: whether differentiable functions record the graph. Thread-local, because each
// pipeline stage runs forward and backward on its own thread.
#pragma once

namespace echelon {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Disables recording for its scope on this thread (evaluation, optimizer steps).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace echelon
