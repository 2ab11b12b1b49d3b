#include <echelon/base/thread_name.h>

#include <pthread.h>

namespace echelon {

namespace {
constexpr size_t kMaxLength = 15;  // Linux: 16 bytes with the terminating zero
}  // namespace

void set_thread_name(std::thread& thread, const std::string& name) {
#if defined(__linux__)
  pthread_setname_np(thread.native_handle(), name.substr(0, kMaxLength).c_str());
#else
  (void)thread;
  (void)name;
#endif
}

void set_thread_name(const std::string& name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name.substr(0, kMaxLength).c_str());
#else
  (void)name;
#endif
}

std::string thread_name() {
#if defined(__linux__)
  char name[kMaxLength + 1] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0) return name;
#endif
  return "";
}

}  // namespace echelon
