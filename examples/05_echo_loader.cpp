// Tutorial 5: the data loader with data echoing (data/loader.h, Choi et al. 2019).
//
// The Loader runs a staged pipeline of worker threads joined by ring buffers (data/ring.h):
//   source (seeded shuffle) -> read -> decode -> augment -> [echo] -> shuffle buffer -> batch.
// With echo factor 2 each example leaving the echo stage is repeated twice, so an epoch (which
// counts FRESH examples) yields 2 x size() examples, and every example is seen exactly twice.
// The shuffle buffer spreads the two copies apart so they rarely share a batch.
//
// The synthetic dataset (data/dataset.h) stores pixel (c, y, x) of image i as
// (i*31 + y*7 + x*3 + c*11) mod 256, so the first pixel of a batch row tells which example it is.
#include <cmath>
#include <cstdio>
#include <vector>

#include <echelon/echelon.h>

using namespace echelon;

int main() {
  data::SyntheticOptions synthetic;
  synthetic.size = 100;  // examples 0..99 (< 256, so the first pixel identifies the example)
  synthetic.num_classes = 10;
  synthetic.channels = 1;
  synthetic.height = synthetic.width = 4;
  auto dataset = data::make_synthetic_dataset(synthetic);

  data::LoaderOptions options;
  options.batch_size = 16;
  options.seed = 5;
  options.workers = 2;  // two threads each for read, decode and augment
  options.echo_factor = 2.0;
  options.echo_at = data::EchoPlacement::AfterAugment;  // repeat the augmented example
  options.shuffle_buffer = 32;
  data::Loader loader(dataset, options);

  std::vector<int> seen(static_cast<size_t>(synthetic.size), 0);
  int64_t batches = 0, examples = 0, fresh = 0;
  bool labels_ok = true;
  loader.start_epoch(0);
  while (std::optional<data::Batch> batch = loader.next()) {
    // images (B, 1, 4, 4) float32 in [0, 1] (no normalisation configured), labels (B) int64
    const int64_t b = batch->images.size(0);
    const std::vector<float> pixels = batch->images.to_vector<float>();
    const std::vector<int64_t> labels = batch->labels.to_vector<int64_t>();
    for (int64_t i = 0; i < b; ++i) {
      const auto byte = static_cast<int64_t>(std::lround(pixels[i * 16] * 255.0f));
      const int64_t index = (byte * 223) & 0xFF;  // 223 = 31^-1 mod 256
      if (index >= synthetic.size || labels[i] != index % synthetic.num_classes) {
        labels_ok = false;
        continue;
      }
      ++seen[index];
    }
    ++batches;
    examples += b;
    fresh += batch->fresh;  // first copies in this batch; the echoes are not fresh
  }

  bool twice = true;
  for (int count : seen) twice = twice && count == 2;
  const data::LoaderStats stats = loader.stats();
  std::printf("%lld batches, %lld examples (%lld fresh), effective echo factor %.2f\n",
              static_cast<long long>(batches), static_cast<long long>(examples),
              static_cast<long long>(fresh), stats.effective_factor);
  for (const data::LoaderStageStats& stage : stats.stages)
    std::printf("  stage %-8s workers %d, %lld items\n", stage.name.c_str(), stage.workers,
                static_cast<long long>(stage.items));

  const bool ok = labels_ok && twice && examples == 2 * synthetic.size && fresh == synthetic.size &&
                  batches == (2 * synthetic.size + 15) / 16 && stats.fresh == synthetic.size &&
                  stats.echoed == synthetic.size;
  std::printf("%s\n", ok ? "every example was seen exactly twice" : "echo check FAILED");
  return ok ? 0 : 1;
}
