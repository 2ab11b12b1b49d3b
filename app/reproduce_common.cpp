#include <echelon/app/reproduce_common.h>

#include <cstdio>
#include <cstdlib>

#include <echelon/base/file.h>

namespace echelon::app::reproduce {

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

const char* size_name(ReproduceSize size) {
  switch (size) {
    case ReproduceSize::Full:
      return "full";
    case ReproduceSize::Quick:
      return "quick";
    case ReproduceSize::Smoke:
      return "smoke";
  }
  return "?";
}

void finish_reproduce(json::Value& result, std::chrono::steady_clock::time_point start,
                      const ReproduceOptions& options, std::ostream& out) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double load[3] = {0, 0, 0};
  // The load says how far the timings can be trusted on a shared machine.
  const bool have_load = getloadavg(load, 3) == 3;
  out << "\nWall time " << fmt("%.0f", seconds) << " s; load average "
      << (have_load
              ? fmt("%.2f", load[0]) + ", " + fmt("%.2f", load[1]) + ", " + fmt("%.2f", load[2])
              : std::string("unknown"))
      << "\n";
  out.flush();
  result.set("wall_s", seconds);
  if (have_load) result.set("load_average_1min", load[0]);
  if (!options.json_path.empty()) write_file_atomic(options.json_path, result.dump(2) + "\n");
}

}  // namespace echelon::app::reproduce
