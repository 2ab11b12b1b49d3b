// Image folder dataset: root/<class>/<image>, classes sorted by name.
#include <algorithm>
#include <cctype>
#include <filesystem>

#include <echelon/base/error.h>
#include <echelon/data/dataset.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/io.h>
#include <echelon/data/transforms.h>

namespace echelon::data {
namespace {

namespace fs = std::filesystem;

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp";
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

class ImageFolderDataset final : public Dataset {
 public:
  ImageFolderDataset(const std::string& root, int channels, std::vector<std::string> classes,
                     int64_t resize)
      : root_(root), channels_(channels == 0 ? 3 : channels), resize_(resize) {
    ECH_CHECK(resize_ >= 0, "image folder '", root, "': resize ", resize_, " < 0");
    ECH_CHECK(channels_ == 1 || channels_ == 3, "image folder '", root,
              "': channels must be 1 or 3");
    const std::vector<std::string> found = image_folder_classes(root);
    if (classes.empty()) classes = found;
    for (const std::string& name : found) {
      const auto at = std::find(classes.begin(), classes.end(), name);
      ECH_CHECK(at != classes.end(), "image folder '", root, "': class folder '", name,
                "' is not one of the training classes (", joined(classes), ")");
      std::vector<fs::path> images;
      for (const auto& entry : fs::directory_iterator(fs::path(root) / name))
        if (entry.is_regular_file() && is_image_file(entry.path())) images.push_back(entry.path());
      std::sort(images.begin(), images.end());
      for (const auto& image : images) files_.push_back({image.string(), at - classes.begin()});
    }
    num_classes_ = static_cast<int64_t>(classes.size());
    ECH_CHECK(!files_.empty(), "image folder '", root, "' has ", num_classes_,
              " class folders but no .jpg/.jpeg/.png/.bmp files");
    if (resize_ > 0) {  // sizes vary; the augmentation crops them to one (AugmentOptions)
      shape_ = {channels_, 0, 0};
      return;
    }
    // The first image fixes the size every image must have (batches need one shape).
    const Image first = decode(read(0));
    shape_ = {channels_, first.height, first.width};
  }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t num_classes() const override { return num_classes_; }
  Shape image_shape() const override { return shape_; }
  std::string name() const override { return "image-folder:" + root_; }
  RawRecord read(int64_t index) const override {
    ECH_CHECK(index >= 0 && index < size(), "image folder '", root_, "': index ", index,
              " out of range [0, ", size(), ")");
    const auto& [path, label] = files_[index];
    return {index, label, read_file_raw(path), path + " (item " + std::to_string(index) + ")"};
  }
  Image decode(const RawRecord& record) const override {
    // A JPEG is decoded at the smallest DCT scale (1/8..1) that still covers the size, then
    // resampled: a large photo costs a fraction of a full decode.
    if (resize_ > 0)
      return resize_shorter_side(
          decode_image_scaled(record.bytes, record.source, channels_, resize_, resize_), resize_);
    Image image = decode_image(record.bytes, record.source, channels_);
    if (!shape_.empty()) check_size(image.height, image.width, record.source);
    return image;
  }
  // Fused only without --resize and without a square crop: then libjpeg-turbo's rows go straight
  // into the augmented floats, bit-identical to the three steps. A resized image must exist whole
  // before it is resampled, so --resize keeps the separate steps (DCT-scaled decode included).
  bool fuses_decode_augment(const AugmentOptions& augment) const override {
    return resize_ == 0 && augment.crop_to == 0 && have_turbojpeg();
  }
  void decode_augment(const RawRecord& record, const AugmentOptions& augment, const AugmentKey& key,
                      std::vector<float>& out, int64_t& height, int64_t& width) const override {
    if (!fuses_decode_augment(augment)) {
      Dataset::decode_augment(record, augment, key, out, height, width);
      return;
    }
    // PNG/BMP files take the three steps inside decode_augment_to_float.
    decode_augment_to_float(record.bytes, record.source, static_cast<int>(channels_), augment, key,
                            out, height, width);
    if (!shape_.empty()) check_size(height, width, record.source);
  }

 private:
  // Every image must have the first one's size (without --resize).
  void check_size(int64_t height, int64_t width, const std::string& source) const {
    ECH_CHECK(height == shape_[1] && width == shape_[2], source, ": image is ", height, "x", width,
              ", the folder's images are ", shape_[1], "x", shape_[2]);
  }

  std::string root_;
  int64_t channels_;
  int64_t resize_;  // > 0: shorter side to this (sizes then vary); 0: all images of one size
  int64_t num_classes_ = 0;
  std::vector<std::pair<std::string, int64_t>> files_;
  Shape shape_;
};

}  // namespace

std::vector<std::string> image_folder_classes(const std::string& root) {
  ECH_CHECK(fs::is_directory(root), "image folder '", root, "' is not a directory");
  std::vector<std::string> classes;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory()) classes.push_back(entry.path().filename().string());
  std::sort(classes.begin(), classes.end());
  ECH_CHECK(!classes.empty(), "image folder '", root, "' has no class subfolders");
  return classes;
}

std::shared_ptr<Dataset> make_image_folder_dataset(const std::string& root, int channels,
                                                   const std::vector<std::string>& classes,
                                                   int64_t resize) {
  return std::make_shared<ImageFolderDataset>(root, channels, classes, resize);
}

}  // namespace echelon::data
