// Datasets: where examples come from. A Dataset splits fetching an example into read() (the I/O
// part: bytes as stored, e.g. a file or a record) and decode() (the CPU part: bytes -> CHW uint8
// image), so the pipeline can run the two on separate worker pools. Both are const and
// thread-safe: many workers call them at once.
//
// Formats: IDX (MNIST / Fashion-MNIST, raw or gzip), CIFAR-10 binary (3073-byte records), an image
// folder (one subfolder per class; JPEG/PNG/BMP), and a synthetic dataset with a configurable cost
// per item. Every format error is an echelon::Error naming the file, the offset and what is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <echelon/tensor/tensor.h>

namespace echelon::data {

struct AugmentOptions;  // data/transforms.h
struct AugmentKey;

// A decoded image: one plane per channel (CHW), the layout of the batch tensors, so images stay
// CHW from the dataset to the model (only the image codecs convert, from their interleaved HWC).
struct Image {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // (C, H, W)
  int64_t numel() const { return height * width * channels; }
};

// An example as stored: the encoded bytes and its label. `source` names the file (and record) for
// error messages.
struct RawRecord {
  int64_t index = 0;
  int64_t label = 0;
  std::vector<uint8_t> bytes;
  std::string source;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t num_classes() const = 0;
  // Shape every decoded image has, as {C, H, W}; {C, 0, 0} when images vary in size (then the
  // transforms must crop/resize them to a fixed size before batching).
  virtual Shape image_shape() const = 0;
  virtual std::string name() const = 0;
  // Fetches example `index` in [0, size()) as stored. Throws echelon::Error naming the source.
  virtual RawRecord read(int64_t index) const = 0;
  // Turns a record into pixels. Throws echelon::Error naming record.source on corrupt data.
  virtual Image decode(const RawRecord& record) const = 0;

  // True when every example is already in memory and fetching one costs no I/O and no real decode
  // (IDX, CIFAR-10, cost-free synthetic data): `--workers auto` then runs the loader inline, as
  // loader threads would only add wake-ups. Default: false (files read and decoded per example).
  virtual bool in_memory() const { return false; }
  // A hint that read(index) comes soon: an in-memory set starts pulling the example's bytes into
  // the cache, so that read() does not wait on main memory (the inline loader reads in shuffled
  // order, which the hardware prefetcher cannot follow). Never fails (an index out of range is
  // ignored). Default: nothing.
  virtual void prefetch(int64_t /*index*/) const {}

  // True when decode_augment() is faster than decode() + augment_image() + to_float() for
  // these options (the loader then runs them as one stage). Default: false; in-memory data sets
  // (IDX, CIFAR-10) say true, their decode being a copy.
  virtual bool fuses_decode_augment(const AugmentOptions& augment) const;
  // decode() + augment_image(augment, key) + to_float() in one call: (C, H, W) floats into
  // `out`, the image's height and width into `height`/`width`; bit-identical to the three steps.
  // Throws echelon::Error naming record.source on corrupt data (as decode()). The default runs
  // the three steps.
  virtual void decode_augment(const RawRecord& record, const AugmentOptions& augment,
                              const AugmentKey& key, std::vector<float>& out, int64_t& height,
                              int64_t& width) const;

  // The inline loader's direct path (Loader::Impl::fill_direct, data/loader_inline.cpp): true when
  // read_into() writes an example without any per-example record or buffer (in-memory sets: IDX,
  // CIFAR-10). Default: false (read_into() then still works, through read() and decode_augment()).
  virtual bool reads_into() const { return false; }
  // read() + decode_augment() of example `index` straight into `out`, a batch slot of `out_size`
  // floats (C * H * W of the augmented image; a mismatch throws naming the example); returns the
  // label. Bit-identical to the two calls. Throws as read() and decode_augment() do.
  virtual int64_t read_into(int64_t index, const AugmentOptions& augment, const AugmentKey& key,
                            float* out, int64_t out_size) const;
};

// An empty CPU tensor for a data set's pixels held in memory, on small (4 KiB) pages. The host
// allocator asks for 2 MiB pages on large blocks (tensor/cpu_cache.cpp: activations, reused every
// step), and a 2 MiB page's first touch can stall on the kernel's memory compaction: Fashion-MNIST
// start-up took 0.80-1.55 s instead of 0.29-0.31 s on the AMD EPYC VM (bench/RESULTS.md, session
// 30), for pixels written once and gathered a few times an epoch.
Tensor empty_on_small_pages(const Shape& shape, DType dtype);

// A whole labelled set in memory: the training loop's simple path.
struct LabeledImages {
  Tensor images;  // (N, C, H, W) uint8
  Tensor labels;  // (N) int64
  int64_t num_classes = 0;
};

// ---- IDX (MNIST, Fashion-MNIST) -----------------------------------------------------------
// Reads an IDX images file (magic 0x00000803, dims N, H, W) and labels file (0x00000801, N), raw
// or gzip-compressed (detected by the gzip magic, not the name). Validates magic, dims, counts
// and sizes; a truncated file, bad magic or an image/label count mismatch throws naming the
// file, the byte offset and the problem.
LabeledImages load_idx(const std::string& images_path, const std::string& labels_path);
// Fashion-MNIST from `dir` (default /usr/share/datasets/fashion-mnist), split "train" or "t10k"
// (alias "test"): files {split}-images-idx3-ubyte[.gz], {split}-labels-idx1-ubyte[.gz].
LabeledImages load_fashion_mnist(const std::string& dir, const std::string& split);
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// ---- CIFAR-10 binary ----------------------------------------------------------------------
// Records of 3073 bytes: label (0..9), then 1024 R, 1024 G, 1024 B bytes (32x32, CHW). The
// file size must be a positive multiple of 3073 and every label < 10.
LabeledImages load_cifar10_files(const std::vector<std::string>& paths);
// split "train" -> data_batch_1..5.bin, "test" -> test_batch.bin (in `dir`).
LabeledImages load_cifar10(const std::string& dir, const std::string& split);

// ---- Dataset implementations ----------------------------------------------------------------
// Serves an in-memory set (IDX, CIFAR) through the pipeline: read() copies the (C, H, W) bytes,
// decode() wraps them as an Image.
std::shared_ptr<Dataset> make_memory_dataset(LabeledImages set, std::string name);

// One subfolder per class (sorted by name -> label 0, 1, ...), files with extension .jpg .jpeg
// .png .bmp (case-insensitive), sorted. read() loads the file; decode() uses libjpeg-turbo for
// JPEG when built with it (faster), stb_image otherwise. `channels` forces 1 or 3 channels
// (0: 3). Throws naming the folder when it has no classes or no images.
// `classes` fixes the labels instead (label i = classes[i]): a test split takes its training
// split's classes, so a class missing from it does not shift the others' labels; a subfolder not
// among them is an error naming it. `resize` > 0: images may have any size; each is decoded with
// its shorter side brought to `resize` (resize_shorter_side; JPEGs first scaled in the DCT domain)
// and image_shape() is {C, 0, 0} (the augmentation's crop_to makes them one size). 0: every image
// must have the first one's size.
std::shared_ptr<Dataset> make_image_folder_dataset(const std::string& root, int channels = 3,
                                                   const std::vector<std::string>& classes = {},
                                                   int64_t resize = 0);
// The class subfolders of an image folder, sorted: the labels make_image_folder_dataset gives.
std::vector<std::string> image_folder_classes(const std::string& root);

// Synthetic examples with a known cost, to emulate slow storage / slow decode. Image i of class
// i % classes has pixel (c, y, x) = (i * 31 + y * 7 + x * 3 + c * 11) mod 256, so tests can
// recognise every example. read_cost_us / decode_cost_us: per-item latency, slept (sleep=true,
// emulates I/O, leaves the cores free) or busy-spun (emulates CPU decode).
struct SyntheticOptions {
  int64_t size = 1024;
  int64_t num_classes = 10;
  int64_t channels = 1, height = 8, width = 8;
  double read_cost_us = 0.0;
  double decode_cost_us = 0.0;
  bool sleep = true;
  // Indices in this list fail to decode (tests of on_bad_sample).
  std::vector<int64_t> corrupt_indices;
};
std::shared_ptr<Dataset> make_synthetic_dataset(const SyntheticOptions& options);
// The pixel byte the synthetic dataset stores at (index, y, x, c).
inline uint8_t synthetic_pixel(int64_t index, int64_t y, int64_t x, int64_t c) {
  return static_cast<uint8_t>((index * 31 + y * 7 + x * 3 + c * 11) & 0xFF);
}

}  // namespace echelon::data
