// Experiment: decode + random crop + flip + normalise throughput (images/s) vs worker threads on
// a JPEG corpus written from Fashion-MNIST (28x28 upscaled to 3 x SIZE x SIZE, tinted), three ways:
//   stb    decode_image(Stb) + augment_image + to_float        (the peer)
//   turbo  decode_image(TurboJpeg) + augment_image + to_float  (the old libjpeg-turbo path)
//   fused  decode_augment_to_float (reused decoder, one-pass crop/flip/normalise)
// plus, when SIZE >= 64, "half": decode_image_scaled to SIZE/2 (DCT-domain 1/2) + the same
// augment. Each cell is the median of 3 rounds, the modes alternating within a round.
// Usage: exp_decode [images] [fashion-mnist dir] [size]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <echelon/data/dataset.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/transforms.h>

#include "bench/driver_args.h"

using namespace echelon::data;

namespace {

std::vector<std::vector<uint8_t>> make_corpus(int64_t count, const std::string& dir, int64_t size) {
  const LabeledImages set = load_fashion_mnist(dir, "test");
  const auto pixels = set.images.to_vector<uint8_t>();
  std::vector<std::vector<uint8_t>> corpus;
  for (int64_t i = 0; i < count; ++i) {
    Image image{size, size, 3, std::vector<uint8_t>(size * size * 3)};
    const uint8_t* src = pixels.data() + (i % set.images.size(0)) * 784;
    for (int64_t y = 0; y < size; ++y)
      for (int64_t x = 0; x < size; ++x)
        for (int64_t c = 0; c < 3; ++c)  // tint the channels so colour decoding is exercised
          image.pixels[(c * size + y) * size + x] =  // (C, H, W)
              static_cast<uint8_t>(src[(y * 28 / size) * 28 + x * 28 / size] * (3 - c) / 3);
    corpus.push_back(encode_jpeg(image, 90));
  }
  return corpus;
}

enum class Mode { Stb, Turbo, Fused, Half };

AugmentOptions augment_options() {
  AugmentOptions augment;
  augment.crop_padding = 4;
  augment.horizontal_flip = true;
  augment.mean = {0.5f};
  augment.std = {0.25f};
  return augment;
}

void process(const std::vector<uint8_t>& jpeg, Mode mode, const AugmentKey& key,
             std::vector<float>& out) {
  static const AugmentOptions augment = augment_options();
  if (mode == Mode::Fused) {
    int64_t h = 0, w = 0;
    decode_augment_to_float(jpeg, "corpus", 3, augment, key, out, h, w);
    return;
  }
  Image image;
  if (mode == Mode::Half) {
    const int64_t half = static_cast<int64_t>(std::sqrt(out.size() / 3)) / 2;
    image = decode_image_scaled(jpeg, "corpus", 3, half, half);
  } else {
    image = decode_image(jpeg, "corpus", 3,
                         mode == Mode::Stb ? ImageDecoder::Stb : ImageDecoder::TurboJpeg);
  }
  const Image augmented = augment_image(image, augment, key);
  to_float(augmented, augment, out.data());
}

double images_per_second(const std::vector<std::vector<uint8_t>>& corpus, Mode mode, int workers,
                         int64_t size) {
  std::atomic<size_t> next{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&] {
      std::vector<float> out(static_cast<size_t>(3 * size * size));
      for (size_t i; (i = next.fetch_add(1)) < corpus.size();)
        process(corpus[i], mode, {1, 0, static_cast<int64_t>(i), 0}, out);
    });
  for (auto& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(corpus.size()) / seconds;
}

double median3(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t count = 4000;
  std::string dir = kDefaultFashionMnistDir;
  int64_t size = 56;
  CLI::App app{"JPEG decode + crop + flip images/s per core: stb vs libjpeg-turbo paths",
               "exp_decode"};
  app.option_defaults()->always_capture_default();
  app.add_option("images", count, "JPEGs in the corpus")->check(CLI::Range(1, 10000000));
  app.add_option("dir", dir, "Fashion-MNIST folder (the corpus is made from t10k)")
      ->check(CLI::ExistingDirectory);
  app.add_option("size", size, "Side of the JPEGs (upscaled from 28)")->check(CLI::Range(8, 4096));
  echelon::bench::parse_args_or_exit(app, argc, argv);
  if (!have_stb() || !have_turbojpeg()) {
    std::printf("exp_decode: this build lacks stb_image or libjpeg-turbo; nothing to compare\n");
    return 0;
  }
  const auto corpus = make_corpus(count, dir, size);
  size_t bytes = 0;
  for (const auto& jpeg : corpus) bytes += jpeg.size();
  std::printf(
      "corpus: %lld JPEGs %lldx%lldx3 q90 from Fashion-MNIST t10k, mean %.0f bytes; "
      "hardware threads %u\n\n",
      static_cast<long long>(count), static_cast<long long>(size), static_cast<long long>(size),
      static_cast<double>(bytes) / count, std::thread::hardware_concurrency());
  const bool half = size >= 64;
  std::printf(
      "| workers | stb (img/s) | turbo (img/s) | fused (img/s) |%s turbo/stb | fused/stb |%s\n",
      half ? " half (img/s) |" : "", half ? " half/stb |" : "");
  std::printf("|---|---|---|---|---|---|%s\n", half ? "---|---|" : "");
  for (int workers : {1, 2}) {
    std::vector<double> rate[4];
    for (int round = 0; round < 3; ++round)
      for (Mode mode : {Mode::Stb, Mode::Turbo, Mode::Fused, Mode::Half})
        if (mode != Mode::Half || half)
          rate[static_cast<int>(mode)].push_back(images_per_second(corpus, mode, workers, size));
    const double stb = median3(rate[0]), turbo = median3(rate[1]), fused = median3(rate[2]);
    std::printf("| %d | %.0f | %.0f | %.0f |", workers, stb, turbo, fused);
    if (half) std::printf(" %.0f |", median3(rate[3]));
    std::printf(" %.2f | %.2f |", turbo / stb, fused / stb);
    if (half) std::printf(" %.2f |", median3(rate[3]) / stb);
    std::printf("\n");
  }
  return 0;
}
