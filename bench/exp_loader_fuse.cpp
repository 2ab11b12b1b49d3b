// Experiment: loader epoch throughput (images/s) on a generated JPEG folder, the fused
// decode+augment stage against the separate decode and augment stages (LoaderOptions::
// fuse_decode_augment), same batches. Each round runs one epoch of each, alternating; the table
// gives every round and the median of the per-round ratios, for wall time and for process CPU
// time (on a shared machine the separate stages' extra threads win a larger share of the cores,
// so images per CPU-second is the fairer measure of the work saved).
// Usage: exp_loader_fuse [--images N] [--size S] [--workers W] [--rounds R] [--dir D]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <echelon/data/image_codec.h>
#include <echelon/data/loader.h>

#include "bench/driver_args.h"

using namespace echelon::data;
namespace fs = std::filesystem;

namespace {

// dir/class<k>/img<i>.jpg: `count` RGB JPEGs of size x size (quality 90) with smooth gradients
// and edges, 10 classes.
void write_folder(const fs::path& dir, int64_t count, int64_t size) {
  fs::remove_all(dir);
  for (int64_t i = 0; i < count; ++i) {
    const fs::path folder = dir / ("class" + std::to_string(i % 10));
    fs::create_directories(folder);
    Image image{size, size, 3, std::vector<uint8_t>(static_cast<size_t>(size * size * 3))};
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < size; ++y)
        for (int64_t x = 0; x < size; ++x)  // (C, H, W)
          image.pixels[(c * size + y) * size + x] = static_cast<uint8_t>(
              ((x + i) * (c + 1) * 3 + y * 2 + ((x / 8 + y / 8 + i) % 2) * 60) % 256);
    write_file((folder / ("img" + std::to_string(i) + ".jpg")).string(), encode_jpeg(image, 90));
  }
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Rates {
  double wall = 0, cpu = 0;  // images per wall second, per CPU second of this process
};

// One epoch, from start_epoch to the last batch.
Rates epoch_rates(const std::shared_ptr<Dataset>& dataset, const LoaderOptions& options) {
  Loader loader(dataset, options);
  const double cpu_start = process_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  loader.start_epoch(0);
  int64_t images = 0;
  while (auto batch = loader.next()) images += batch->images.size(0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto n = static_cast<double>(images);
  return {n / seconds, n / (process_cpu_seconds() - cpu_start)};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t images = 2000, size = 64;
  int workers = 2, rounds = 3;
  std::string dir = (fs::temp_directory_path() / "echelon_exp_loader_fuse").string();
  CLI::App app{"Loader epoch images/s: fused decode+augment vs separate stages"};
  app.add_option("--images", images, "JPEG files to generate")->check(CLI::Range(10, 1000000));
  app.add_option("--size", size, "image side in pixels")->check(CLI::Range(8, 4096));
  app.add_option("--workers", workers, "workers per loader stage")->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds, "alternating rounds (median taken)")->check(CLI::Range(1, 99));
  app.add_option("--dir", dir, "scratch folder for the JPEGs (replaced)");
  echelon::bench::parse_args_or_exit(app, argc, argv);
  if (!have_stb() || !have_turbojpeg()) {
    std::fprintf(stderr, "exp_loader_fuse: needs stb (to write JPEGs) and libjpeg-turbo\n");
    return 2;
  }
  write_folder(dir, images, size);
  const auto dataset = make_image_folder_dataset(dir, 3);
  LoaderOptions options;
  options.batch_size = 64;
  options.workers = workers;
  options.augment.crop_padding = 4;
  options.augment.horizontal_flip = true;
  options.augment.mean = {0.485f, 0.456f, 0.406f};
  options.augment.std = {0.229f, 0.224f, 0.225f};
  std::printf(
      "%lld JPEGs of %lldx%lld, %d workers per stage, batch 64, crop:4 + flip + normalise\n",
      static_cast<long long>(images), static_cast<long long>(size), static_cast<long long>(size),
      workers);
  std::printf(
      "| round | separate img/s | fused img/s | fused / separate | separate img/CPU-s | fused "
      "img/CPU-s | fused / separate |\n|---|---|---|---|---|---|---|\n");
  std::vector<double> wall_ratios, cpu_ratios;
  for (int r = 0; r < rounds; ++r) {
    options.fuse_decode_augment = false;
    const Rates separate = epoch_rates(dataset, options);
    options.fuse_decode_augment = true;
    const Rates fused = epoch_rates(dataset, options);
    wall_ratios.push_back(fused.wall / separate.wall);
    cpu_ratios.push_back(fused.cpu / separate.cpu);
    std::printf("| %d | %.0f | %.0f | %.2fx | %.0f | %.0f | %.2fx |\n", r + 1, separate.wall,
                fused.wall, wall_ratios.back(), separate.cpu, fused.cpu, cpu_ratios.back());
  }
  std::printf("| median | | | **%.2fx** | | | **%.2fx** |\n", median(wall_ratios),
              median(cpu_ratios));
  fs::remove_all(dir);
  return 0;
}
