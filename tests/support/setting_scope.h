// A process-wide setting (thread count, kernel choice, ISA switch), given by its getter and
// setter, changed for a scope and restored when the scope ends, also when a check throws. The
// fast-path tests stack several: `SettingScope threads(cpu::fast::num_threads,
// cpu::fast::set_num_threads, 2);`.
#pragma once

namespace echelon::test {

template <typename T>
class SettingScope {
 public:
  SettingScope(T (*get)(), void (*set)(T), T value) : set_(set), saved_(get()) { set(value); }
  ~SettingScope() { set_(saved_); }
  SettingScope(const SettingScope&) = delete;
  SettingScope& operator=(const SettingScope&) = delete;

 private:
  void (*set_)(T);
  T saved_;
};

}  // namespace echelon::test
