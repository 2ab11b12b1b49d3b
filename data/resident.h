// A data set resident on the device (`echelon train --resident-data`): every image is decoded once
// and copied to the device as uint8 (N, C, H, W), with the labels; each batch is then one kernel
// (ops::augment_gather) that picks the batch's images, applies the padding-crop, flip and
// normalisation, and writes the float batch in place. No loader threads, rings or host-to-device
// copy per step: what a time-to-accuracy run on a GPU wants when the whole set fits in memory
// (Fashion-MNIST: 47 MB, CIFAR-10: 154 MB).
//
// Same batches as the Loader, bit for bit, with one worker, echo 1 and no shuffle buffer: the
// order is data::epoch_order and the draws are draw_augment's for (seed, epoch, index, copy 0).
// Each epoch's plan (rows of index, dy, dx, flip) and labels in that order are built and checked
// on the host and copied to the device once.
#pragma once

#include <cstdint>
#include <optional>

#include <echelon/data/dataset.h>
#include <echelon/data/loader.h>
#include <echelon/data/transforms.h>
#include <echelon/tensor/tensor.h>

namespace echelon::data {

struct ResidentOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  // Padding-crop, flip and normalisation only: every image must already have one size (no
  // crop_to), since the whole set is one tensor.
  AugmentOptions augment;
  Device device = Device::cpu();
};

class ResidentData {
 public:
  // Reads and decodes every example of `dataset` (errors name the example's source) and copies
  // the set to options.device. Throws naming the option when the set cannot be resident (images
  // of varying size, crop_to, more than 4 channels, batch_size < 1).
  ResidentData(const Dataset& dataset, ResidentOptions options);

  void start_epoch(int64_t epoch);
  // The next batch, or nullopt at the end of the epoch.
  std::optional<Batch> next();
  // ceil(size / batch_size), or floor with drop_last.
  int64_t batches_per_epoch() const;
  int64_t size() const { return images_.size(0); }
  const ResidentOptions& options() const { return options_; }

 private:
  ResidentOptions options_;
  Tensor images_;  // (N, C, H, W) uint8 on the device
  std::vector<int64_t> labels_;
  NormaliseCoefficients normalise_;
  Tensor plan_;             // (N, 4) int32 on the device: this epoch's batches, one row per example
  Tensor labels_in_order_;  // (N) int64 on the device, in the plan's order
  int64_t epoch_ = 0, next_row_ = 0, batch_number_ = 0;
};

}  // namespace echelon::data
