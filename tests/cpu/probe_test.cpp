// The malformed-input probe (issue 14): bad files, bad flags and bad run folders fed to the
// `echelon` binary as a user would. Every error case must end with exit status 2 and exactly one
// stderr line "echelon: error: ..." naming the file, record, field or flag (no source location),
// and must leave an existing run folder byte for byte as it was. The few valid-but-unusual inputs
// (marked "accepted") must work. Files are generated at test time
// (tests/support/malformed_files.h).
//
// Cases (one line each; the names below are the CAPTUREd names):
//  data/idx-dims-overflow        IDX images header whose dims multiply past int64
//  data/idx-truncated            IDX images file shorter than its dims say
//  data/idx-bad-magic            IDX images file with the labels' magic
//  data/idx-count-mismatch       images and labels files of different counts
//  data/idx-train-label-range    train labels file with label 200 (10 classes): file and record
//  data/idx-test-label-range     t10k labels file with label 200: at load, not after an epoch
//  data/idx-gzip-truncated       gzip of the images file cut short
//  data/idx-gzip-multi-member    (accepted) a two-member gzip images file trains
//  data/cifar-label-range        CIFAR-10 record with label 10: file and record
//  data/cifar-truncated          CIFAR-10 file whose last record is cut short
//  data/missing-folder           --data-dir of a folder without the data set's files
//  image/jpeg-huge               JPEG header claiming 65500 x 65500: refused before allocating
//  image/png-huge                PNG IHDR claiming 65500 x 65500 (valid CRC): refused likewise
//  image/png-short-data          PNG IHDR claiming 4000 x 4000 over 12 x 12 pixels of data
//  image/png-crc-ihdr            PNG with a bad IHDR CRC: file and chunk
//  image/png-crc-idat            PNG with a bad IDAT CRC: file and chunk
//  image/jpeg-12-bit             12-bit JPEG: "unsupported JPEG variant (12-bit precision"
//  image/jpeg-lossless           lossless JPEG (SOF3): "unsupported JPEG variant (lossless"
//  image/jpeg-truncated          JPEG cut in the middle of its scan
//  image/empty-file              0-byte .png
//  image/garbage                 a .jpg that is text
//  image/mixed-sizes             folder of non-square sizes without --resize (names --resize)
//  image/unknown-test-class      test/ class folder that training does not have
//  image/no-train-split          folder without train/
//  ckpt/dtype-mismatch           safetensors tensor declared I32 where F32 is expected
//  ckpt/num-classes-huge         metadata num_classes = 1e12
//  ckpt/header-0xff              header with a 0xFF byte (not UTF-8)
//  ckpt/header-overlong          header with an overlong UTF-8 form (C0 AF)
//  ckpt/header-surrogate         header with a UTF-8-encoded lone surrogate (ED A0 80)
//  ckpt/shape-real               a shape entry written 6.0
//  ckpt/offset-real              a data offset written 0.0
//  ckpt/data-truncated           file cut inside the tensor data
//  ckpt/header-past-end          header length beyond the file
//  ckpt/directory                a directory passed as --checkpoint
//  ckpt/missing                  a --checkpoint that does not exist
//  ckpt/json-file                a JSON file (config.json) given as --checkpoint
//  ckpt/nan-in-history           (accepted) a checkpoint whose history holds a NaN loss loads in
//  eval ckpt/resume-nan-in-history    (accepted) ... and a run folder holding it resumes
//  cli/unknown-subcommand        `echelon frobnicate` names it and lists the subcommands
//  cli/unknown-flag              `train --no-such-flag`
//  cli/bad-number                `--epochs ten`
//  cli/lr-nan                    `--lr nan`
//  cli/unknown-model             `--model lenet7`
//  cli/unknown-data              `--data imagenet`
//  cli/folder-without-dir        `--data folder` without --data-dir
//  cli/bad-device                `--device tpu`
//  cli/pipeline-ppv-conflict     `--pipeline 4 --ppv 2,5`
//  cli/micro-batches-alone       `--micro-batches 4` without a pipeline
//  cli/gpipe-alone               `--schedule gpipe` without a pipeline
//  cli/hybrid-switch-alone       `--hybrid-switch 2` without a pipeline
//  cli/augment-unknown           `--augment crop:4,blur`
//  cli/augment-duplicate         `--augment flip,flip`
//  cli/augment-bad-number        `--augment crop:4.5`
//  cli/resize-not-folder         `--resize 32 --data synthetic`
//  cli/resize-negative           `--resize -8`
//  cli/step-size-alone           `--step-size 3` under the constant LR schedule (was ignored)
//  cli/milestones-alone          `--milestones 3` under cosine (was ignored)
//  cli/gamma-alone               `--gamma 0.5` under the constant LR schedule (was ignored)
//  cli/seed-negative             `--seed -1` (was read as 2^64 - 1)
//  cli/seed-overflow             `--seed 99999999999999999999` (was saturated to 2^64 - 1)
//  cli/threads-huge              `--threads 100000` (was "Resource temporarily unavailable")
//  cli/workers-huge              `--workers 300` (was "Loader: workers 300 not in [0, 256]")
//  cli/eval-workers-huge         `eval --workers 300`, before the checkpoint is read
//  cli/cudnn-on-cpu              `--conv-impl cudnn --device cpu` (was ignored; --precision errs)
//  run/out-other-run             --out into another run's folder without --overwrite
//  run/overwrite-bad-flag        --out RUN --overwrite --lr 0: nothing replaced
//  run/resume-too-many-parts     --resume RUN --pipeline 13 (more partitions than layers)
//  run/resume-other-data         --resume RUN --data folder (3 channels for a 1-channel model)
//  run/resume-finished           --resume RUN --epochs 1 after 1 epoch
//  run/resume-bad-lr             --resume RUN --lr -1
//  run/resume-bad-augment        --resume RUN --augment crop:0
//  run/resume-not-a-run          --resume of a folder without config.json
//  run/resume-checkpoint-file    --resume RUN/checkpoint.safetensors: names the folder to give
//  run/nan-loss                  a loss that becomes NaN (--lr 1e30): stops naming --lr
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <echelon/data/image_codec.h>

#include "tests/support/cli_run.h"
#include "tests/support/malformed_files.h"

namespace fs = std::filesystem;
using namespace echelon::test;

namespace {

struct ProbeCase {
  ProbeCase(std::string name, std::string args, std::vector<std::string> needles,
            fs::path run_folder = {}, bool accepted = false)
      : name(std::move(name)),
        args(std::move(args)),
        needles(std::move(needles)),
        run_folder(std::move(run_folder)),
        accepted(accepted) {}
  std::string name;
  std::string args;                  // echelon's arguments
  std::vector<std::string> needles;  // each must appear in the error line
  fs::path run_folder;               // non-empty: must be unchanged afterwards
  bool accepted;                     // a valid input: must succeed instead
};

// Address space capped at 4 GB: a decoder that allocated for a 65500 x 65500 header would fail
// with bad_alloc instead of the clear error. Not under sanitizers, which reserve terabytes of
// shadow memory at start.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr const char* kAddressSpaceCap = "";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr const char* kAddressSpaceCap = "";
#else
constexpr const char* kAddressSpaceCap = "ulimit -v 4000000; ";
#endif
#else
constexpr const char* kAddressSpaceCap = "ulimit -v 4000000; ";
#endif

// Every regular file under `dir` with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) files[entry.path().string()] = slurp(entry.path());
  return files;
}

void check_case(const ProbeCase& c) {
  CAPTURE(c.name);
  CAPTURE(c.args);
  const auto before =
      c.run_folder.empty() ? std::map<std::string, std::string>{} : snapshot(c.run_folder);
  const Run r = run(c.args, kAddressSpaceCap);
  if (c.accepted) {
    CHECK_MESSAGE(r.status == 0, r.err);
    return;
  }
  CHECK(r.status == 2);
  CHECK_MESSAGE(count_lines(r.err) == 1, r.err);
  CHECK_MESSAGE(r.err.rfind("echelon: error: ", 0) == 0, r.err);
  CHECK_MESSAGE(r.err.find("echelon: error: ", 1) == std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find(".cpp:") == std::string::npos, "source location shown: ", r.err);
  for (const std::string& needle : c.needles)
    CHECK_MESSAGE(r.err.find(needle) != std::string::npos, "missing '", needle, "' in ", r.err);
  if (!c.run_folder.empty()) CHECK_MESSAGE(snapshot(c.run_folder) == before, "run folder changed");
}

// A Fashion-MNIST-shaped folder: 20 train and 10 test examples.
fs::path idx_folder(const fs::path& root, const std::string& name) {
  const fs::path dir = root / name;
  write_bytes(dir / "train-images-idx3-ubyte", idx_images(20));
  write_bytes(dir / "train-labels-idx1-ubyte", idx_labels(20));
  write_bytes(dir / "t10k-images-idx3-ubyte", idx_images(10));
  write_bytes(dir / "t10k-labels-idx1-ubyte", idx_labels(10));
  return dir;
}

fs::path cifar_folder(const fs::path& root, const std::string& name) {
  const fs::path dir = root / name;
  for (int i = 1; i <= 5; ++i)
    write_bytes(dir / ("data_batch_" + std::to_string(i) + ".bin"), cifar_records(4));
  write_bytes(dir / "test_batch.bin", cifar_records(4));
  return dir;
}

echelon::data::Image pattern(int64_t h, int64_t w) {
  echelon::data::Image image{h, w, 3, Bytes(static_cast<size_t>(h * w * 3))};
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>(i * 5);
  return image;
}

// An image folder (classes a and b, 12 x 12 PNGs) whose first training image is `first` under
// the name `first_name` (sorted first in train/a).
fs::path image_folder(const fs::path& root, const std::string& name, const std::string& first_name,
                      const Bytes& first) {
  const fs::path dir = root / name;
  const Bytes png = echelon::data::encode_png(pattern(12, 12));
  for (const char* split : {"train", "test"})
    for (const char* label : {"a", "b"}) write_bytes(dir / split / label / "z.png", png);
  if (!first.empty() || !first_name.empty()) write_bytes(dir / "train" / "a" / first_name, first);
  return dir;
}

std::string train_on(const std::string& data, const fs::path& dir) {
  return "train --device cpu --progress none --epochs 1 --batch-size 4 --data " + data +
         " --data-dir " + dir.string();
}

std::vector<ProbeCase> data_cases(const fs::path& root) {
  std::vector<ProbeCase> cases;
  auto idx_case = [&](const std::string& name, const std::string& file, const Bytes& bytes,
                      std::vector<std::string> needles) {
    const fs::path dir = idx_folder(root, name);
    if (!bytes.empty()) write_bytes(dir / file, bytes);
    for (std::string& n : needles) n = n == "FILE" ? (dir / file).string() : n;
    cases.push_back({"data/" + name, train_on("fashion-mnist", dir), needles});
  };
  idx_case("idx-dims-overflow", "train-images-idx3-ubyte",
           idx_file(0x803, {0x7fffffff, 0x7fffffff, 0x7fffffff}, Bytes(64, 1)), {"FILE", "dims"});
  Bytes truncated = idx_images(20);
  truncated.resize(truncated.size() - 100);
  idx_case("idx-truncated", "train-images-idx3-ubyte", truncated, {"FILE", "truncated"});
  idx_case("idx-bad-magic", "train-images-idx3-ubyte", idx_labels(20), {"FILE", "bad magic"});
  idx_case("idx-count-mismatch", "train-labels-idx1-ubyte", idx_labels(19), {"count mismatch"});
  Bytes label_200 = idx_labels(20);
  label_200[8 + 3] = 200;
  idx_case("idx-train-label-range", "train-labels-idx1-ubyte", label_200,
           {"FILE", "record 3", "label 200"});
  Bytes test_label_200 = idx_labels(10);
  test_label_200[8 + 7] = 200;
  idx_case("idx-test-label-range", "t10k-labels-idx1-ubyte", test_label_200,
           {"FILE", "record 7", "label 200"});
  Bytes gz = gzip_member(idx_images(20));
  gz.resize(gz.size() / 2);
  idx_case("idx-gzip-truncated", "train-images-idx3-ubyte.gz", gz, {"FILE", "truncated"});
  {
    const fs::path dir = idx_folder(root, "idx-gzip-multi-member");
    fs::remove(dir / "train-images-idx3-ubyte");
    write_bytes(dir / "train-images-idx3-ubyte.gz", gzip_two_members(idx_images(20)));
    cases.push_back({"data/idx-gzip-multi-member", train_on("fashion-mnist", dir), {}, {}, true});
  }
  {
    const fs::path dir = cifar_folder(root, "cifar-label-range");
    Bytes records = cifar_records(4);
    records[2 * 3073] = 10;
    write_bytes(dir / "data_batch_3.bin", records);
    cases.push_back({"data/cifar-label-range",
                     train_on("cifar10", dir),
                     {(dir / "data_batch_3.bin").string(), "record 2", "label 10"}});
  }
  {
    const fs::path dir = cifar_folder(root, "cifar-truncated");
    Bytes records = cifar_records(4);
    records.resize(records.size() - 10);
    write_bytes(dir / "test_batch.bin", records);
    cases.push_back({"data/cifar-truncated",
                     train_on("cifar10", dir),
                     {(dir / "test_batch.bin").string(), "truncated"}});
  }
  fs::create_directories(root / "missing-folder");
  cases.push_back({"data/missing-folder",
                   train_on("fashion-mnist", root / "missing-folder"),
                   {(root / "missing-folder").string()}});
  return cases;
}

std::vector<ProbeCase> image_cases(const fs::path& root) {
  namespace ed = echelon::data;
  std::vector<ProbeCase> cases;
  if (!ed::have_stb()) return cases;  // the generators encode with stb_image_write
  const Bytes jpeg = ed::encode_jpeg(pattern(16, 16), 90);
  const Bytes png = ed::encode_png(pattern(12, 12));
  auto folder_case = [&](const std::string& name, const std::string& file, const Bytes& bytes,
                         const std::vector<std::string>& needles) {
    const fs::path dir = image_folder(root, name, file, bytes);
    std::vector<std::string> all = {(dir / "train" / "a" / file).string()};
    all.insert(all.end(), needles.begin(), needles.end());
    cases.push_back({"image/" + name, train_on("folder", dir), all});
  };
  folder_case("jpeg-huge", "a.jpg", jpeg_claiming(jpeg, 65500, 65500), {"exceeds the limit"});
  folder_case("png-huge", "a.png", png_claiming(png, 65500, 65500), {"exceeds the limit"});
  folder_case("png-short-data", "a.png", png_claiming(png, 4000, 4000),
              {"PNG image data inflates to", "4000x4000 header", "needs 48004000"});
  folder_case("png-crc-ihdr", "a.png", png_with_bad_crc(png, "IHDR"), {"chunk 'IHDR'", "bad CRC"});
  folder_case("png-crc-idat", "a.png", png_with_bad_crc(png, "IDAT"), {"chunk 'IDAT'", "bad CRC"});
  folder_case("jpeg-12-bit", "a.jpg", jpeg_with_precision(jpeg, 12),
              {"unsupported JPEG variant (12-bit precision"});
  folder_case("jpeg-lossless", "a.jpg", jpeg_with_marker(jpeg, 0xC3),
              {"unsupported JPEG variant (lossless"});
  folder_case("jpeg-truncated", "a.jpg", Bytes(jpeg.begin(), jpeg.begin() + jpeg.size() * 2 / 3),
              {"JPEG"});
  folder_case("empty-file", "a.png", {}, {"empty image file"});
  const std::string text = "this is not an image";
  folder_case("garbage", "a.jpg", Bytes(text.begin(), text.end()), {"cannot decode"});
  folder_case("mixed-sizes", "a.png", ed::encode_png(pattern(12, 20)), {});
  cases.back().needles = {"images must be square", "--resize N"};
  {
    const fs::path dir = image_folder(root, "unknown-test-class", "", {});
    write_bytes(dir / "test" / "zebra" / "z.png", png);
    cases.push_back({"image/unknown-test-class",
                     train_on("folder", dir),
                     {"class folder 'zebra' is not one of the training classes"}});
  }
  {
    const fs::path dir = image_folder(root, "no-train-split", "", {});
    fs::remove_all(dir / "train");
    cases.push_back({"image/no-train-split", train_on("folder", dir), {dir.string(), "train/"}});
  }
  return cases;
}

std::vector<ProbeCase> checkpoint_cases(const fs::path& root, const fs::path& good) {
  std::vector<ProbeCase> cases;
  const Bytes file = read_bytes(good);
  auto edited = [&](const std::string& name, const Bytes& bytes,
                    const std::vector<std::string>& needles) {
    const fs::path path = root / (name + ".safetensors");
    write_bytes(path, bytes);
    std::vector<std::string> all = {path.string()};
    all.insert(all.end(), needles.begin(), needles.end());
    cases.push_back({"ckpt/" + name, "eval --device cpu --checkpoint " + path.string(), all});
  };
  edited("dtype-mismatch", safetensors_edit(file, "\"dtype\":\"F32\"", "\"dtype\":\"I32\""),
         {"'0.weight' is int32 in the state dict but float32"});
  edited("num-classes-huge",
         safetensors_edit(file, "\"num_classes\":\"10\"", "\"num_classes\":\"1000000000000\""),
         {"1000000000000"});
  edited("header-0xff", safetensors_edit(file, "lenet5", "lenet\xff"), {"UTF-8"});
  edited("header-overlong", safetensors_edit(file, "lenet5", "lenet\xc0\xaf"), {"UTF-8"});
  edited("header-surrogate", safetensors_edit(file, "lenet5", "len\xed\xa0\x80"), {"UTF-8"});
  edited("shape-real", safetensors_edit(file, "\"shape\":[6,", "\"shape\":[6.0,"), {"shape"});
  edited("offset-real", safetensors_edit(file, "\"data_offsets\":[0,", "\"data_offsets\":[0.0,"),
         {"data_offsets"});
  edited("data-truncated", Bytes(file.begin(), file.end() - 100), {});
  Bytes past_end = file;
  past_end[5] = 0x01;  // header length + 2^40
  edited("header-past-end", past_end, {"past the end"});
  // A non-finite loss in the checkpoint's history (JSON writes it as "NaN") must not make the run's
  // own checkpoint unloadable: eval loads it, and so does --resume of a run folder holding it.
  const Bytes nan_history =
      safetensors_edit(file, "\\\"test_loss\\\":", "\\\"test_loss\\\":\\\"NaN\\\",\\\"was\\\":");
  write_bytes(root / "nan-history.safetensors", nan_history);
  cases.push_back({"ckpt/nan-in-history",
                   "eval --device cpu --checkpoint " + (root / "nan-history.safetensors").string(),
                   {},
                   {},
                   true});
  const fs::path nan_run = root / "nan-history-run";
  fs::copy(good.parent_path(), nan_run, fs::copy_options::recursive);
  write_bytes(nan_run / "checkpoint.safetensors", nan_history);
  cases.push_back({"ckpt/resume-nan-in-history",
                   "train --progress none --epochs 2 --resume " + nan_run.string(),
                   {},
                   {},
                   true});
  const fs::path dir = root / "a-folder.safetensors";
  fs::create_directories(dir);
  cases.push_back({"ckpt/directory",
                   "eval --device cpu --checkpoint " + dir.string(),
                   {dir.string(), "is a directory"}});
  // The run folder's config.json given as the checkpoint (once: "header length 7237123119542962811
  // runs past the end of the file").
  const fs::path config = root / "config.json";
  const std::string text = "{\n  \"model\": \"lenet5\"\n}\n";
  write_bytes(config, Bytes(text.begin(), text.end()));
  cases.push_back({"ckpt/json-file",
                   "eval --device cpu --checkpoint " + config.string(),
                   {config.string(), "is a text file (JSON?), not a .safetensors checkpoint"}});
  const fs::path missing = root / "missing.safetensors";
  cases.push_back(
      {"ckpt/missing", "eval --device cpu --checkpoint " + missing.string(), {missing.string()}});
  return cases;
}

std::vector<ProbeCase> flag_cases() {
  const std::string train = "train --data synthetic --device cpu --progress none ";
  return {
      {"cli/unknown-subcommand", "frobnicate", {"unknown subcommand 'frobnicate'", "train, eval"}},
      {"cli/unknown-flag", train + "--no-such-flag", {"--no-such-flag"}},
      {"cli/bad-number", train + "--epochs ten", {"--epochs", "ten"}},
      {"cli/lr-nan", train + "--lr nan", {"--lr"}},
      {"cli/unknown-model", train + "--model lenet7", {"unknown model \"lenet7\""}},
      {"cli/unknown-data", "train --device cpu --data imagenet", {"unknown dataset \"imagenet\""}},
      {"cli/folder-without-dir", "train --device cpu --data folder", {"--data-dir"}},
      {"cli/bad-device", "train --data synthetic --device tpu", {"--device", "tpu"}},
      {"cli/pipeline-ppv-conflict",
       train + "--pipeline 4 --ppv 2,5",
       {"--pipeline 4 and --ppv 2,5 (3 partitions) disagree"}},
      {"cli/micro-batches-alone",
       train + "--micro-batches 4",
       {"--micro-batches needs a pipeline"}},
      {"cli/gpipe-alone", train + "--schedule gpipe", {"'gpipe' needs a pipeline"}},
      {"cli/hybrid-switch-alone",
       train + "--hybrid-switch 2",
       {"--hybrid-switch needs a pipeline"}},
      {"cli/augment-unknown",
       train + "--augment crop:4,blur",
       {"--augment", "unknown word 'blur'"}},
      {"cli/augment-duplicate",
       train + "--augment flip,flip",
       {"--augment", "'flip' appears twice"}},
      {"cli/augment-bad-number", train + "--augment crop:4.5", {"--augment", "'crop:4.5'"}},
      {"cli/resize-not-folder", train + "--resize 32", {"--resize applies to --data folder only"}},
      {"cli/resize-negative",
       "train --device cpu --data folder --data-dir /tmp --resize -8",
       {"--resize must be in 0..1024 (got -8)"}},
      {"cli/step-size-alone",
       train + "--step-size 3",
       {"--step-size applies to --lr-schedule step"}},
      {"cli/milestones-alone",
       train + "--schedule cosine --milestones 3",
       {"--milestones applies to --lr-schedule multistep", "schedule is cosine"}},
      {"cli/gamma-alone", train + "--gamma 0.5", {"--gamma applies to --lr-schedule step"}},
      {"cli/seed-negative", train + "--seed -1", {"--seed", "got '-1'"}},
      {"cli/seed-overflow", train + "--seed 99999999999999999999", {"--seed", "whole number"}},
      {"cli/threads-huge", train + "--threads 100000", {"--threads must be in 0..1024"}},
      {"cli/workers-huge", train + "--workers 300", {"--workers must be auto or in 0..256"}},
      {"cli/eval-workers-huge",
       "eval --device cpu --checkpoint x --workers 300",
       {"--workers must be auto or in 0..256"}},
      {"cli/cudnn-on-cpu", train + "--conv-impl cudnn", {"--conv-impl cudnn applies to CUDA"}},
  };
}

// Commands that must fail validation without touching the finished run in `run_dir`.
std::vector<ProbeCase> run_folder_cases(const fs::path& root, const fs::path& run_dir,
                                        const std::string& run_args) {
  const std::string resume = "train --progress none --resume " + run_dir.string() + " ";
  fs::create_directories(root / "not-a-run");
  std::vector<ProbeCase> cases = {
      {"run/out-other-run",
       run_args + " --lr 0.5",
       {"already holds a run", "--overwrite"},
       run_dir},
      {"run/overwrite-bad-flag", run_args + " --overwrite --lr 0", {"--lr"}, run_dir},
      {"run/resume-too-many-parts", resume + "--epochs 3 --pipeline 13", {"13"}, run_dir},
      {"run/resume-finished", resume + "--epochs 1", {"already finished 1 epoch;"}, run_dir},
      {"run/resume-bad-lr", resume + "--epochs 3 --lr -1", {"--lr"}, run_dir},
      {"run/resume-bad-augment", resume + "--epochs 3 --augment crop:0", {"--augment"}, run_dir},
      {"run/resume-not-a-run",
       "train --resume " + (root / "not-a-run").string(),
       {(root / "not-a-run").string(), "config.json"}},
      {"run/resume-checkpoint-file",
       resume.substr(0, resume.size() - 1) + "/checkpoint.safetensors --epochs 3",
       {"is a file; give the run folder", "(--resume " + run_dir.string() + ")"},
       run_dir},
  };
  if (echelon::data::have_stb()) {  // a 3-channel image folder for a 1-channel model
    const fs::path rgb = image_folder(root, "rgb-folder", "", {});
    cases.push_back({"run/resume-other-data",
                     resume + "--epochs 3 --data folder --data-dir " + rgb.string(),
                     {"--resume", "model takes 1 x"},
                     run_dir});
  }
  return cases;
}

}  // namespace

TEST_SUITE("probe") {
  TEST_CASE("malformed-input probe: one clear error line, exit 2, run folders untouched") {
    if (!fs::exists(kBinary)) {
      MESSAGE("echelon binary not built: skipped");
      return;
    }
    const fs::path root = temp_dir("probe");
    // A finished 1-epoch run, the checkpoint for the safetensors cases and the run folder the
    // failing commands must leave alone.
    const fs::path run_dir = root / "run";
    const std::string run_args =
        "train --model lenet5 --data synthetic --limit-train 32 --limit-test 16 --batch-size 16 "
        "--epochs 1 --device cpu --progress none --out " +
        run_dir.string();
    const Run first = run(run_args);
    REQUIRE_MESSAGE(first.status == 0, first.err);
    const fs::path checkpoint = run_dir / "checkpoint.safetensors";

    std::vector<ProbeCase> cases;
    for (const std::vector<ProbeCase>& group :
         {data_cases(root), image_cases(root), checkpoint_cases(root, checkpoint), flag_cases(),
          run_folder_cases(root, run_dir, run_args)})
      cases.insert(cases.end(), group.begin(), group.end());
    // A loss that becomes NaN (lr 1e30) stops the run with one line naming --lr.
    cases.push_back({"run/nan-loss",
                     "train --model lenet5 --data synthetic --limit-train 32 --limit-test 16 "
                     "--batch-size 16 --epochs 1 --device cpu --progress none --lr 1e30",
                     {"non-finite training loss", "--lr"}});
    MESSAGE(cases.size(), " probe cases");
    CHECK(cases.size() >= 40);
    for (const ProbeCase& c : cases) check_case(c);
  }
}
