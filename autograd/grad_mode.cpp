#include <echelon/autograd/grad_mode.h>

namespace echelon {

namespace {
// Per thread: each pipeline stage's thread decides for itself whether it records.
thread_local bool tls_grad_enabled = true;
}  // namespace

bool grad_enabled() {
  return tls_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  tls_grad_enabled = enabled;
}

}  // namespace echelon
