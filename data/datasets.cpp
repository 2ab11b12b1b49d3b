// IDX and CIFAR-10 loaders, the in-memory Dataset and the synthetic Dataset.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <span>
#include <thread>

#include <echelon/base/error.h>
#include <echelon/data/dataset.h>
#include <echelon/data/io.h>
#include <echelon/data/transforms.h>

namespace echelon::data {
namespace {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dims
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dim
constexpr int64_t kCifarSide = 32;
constexpr int64_t kCifarImageBytes = 3 * kCifarSide * kCifarSide;
constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;
constexpr int64_t kCifarClasses = 10;

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// Reads an IDX header at offset 0: magic, then `rank` big-endian dims. Validates magic and size.
std::vector<int64_t> idx_header(std::span<const uint8_t> bytes, const std::string& path,
                                uint32_t magic, int rank, const char* what) {
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  ECH_CHECK(bytes.size() >= header, "IDX ", what, " file '", path, "': truncated header (",
            bytes.size(), " bytes, need ", header, ")");
  const uint32_t found = read_be32(bytes.data());
  ECH_CHECK(found == magic, "IDX ", what, " file '", path, "': bad magic ", hex32(found),
            " at offset 0 (expected ", hex32(magic), ")");
  std::vector<int64_t> dims;
  dims.reserve(static_cast<size_t>(rank));
  for (size_t d = 0; d < static_cast<size_t>(rank); ++d)
    dims.push_back(read_be32(bytes.data() + 4 + 4 * d));
  // Overflow-safe: each dim is < 2^32, and the product is checked against the real file size
  // before it is multiplied further, so it never exceeds 2^63 (a header whose dims multiply past
  // int64 used to wrap to a small number and pass).
  const auto size = static_cast<int64_t>(bytes.size());
  // An empty set (count 0) needs no payload, but its item dims still become a tensor shape: a
  // count-0 header with 2^32 x 2^32 items must fail here, naming the file, not in the allocator.
  constexpr int64_t kMaxItemBytes = int64_t{1} << 31;
  int64_t item_bytes = 1;
  for (int d = 1; d < rank; ++d) {
    item_bytes *= dims[d];
    ECH_CHECK(item_bytes <= kMaxItemBytes, "IDX ", what, " file '", path, "': dims ", dims,
              " make one item larger than 2 GiB (corrupt header, dims at offset 8)");
  }
  int64_t payload = 1;
  for (int d = 0; d < rank; ++d) {
    ECH_CHECK(dims[d] > 0 || (d == 0 && dims[d] == 0), "IDX ", what, " file '", path, "': dim ", d,
              " is ", dims[d], " at offset ", 4 + 4 * d);
    payload *= dims[d];
    ECH_CHECK(payload <= size, "IDX ", what, " file '", path, "': dims ", dims, " need more than ",
              payload, " bytes, file has ", size, " (truncated or corrupt header)");
  }
  const int64_t expected = static_cast<int64_t>(header) + payload;
  ECH_CHECK(size >= expected, "IDX ", what, " file '", path, "': truncated: dims ", dims, " need ",
            expected, " bytes, file has ", size, " (data ends inside item ",
            (size - static_cast<int64_t>(header)) / std::max<int64_t>(1, payload / dims[0]),
            " at offset ", size, ")");
  ECH_CHECK(size == expected, "IDX ", what, " file '", path, "': ", size - expected,
            " unexpected trailing bytes after offset ", expected, " (dims ", dims, ")");
  return dims;
}

void busy_or_sleep(double microseconds, bool sleep) {
  if (microseconds <= 0) return;
  const auto duration = std::chrono::duration<double, std::micro>(microseconds);
  if (sleep) {
    std::this_thread::sleep_for(duration);
    return;
  }
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
  }
}

class MemoryDataset final : public Dataset {
 public:
  MemoryDataset(LabeledImages set, std::string name)
      : set_(std::move(set)), name_(std::move(name)) {
    ECH_CHECK(set_.images.defined() && set_.images.dim() == 4 && set_.images.dtype() == kUInt8,
              "memory dataset '", name_, "': images must be uint8 (N, C, H, W)");
    ECH_CHECK(set_.labels.defined() && set_.labels.dim() == 1 && set_.labels.dtype() == kInt64 &&
                  set_.labels.size(0) == set_.images.size(0),
              "memory dataset '", name_,
              "': labels must be int64 (N) with N = ", set_.images.size(0));
    images_ = set_.images.contiguous();
    labels_ = set_.labels.contiguous();
    channels_ = images_.size(1);
    height_ = images_.size(2);
    width_ = images_.size(3);
    pixels_ = images_.data<uint8_t>();
    label_values_ = labels_.data<int64_t>();
  }
  int64_t size() const override { return images_.size(0); }
  int64_t num_classes() const override { return set_.num_classes; }
  Shape image_shape() const override { return {images_.size(1), images_.size(2), images_.size(3)}; }
  std::string name() const override { return name_; }
  RawRecord read(int64_t index) const override {
    ECH_CHECK(index >= 0 && index < size(), name_, ": index ", index, " out of range [0, ", size(),
              ")");
    const int64_t item = channels_ * height_ * width_;
    const uint8_t* first = images_.data<uint8_t>() + index * item;
    return {index, labels_.data<int64_t>()[index], std::vector<uint8_t>(first, first + item),
            name_ + "[" + std::to_string(index) + "]"};
  }
  Image decode(const RawRecord& record) const override {
    check_record(record);
    return {height_, width_, channels_, record.bytes};  // already (C, H, W)
  }
  bool in_memory() const override { return true; }
  void prefetch(int64_t index) const override {
    if (index < 0 || index >= size()) return;
    const int64_t item = channels_ * height_ * width_;
    const uint8_t* first = images_.data<uint8_t>() + index * item;
    for (int64_t offset = 0; offset < item; offset += 64) __builtin_prefetch(first + offset);
    __builtin_prefetch(first + item - 1);  // the last line, when the example straddles one more
  }
  // Decoding is a copy here, so a stage of its own would cost more (a thread, a ring hop, its
  // wake-ups) than it does: the three steps run as one stage.
  bool fuses_decode_augment(const AugmentOptions& /*augment*/) const override { return true; }
  // Without a crop or flip the record's bytes are the augmented image: straight to floats, the
  // same expression as the three steps (which would first copy the bytes twice). This runs once
  // per example on the training thread when the loader is inline.
  void decode_augment(const RawRecord& record, const AugmentOptions& augment, const AugmentKey& key,
                      std::vector<float>& out, int64_t& height, int64_t& width) const override {
    if (augment.crop_to > 0 || augment.crop_padding > 0 || augment.horizontal_flip) {
      Dataset::decode_augment(record, augment, key, out, height, width);
      return;
    }
    check_record(record);
    out.resize(record.bytes.size());
    to_float(record.bytes.data(), channels_, height_ * width_, augment, out.data());
    height = height_;
    width = width_;
  }
  // Straight from the stored bytes into the batch slot: no record (its byte copy and source
  // string), no float buffer. With a crop or flip the image is copied once for augment_image.
  bool reads_into() const override { return true; }
  int64_t read_into(int64_t index, const AugmentOptions& augment, const AugmentKey& key, float* out,
                    int64_t out_size) const override {
    ECH_CHECK(index >= 0 && index < size(), name_, ": index ", index, " out of range [0, ", size(),
              ")");
    const int64_t item = channels_ * height_ * width_;
    const uint8_t* first = pixels_ + index * item;
    if (augment.crop_to > 0 || augment.crop_padding > 0 || augment.horizontal_flip) {
      const Image image = augment_image(
          {height_, width_, channels_, std::vector<uint8_t>(first, first + item)}, augment, key);
      ECH_CHECK(image.numel() == out_size, name_, "[", index, "]: augmented image is ",
                image.numel(), " values, a batch example is ", out_size);
      to_float(image, augment, out);
    } else {
      ECH_CHECK(item == out_size, name_, "[", index, "]: image is ", item,
                " values, a batch example is ", out_size);
      to_float(first, channels_, height_ * width_, augment, out);
    }
    return label_values_[index];
  }

 private:
  void check_record(const RawRecord& record) const {
    const int64_t item = channels_ * height_ * width_;
    ECH_CHECK(static_cast<int64_t>(record.bytes.size()) == item, record.source, ": record has ",
              record.bytes.size(), " bytes, expected ", item);
  }

  LabeledImages set_;
  std::string name_;
  Tensor images_, labels_;
  int64_t channels_ = 0, height_ = 0, width_ = 0;
  const uint8_t* pixels_ = nullptr;        // images_'s (N, C, H, W) bytes
  const int64_t* label_values_ = nullptr;  // labels_'s
};

class SyntheticDataset final : public Dataset {
 public:
  explicit SyntheticDataset(SyntheticOptions options) : options_(std::move(options)) {
    ECH_CHECK(options_.size >= 1 && options_.num_classes >= 1 && options_.channels >= 1 &&
                  options_.height >= 1 && options_.width >= 1,
              "synthetic dataset: size, classes, channels, height, width must be >= 1");
    std::sort(options_.corrupt_indices.begin(), options_.corrupt_indices.end());
  }
  int64_t size() const override { return options_.size; }
  int64_t num_classes() const override { return options_.num_classes; }
  Shape image_shape() const override {
    return {options_.channels, options_.height, options_.width};
  }
  std::string name() const override { return "synthetic"; }
  // Pixels are computed from the index; a read or decode cost emulates storage or a codec.
  bool in_memory() const override {
    return options_.read_cost_us == 0 && options_.decode_cost_us == 0;
  }
  RawRecord read(int64_t index) const override {
    ECH_CHECK(index >= 0 && index < size(), "synthetic: index ", index, " out of range [0, ",
              size(), ")");
    busy_or_sleep(options_.read_cost_us, options_.sleep);
    const int64_t h = options_.height, w = options_.width, c = options_.channels;
    std::vector<uint8_t> bytes(h * w * c);  // (C, H, W)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          bytes[(ch * h + y) * w + x] = synthetic_pixel(index, y, x, ch);
    return {index, index % options_.num_classes, std::move(bytes),
            "synthetic[" + std::to_string(index) + "]"};
  }
  Image decode(const RawRecord& record) const override {
    busy_or_sleep(options_.decode_cost_us, options_.sleep);
    ECH_CHECK(!std::binary_search(options_.corrupt_indices.begin(), options_.corrupt_indices.end(),
                                  record.index),
              record.source, ": corrupt image data (marked corrupt)");
    return {options_.height, options_.width, options_.channels, record.bytes};
  }

 private:
  SyntheticOptions options_;
};

}  // namespace

bool Dataset::fuses_decode_augment(const AugmentOptions& /*augment*/) const {
  return false;
}

void Dataset::decode_augment(const RawRecord& record, const AugmentOptions& augment,
                             const AugmentKey& key, std::vector<float>& out, int64_t& height,
                             int64_t& width) const {
  const Image image = augment_image(decode(record), augment, key);
  out.resize(static_cast<size_t>(image.numel()));
  to_float(image, augment, out.data());
  height = image.height;
  width = image.width;
}

int64_t Dataset::read_into(int64_t index, const AugmentOptions& augment, const AugmentKey& key,
                           float* out, int64_t out_size) const {
  const RawRecord record = read(index);
  std::vector<float> values;
  int64_t height = 0, width = 0;
  decode_augment(record, augment, key, values, height, width);
  ECH_CHECK(static_cast<int64_t>(values.size()) == out_size, record.source, ": image is ",
            values.size(), " values, a batch example is ", out_size);
  std::copy(values.begin(), values.end(), out);
  return record.label;
}

Tensor empty_on_small_pages(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
#ifdef MADV_NOHUGEPAGE
  // Whole pages inside the block only (advice: a failure leaves the pages as they were).
  constexpr size_t kPage = 4096;
  auto* data = static_cast<char*>(t.raw_data());
  const size_t lead = (kPage - reinterpret_cast<uintptr_t>(data) % kPage) % kPage;
  if (t.nbytes() >= lead + kPage)
    madvise(data + lead, (t.nbytes() - lead) / kPage * kPage, MADV_NOHUGEPAGE);
#endif
  return t;
}

LabeledImages load_idx(const std::string& images_path, const std::string& labels_path) {
  // The images are a view of the decompressed file: no copy of its (Fashion-MNIST: 47 MB) pixels.
  const Tensor image_file = read_file_tensor(images_path);
  const std::vector<int64_t> dims =
      idx_header({image_file.data<uint8_t>(), static_cast<size_t>(image_file.numel())}, images_path,
                 kIdxImagesMagic, 3, "images");
  const std::vector<uint8_t> label_bytes = read_file(labels_path);
  const std::vector<int64_t> label_dims =
      idx_header(label_bytes, labels_path, kIdxLabelsMagic, 1, "labels");
  ECH_CHECK(dims[0] == label_dims[0], "IDX: image/label count mismatch: '", images_path, "' has ",
            dims[0], " images, '", labels_path, "' has ", label_dims[0], " labels (offset 4)");
  const int64_t n = dims[0], h = dims[1], w = dims[2];
  LabeledImages set;
  set.images = image_file.slice(0, 16, image_file.numel()).view({n, 1, h, w});
  set.labels = Tensor::empty({n}, kInt64);
  int64_t* labels = set.labels.data<int64_t>();
  int64_t max_label = -1;
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = label_bytes[8 + i];
    max_label = std::max(max_label, labels[i]);
  }
  set.num_classes = max_label + 1;
  return set;
}

LabeledImages load_fashion_mnist(const std::string& dir, const std::string& split) {
  ECH_CHECK(split == "train" || split == "t10k" || split == "test", "fashion-mnist: split '", split,
            "' must be train, t10k or test");
  const std::string prefix = dir + "/" + (split == "train" ? "train" : "t10k");
  auto pick = [](const std::string& base) {
    return std::filesystem::exists(base + ".gz") ? base + ".gz" : base;
  };
  const std::string labels_path = pick(prefix + "-labels-idx1-ubyte");
  LabeledImages set = load_idx(pick(prefix + "-images-idx3-ubyte"), labels_path);
  set.num_classes = 10;
  // Checked at load, naming the record: a label past the classes would otherwise surface at a
  // training step (or, for the test split, only after an epoch).
  const int64_t* labels = set.labels.data<int64_t>();
  for (int64_t i = 0; i < set.labels.size(0); ++i)
    ECH_CHECK(labels[i] >= 0 && labels[i] < set.num_classes, "IDX labels file '", labels_path,
              "': record ", i, " at offset ", 8 + i, " has label ", labels[i], " (expected 0..",
              set.num_classes - 1, ")");
  return set;
}

LabeledImages load_cifar10_files(const std::vector<std::string>& paths) {
  ECH_CHECK(!paths.empty(), "CIFAR-10: no files given");
  std::vector<std::vector<uint8_t>> files;
  int64_t records = 0;
  for (const std::string& path : paths) {
    files.push_back(read_file_raw(path));
    const auto size = static_cast<int64_t>(files.back().size());
    ECH_CHECK(size > 0, "CIFAR-10 file '", path, "' is empty");
    ECH_CHECK(size % kCifarRecordBytes == 0, "CIFAR-10 file '", path, "': size ", size,
              " is not a multiple of ", kCifarRecordBytes, " (the record at offset ",
              size / kCifarRecordBytes * kCifarRecordBytes,
              " is truncated: ", size % kCifarRecordBytes, " of ", kCifarRecordBytes, " bytes)");
    records += size / kCifarRecordBytes;
  }
  LabeledImages set;
  set.images = empty_on_small_pages({records, 3, kCifarSide, kCifarSide}, kUInt8);
  set.labels = Tensor::empty({records}, kInt64);
  set.num_classes = kCifarClasses;
  uint8_t* images = set.images.data<uint8_t>();
  int64_t* labels = set.labels.data<int64_t>();
  int64_t out = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::vector<uint8_t>& bytes = files[f];
    for (size_t offset = 0; offset < bytes.size(); offset += kCifarRecordBytes, ++out) {
      ECH_CHECK(bytes[offset] < kCifarClasses, "CIFAR-10 file '", paths[f], "': record ",
                offset / kCifarRecordBytes, " at offset ", offset, " has label ",
                int{bytes[offset]}, " (expected 0..9)");
      labels[out] = bytes[offset];
      std::copy_n(bytes.begin() + offset + 1, kCifarImageBytes, images + out * kCifarImageBytes);
    }
  }
  return set;
}

LabeledImages load_cifar10(const std::string& dir, const std::string& split) {
  ECH_CHECK(split == "train" || split == "test", "CIFAR-10: split '", split,
            "' must be train or test");
  std::vector<std::string> paths;
  if (split == "train") {
    for (int i = 1; i <= 5; ++i) paths.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  } else {
    paths.push_back(dir + "/test_batch.bin");
  }
  return load_cifar10_files(paths);
}

std::shared_ptr<Dataset> make_memory_dataset(LabeledImages set, std::string name) {
  return std::make_shared<MemoryDataset>(std::move(set), std::move(name));
}

std::shared_ptr<Dataset> make_synthetic_dataset(const SyntheticOptions& options) {
  return std::make_shared<SyntheticDataset>(options);
}

}  // namespace echelon::data
