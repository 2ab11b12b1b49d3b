// Experiment: decode + augment throughput (images/s) vs worker threads, stb_image vs
// libjpeg-turbo, on a JPEG corpus written from Fashion-MNIST (28x28 upscaled to 3x56x56 so a
// decode costs something). Usage: exp_decode [images] [fashion-mnist dir]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <echelon/data/dataset.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/transforms.h>

using namespace echelon::data;

namespace {

std::vector<std::vector<uint8_t>> make_corpus(int64_t count, const std::string& dir) {
  const LabeledImages set = load_fashion_mnist(dir, "test");
  const auto pixels = set.images.to_vector<uint8_t>();
  std::vector<std::vector<uint8_t>> corpus;
  for (int64_t i = 0; i < count; ++i) {
    Image image{56, 56, 3, std::vector<uint8_t>(56 * 56 * 3)};
    const uint8_t* src = pixels.data() + (i % set.images.size(0)) * 784;
    for (int64_t y = 0; y < 56; ++y)
      for (int64_t x = 0; x < 56; ++x)
        for (int64_t c = 0; c < 3; ++c)  // tint the channels so colour decoding is exercised
          image.pixels[(c * 56 + y) * 56 + x] =  // (C, H, W)
              static_cast<uint8_t>(src[(y / 2) * 28 + x / 2] * (3 - c) / 3);
    corpus.push_back(encode_jpeg(image, 90));
  }
  return corpus;
}

double images_per_second(const std::vector<std::vector<uint8_t>>& corpus, ImageDecoder decoder,
                         int workers) {
  AugmentOptions augment;
  augment.crop_padding = 4;
  augment.horizontal_flip = true;
  augment.mean = {0.5f};
  augment.std = {0.25f};
  std::atomic<size_t> next{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&] {
      std::vector<float> out(3 * 56 * 56);
      for (size_t i; (i = next.fetch_add(1)) < corpus.size();) {
        const Image image = decode_image(corpus[i], "corpus", 3, decoder);
        const Image augmented = augment_image(image, augment, {1, 0, static_cast<int64_t>(i), 0});
        to_float(augmented, augment, out.data());
      }
    });
  for (auto& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(corpus.size()) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t count = argc > 1 ? std::atoll(argv[1]) : 4000;
  const std::string dir = argc > 2 ? argv[2] : kDefaultFashionMnistDir;
  if (!have_stb()) {
    std::printf("exp_decode: this build has no stb_image; nothing to measure\n");
    return 0;
  }
  const auto corpus = make_corpus(count, dir);
  size_t bytes = 0;
  for (const auto& jpeg : corpus) bytes += jpeg.size();
  std::printf(
      "corpus: %lld JPEGs 56x56x3 q90 from Fashion-MNIST t10k, mean %.0f bytes; "
      "hardware threads %u\n\n",
      static_cast<long long>(count), static_cast<double>(bytes) / count,
      std::thread::hardware_concurrency());
  std::printf("| workers | stb_image (img/s) | libjpeg-turbo (img/s) | turbo/stb |\n");
  std::printf("|---|---|---|---|\n");
  for (int workers : {1, 2, 4}) {
    const double stb = images_per_second(corpus, ImageDecoder::Stb, workers);
    if (have_turbojpeg()) {
      const double turbo = images_per_second(corpus, ImageDecoder::TurboJpeg, workers);
      std::printf("| %d | %.0f | %.0f | %.2f |\n", workers, stb, turbo, turbo / stb);
    } else {
      std::printf("| %d | %.0f | (not built) | - |\n", workers, stb);
    }
  }
  return 0;
}
