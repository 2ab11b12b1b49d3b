// Spec strings of the command line: --ppv list, --device (device list entries), --schedule
// (pipeline), --echo, --echo-at, on-bad-sample, dtype names, --augment, --devices. Byte 0 picks
// the parser (and for --devices the partition count), the rest is the text. Contract: parses, or
// an echelon::Error whose message quotes the text.
#include "fuzz_common.h"

#include <algorithm>

#include <echelon/app/train.h>
#include <echelon/data/loader.h>
#include <echelon/data/transforms.h>
#include <echelon/parallel/partition.h>
#include <echelon/parallel/schedule.h>
#include <echelon/tensor/device.h>
#include <echelon/tensor/dtype.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  if (size < 1) return 0;
  // The text as argv delivers it: a C string, so it ends at the first NUL (an error message, a
  // C string too, could not quote what follows).
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  text.resize(std::min(text.size(), text.find('\0')));
  fuzz::expect_parse_or_error(text, [&] {
    switch (data[0] % 10) {
      case 0: {
        const std::vector<int64_t> cuts = echelon::parallel::parse_ppv(text);
        for (size_t i = 1; i < cuts.size(); ++i)
          if (cuts[i] <= cuts[i - 1]) fuzz::finding("--ppv accepted cuts that do not rise");
        // What the pipeline does with them: partitions of a model of 12 layers (the error names
        // the placement as it reads it back, "placement 2,5: ...").
        fuzz::expect_parse_or_error("placement", [&] {
          const auto ranges = echelon::parallel::ranges_from_cuts(cuts, 12);
          if (ranges.size() != cuts.size() + 1) fuzz::finding("--ppv ranges miscounted");
          for (const auto& range : ranges)
            if (range.begin >= range.end) fuzz::finding("--ppv gave an empty partition");
        });
        break;
      }
      case 1:
        (void)echelon::Device::parse(text);
        break;
      case 2:
        (void)echelon::app::resolve_device(text);
        break;
      case 3: {
        const auto kind = echelon::parallel::parse_schedule(text);
        if (echelon::parallel::schedule_name(kind) != text)
          fuzz::finding("--schedule-pipeline name does not read back");
        break;
      }
      case 4: {
        echelon::data::LoaderOptions options;
        options.set_echo(text);
        if (!options.echo_auto && !(options.echo_factor >= 1.0))
          fuzz::finding("--echo accepted a factor below 1");
        break;
      }
      case 5:
        (void)echelon::data::parse_echo_placement(text);
        break;
      case 6:
        (void)echelon::data::parse_on_bad_sample(text);
        break;
      case 7:
        (void)echelon::parse_dtype(text);
        break;
      case 8: {
        const echelon::data::AugmentRecipe recipe = echelon::data::parse_augment_spec(text);
        if (recipe.crop_padding < 0 || recipe.crop_padding > 1024)
          fuzz::finding("--augment accepted a padding outside 0..1024");
        if (text != "none" && recipe.crop_padding == 0 && !recipe.horizontal_flip)
          fuzz::finding("--augment accepted a spec other than none that does nothing");
        break;
      }
      case 9: {
        const int partitions = 1 + (data[0] / 10) % 8;
        const auto devices = echelon::parallel::parse_partition_devices(text, partitions);
        if (static_cast<int>(devices.size()) != partitions)
          fuzz::finding("--devices gave a device count other than the partitions'");
        break;
      }
    }
  });
  return 0;
}
