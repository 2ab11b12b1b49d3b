// `echelon train --augment` and `--resize` as a user runs them: strict specs, config.json and
// --resume, and an image folder of mixed, non-square sizes that trains, evaluates and resumes.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <echelon/data/image_codec.h>

#include "tests/support/cli_run.h"

namespace fs = std::filesystem;

using echelon::test::check_usage_error;
using echelon::test::kBinary;
using echelon::test::run;
using echelon::test::Run;
using echelon::test::slurp;
using echelon::test::temp_dir;

namespace {

// The metrics.jsonl epoch records up to the first timing field (losses and accuracies).
std::vector<std::string> epoch_records(const fs::path& dir) {
  std::vector<std::string> found;
  std::istringstream lines(slurp(dir / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);)
    if (line.find("\"type\":\"epoch\"") != std::string::npos)
      found.push_back(line.substr(0, line.find(",\"train_images\"")));
  return found;
}

// root/{train,test}/{a,b}/ with PNG, JPEG and CMYK JPEG images of mixed, non-square sizes.
void write_mixed_folder(const fs::path& root) {
  namespace ed = echelon::data;
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{20, 31}, {40, 17}, {24, 24}, {33, 50}};
  int n = 0;
  for (const char* split : {"train", "test"})
    for (const char* label : {"a", "b"}) {
      fs::create_directories(root / split / label);
      for (int i = 0; i < (std::string(split) == "train" ? 4 : 2); ++i, ++n) {
        const auto [h, w] = sizes[static_cast<size_t>(n) % sizes.size()];
        ed::Image image{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h * w * 3))};
        for (size_t p = 0; p < image.pixels.size(); ++p)  // class a darker than class b
          image.pixels[p] = static_cast<uint8_t>((label[0] == 'a' ? 40 : 180) + (p * 13 + n) % 50);
        const fs::path file = root / split / label / ("img" + std::to_string(i));
        if (i % 2)
          ed::write_file(file.string() + ".png", ed::encode_png(image));
        else
          ed::write_file(file.string() + ".jpg", ed::encode_jpeg(image));
      }
    }
  // A scanner-style CMYK JPEG among them (decoded to RGB like any other).
  if (ed::have_turbojpeg()) {
    std::vector<uint8_t> cmyk(30 * 22 * 4);
    for (size_t p = 0; p < cmyk.size(); ++p) cmyk[p] = static_cast<uint8_t>(150 + p % 97);
    ed::write_file((root / "train" / "b" / "scan.jpg").string(),
                   ed::encode_jpeg_cmyk(cmyk, 30, 22));
  }
}

}  // namespace

TEST_SUITE("cli_data") {
  TEST_CASE("--augment and --resize: bad values exit 2 with one line naming flag and token") {
    if (!fs::exists(kBinary)) return;
    const std::string base = "train --data synthetic --device cpu --augment ";
    check_usage_error(base + "crop:4,blur",
                      "--augment: augmentation 'crop:4,blur': unknown word 'blur'");
    check_usage_error(base + "crop:x", "'crop:x' needs a padding of 1..1024");
    check_usage_error(base + "flip,flip", "'flip' appears twice");
    check_usage_error(base + "none,flip", "'none' cannot be combined");
    check_usage_error(base + "crop:4,", "empty entry");
    check_usage_error("train --data synthetic --device cpu --resize 16",
                      "--resize applies to --data folder only");
    check_usage_error("train --data folder --data-dir /tmp --device cpu --resize -3",
                      "--resize must be in 0..1024 (got -3)");
    check_usage_error("train --data folder --data-dir /tmp --device cpu --resize 2x", "--resize");
  }

  TEST_CASE("--augment is saved in config.json, restored on --resume, and changes the stream") {
    if (!fs::exists(kBinary)) return;
    const fs::path whole = temp_dir("augment_whole"), parts = temp_dir("augment_parts"),
                   plain = temp_dir("augment_none");
    const std::string args =
        "train --model lenet5 --data synthetic --limit-train 64 --limit-test 16 --batch-size 16 "
        "--device cpu --progress none --deterministic --lr 0.05 --epochs 2 --out ";
    REQUIRE(run(args + whole.string() + " --augment crop:3,flip").status == 0);
    REQUIRE(run(args + plain.string() + " --augment none").status == 0);
    REQUIRE(run(args + parts.string() + " --augment crop:3,flip --stop-after-epoch 1").status == 0);
    CHECK(slurp(parts / "config.json").find("\"augment\": \"crop:3,flip\"") != std::string::npos);
    // Not given again: config.json brings it back, so the run continues bit for bit.
    const Run resumed = run("train --progress none --resume " + parts.string());
    REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
    REQUIRE(epoch_records(whole).size() == 2);
    CHECK(epoch_records(parts) == epoch_records(whole));
    CHECK(epoch_records(plain) != epoch_records(whole));  // the augmentation did something
    // A bad --augment on --resume: refused before the folder is touched.
    const std::string config = slurp(parts / "config.json"),
                      metrics = slurp(parts / "metrics.jsonl");
    check_usage_error(
        "train --progress none --epochs 3 --augment crop:0 --resume " + parts.string(),
        "'crop:0' needs a padding");
    CHECK(slurp(parts / "config.json") == config);
    CHECK(slurp(parts / "metrics.jsonl") == metrics);
  }

  TEST_CASE("--resize: a folder of mixed, non-square images trains, evaluates and resumes") {
    if (!fs::exists(kBinary) || !echelon::data::have_stb()) return;
    const fs::path data = temp_dir("resize_data"), out = temp_dir("resize_run");
    write_mixed_folder(data);
    const std::string train = "train --model lenet5 --data folder --data-dir " + data.string() +
                              " --batch-size 4 --device cpu --progress none --epochs 2 ";
    check_usage_error(train + "--out " + out.string(),
                      "images must be square and of one size for the model zoo");
    // A size the model cannot take names the model's sizes and the flag that sets the folder's.
    check_usage_error(train + "--resize 16", "lenet5: image size must be 28 or 32, got 16");
    check_usage_error(train + "--resize 16", "at --resize 16; --resize N makes them N x N)");
    const Run first = run(train + "--resize 28 --stop-after-epoch 1 --out " + out.string());
    REQUIRE_MESSAGE(first.status == 0, first.err);
    CHECK(slurp(out / "config.json").find("\"resize\": 28") != std::string::npos);
    const std::string counts =
        echelon::data::have_turbojpeg() ? "(9 train / 4 test)" : "(8 train / 4 test)";
    CHECK_MESSAGE(first.out.find(counts) != std::string::npos, first.out);
    // Files are decoded per example: auto keeps a loader thread to overlap that with the step.
    CHECK_MESSAGE(first.out.find("loader: workers 1 (auto: threads overlap reading and decoding") !=
                      std::string::npos,
                  first.out);
    CHECK(slurp(out / "config.json").find("\"workers\": 1") != std::string::npos);
    // eval resizes and centre-crops as in training (the checkpoint's config).
    const Run eval =
        run("eval --device cpu --checkpoint " + (out / "checkpoint.safetensors").string());
    REQUIRE_MESSAGE(eval.status == 0, eval.err);
    CHECK(eval.out.find("test (4 images)") != std::string::npos);
    // Another size on resume: the model takes 28x28; refused before the folder is touched.
    const std::string config = slurp(out / "config.json"), metrics = slurp(out / "metrics.jsonl");
    check_usage_error("train --progress none --resize 32 --resume " + out.string(),
                      "the run's model takes 3 x 28x28 images");
    CHECK(slurp(out / "config.json") == config);
    CHECK(slurp(out / "metrics.jsonl") == metrics);
    const Run resumed = run("train --progress none --resume " + out.string());
    REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
    CHECK(epoch_records(out).size() == 2);
  }

  TEST_CASE(
      "--workers auto: inline for in-memory data on the CPU; config.json records the number") {
    if (!fs::exists(kBinary)) return;
    const std::string base = "train --data synthetic --device cpu --progress none ";
    check_usage_error(base + "--workers -1", "--workers: invalid value \"-1\"");
    check_usage_error(base + "--workers abc", "--workers: invalid value \"abc\"");
    check_usage_error(base + "--echo auto --workers 0", "--echo auto needs loader threads");
    const std::string small = base + "--limit-train 64 --limit-test 32 --batch-size 16 ";
    const fs::path out = temp_dir("workers_auto_run");
    const Run first = run(small + "--epochs 2 --stop-after-epoch 1 --out " + out.string());
    REQUIRE_MESSAGE(first.status == 0, first.err);
    CHECK_MESSAGE(
        first.out.find("loader: workers 0 (auto: in-memory data set)") != std::string::npos,
        first.out);
    // The resolved number, not "auto": a resume hands out this run's batches whatever auto
    // would pick then.
    CHECK(slurp(out / "config.json").find("\"workers\": 0,") != std::string::npos);
    CHECK(slurp(out / "summary.json").find("auto: in-memory data set") != std::string::npos);
    const Run resumed = run("train --progress none --resume " + out.string());
    REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
    CHECK_MESSAGE(resumed.out.find("loader: workers 0 (given)") != std::string::npos, resumed.out);
    CHECK(epoch_records(out).size() == 2);
    // The same two epochs in one run (auto again): identical losses and accuracies.
    const fs::path whole = temp_dir("workers_auto_whole");
    const Run straight = run(small + "--epochs 2 --out " + whole.string());
    REQUIRE_MESSAGE(straight.status == 0, straight.err);
    CHECK(epoch_records(whole) == epoch_records(out));

    const Run echo_auto = run(small + "--epochs 1 --echo auto");
    REQUIRE_MESSAGE(echo_auto.status == 0, echo_auto.err);
    CHECK_MESSAGE(
        echo_auto.out.find("loader: workers 1 (auto: --echo auto needs loader threads)") !=
            std::string::npos,
        echo_auto.out);
    const Run two = run(small + "--epochs 1 --workers 2");
    REQUIRE_MESSAGE(two.status == 0, two.err);
    CHECK_MESSAGE(two.out.find("loader: workers 2 (given)") != std::string::npos, two.out);
    const Run explicit_auto = run(small + "--epochs 1 --workers auto");
    REQUIRE_MESSAGE(explicit_auto.status == 0, explicit_auto.err);
    CHECK(explicit_auto.out.find("loader: workers 0 (auto") != std::string::npos);
    // eval: auto on the test split; an explicit count and a bad value.
    const std::string eval = "eval --device cpu --checkpoint " +
                             (out / "checkpoint.safetensors").string() + " --workers ";
    for (const char* workers : {"auto", "0", "2"}) {
      const Run r = run(eval + workers);
      CHECK_MESSAGE(r.status == 0, r.err);
    }
    check_usage_error(eval + "abc", "--workers: invalid value \"abc\"");
  }
}
