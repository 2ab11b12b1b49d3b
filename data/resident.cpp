#include <echelon/data/resident.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include <echelon/base/error.h>
#include <echelon/data/random_keys.h>
#include <echelon/kernels/augment.h>
#include <echelon/tensor/ops.h>

namespace echelon::data {

ResidentData::ResidentData(const Dataset& dataset, ResidentOptions options)
    : options_(std::move(options)) {
  ECH_CHECK(options_.batch_size >= 1, "--batch-size must be >= 1 (got ", options_.batch_size, ")");
  const Shape shape = dataset.image_shape();  // {C, H, W}
  ECH_CHECK(shape[1] > 0 && shape[2] > 0, "--resident-data: ", dataset.name(),
            "'s images vary in size; the resident set is one (N, C, H, W) tensor, so every image "
            "must have one size (use the loader, without --resident-data)");
  ECH_CHECK(options_.augment.crop_to == 0,
            "--resident-data: cropping to a square (--resize) is "
            "not supported; the images must already have one size");
  ECH_CHECK(shape[0] <= AugmentGatherArgs::kMaxChannels, "--resident-data: ", dataset.name(),
            " has ", shape[0], " channels; at most ", AugmentGatherArgs::kMaxChannels,
            " are supported");
  ECH_CHECK(dataset.size() <= INT32_MAX, "--resident-data: ", dataset.name(), " has ",
            dataset.size(), " examples; the plan's int32 indices hold at most ", INT32_MAX);
  const int64_t n = dataset.size(), image_bytes = shape[0] * shape[1] * shape[2];
  Tensor host = empty_on_small_pages({n, shape[0], shape[1], shape[2]}, kUInt8);
  labels_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const RawRecord record = dataset.read(i);
    const Image image = dataset.decode(record);
    ECH_CHECK(image.channels == shape[0] && image.height == shape[1] && image.width == shape[2],
              "--resident-data: ", record.source, " decodes to ", image.channels, "x", image.height,
              "x", image.width, ", not the data set's ", shape[0], "x", shape[1], "x", shape[2]);
    std::memcpy(host.data<uint8_t>() + i * image_bytes, image.pixels.data(),
                static_cast<size_t>(image_bytes));
    labels_[static_cast<size_t>(i)] = record.label;
  }
  images_ = host.to(options_.device);
  normalise_ = normalise_coefficients(options_.augment, shape[0]);
}

void ResidentData::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  next_row_ = 0;
  batch_number_ = 0;
  const int64_t n = size();
  Tensor plan = Tensor::empty({n, kPlanColumns}, kInt32, Device::cpu());
  Tensor labels = Tensor::empty({n}, kInt64, Device::cpu());
  int32_t* rows = plan.data<int32_t>();
  int64_t* ordered = labels.data<int64_t>();
  const std::vector<int64_t> order = epoch_order(n, options_.seed, epoch, options_.shuffle);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t index = order[static_cast<size_t>(k)];
    const AugmentDraw draw = draw_augment(options_.augment, {options_.seed, epoch, index, 0});
    int32_t* row = rows + k * kPlanColumns;
    row[kPlanIndex] = static_cast<int32_t>(index);
    row[kPlanDy] = static_cast<int32_t>(draw.dy);
    row[kPlanDx] = static_cast<int32_t>(draw.dx);
    row[kPlanFlip] = draw.flip ? 1 : 0;
    ordered[k] = labels_[static_cast<size_t>(index)];
  }
  plan_ = plan.to(options_.device);
  labels_in_order_ = labels.to(options_.device);
}

std::optional<Batch> ResidentData::next() {
  const int64_t n = size(), remaining = n - next_row_;
  const int64_t count = std::min(options_.batch_size, remaining);
  if (count <= 0 || (options_.drop_last && count < options_.batch_size)) return std::nullopt;
  Batch batch;
  // Every plan row is in range by construction (a permutation of 0..n-1, draw_augment's offsets in
  // [0, 2 pad]), so the gather skips its host check, a synchronisation per batch on a GPU.
  batch.images =
      ops::augment_gather(images_, plan_.narrow(0, next_row_, count), options_.augment.crop_padding,
                          normalise_.scale, normalise_.shift, /*plan_checked=*/true);
  batch.labels = labels_in_order_.narrow(0, next_row_, count);
  batch.fresh = count;
  batch.index = batch_number_++;
  next_row_ += count;
  return batch;
}

int64_t ResidentData::batches_per_epoch() const {
  const int64_t n = size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

}  // namespace echelon::data
