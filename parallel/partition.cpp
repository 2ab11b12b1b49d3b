#include <echelon/parallel/partition.h>

#include <cctype>
#include <sstream>

#include <echelon/base/error.h>
#include <echelon/layers/sequential.h>

namespace echelon::parallel {

std::vector<int64_t> parse_ppv(const std::string& text) {
  std::vector<int64_t> cuts;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    ECH_CHECK(!item.empty(), "partition points '", text, "': empty entry (expected e.g. 2,5)");
    for (char c : item) {
      ECH_CHECK(std::isdigit(static_cast<unsigned char>(c)), "partition points '", text, "': '",
                item, "' is not a layer index");
    }
    ECH_CHECK(item.size() < 10, "partition points '", text, "': layer index '", item,
              "' is too large");
    const int64_t cut = std::stoll(item);
    ECH_CHECK(cuts.empty() || cut > cuts.back(), "partition points '", text,
              "': cut points must rise strictly, got ", cut, " after ", cuts.back());
    cuts.push_back(cut);
  }
  ECH_CHECK(!cuts.empty() && text.back() != ',', "partition points '", text,
            "': expected comma-separated layer indices, e.g. 2,5");
  return cuts;
}

std::vector<Device> parse_partition_devices(const std::string& text, int partitions) {
  std::vector<Device> listed;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    ECH_CHECK(!item.empty(), "device list '", text, "': empty entry (expected e.g. cuda:0,cuda:1)");
    try {
      listed.push_back(Device::parse(item));
    } catch (const Error&) {
      ECH_FAIL("device list '", text, "': '", item, "' is not a device (cpu, cuda or cuda:N)");
    }
  }
  ECH_CHECK(!listed.empty() && text.back() != ',', "device list '", text,
            "': expected comma-separated devices, e.g. cuda:0,cuda:1");
  const int count = static_cast<int>(listed.size());
  ECH_CHECK(partitions >= 1 && count <= partitions && partitions % count == 0, "device list '",
            text, "': ", count, " devices for ", partitions,
            " partitions (give one per partition, or a count that divides ", partitions, ")");
  std::vector<Device> devices;
  devices.reserve(static_cast<size_t>(partitions));
  for (int k = 0; k < partitions; ++k) devices.push_back(listed[k / (partitions / count)]);
  return devices;
}

std::string format_ppv(const std::vector<int64_t>& cuts) {
  std::string text;
  for (size_t i = 0; i < cuts.size(); ++i) text += (i ? "," : "") + std::to_string(cuts[i]);
  return text;
}

std::vector<LayerRange> ranges_from_cuts(const std::vector<int64_t>& cuts, int64_t num_layers) {
  std::vector<LayerRange> ranges;
  int64_t begin = 0;
  for (int64_t cut : cuts) {
    ECH_CHECK(cut > begin && cut < num_layers, "placement ", format_ppv(cuts), ": cut ", cut,
              " must lie in (", begin, ", ", num_layers,
              ") so that no partition is empty (the model has ", num_layers, " layers)");
    ranges.push_back({begin, cut});
    begin = cut;
  }
  ranges.push_back({begin, num_layers});
  return ranges;
}

std::vector<int64_t> even_cuts(int64_t num_layers, int num_partitions) {
  ECH_CHECK(num_partitions >= 1 && num_partitions <= num_layers, "cannot cut ", num_layers,
            " layers into ", num_partitions, " partitions (one layer each at least)");
  std::vector<int64_t> cuts;
  for (int k = 1; k < num_partitions; ++k) cuts.push_back(num_layers * k / num_partitions);
  return cuts;
}

std::vector<std::shared_ptr<Sequential>> split_model(const Sequential& model,
                                                     const std::vector<int64_t>& cuts) {
  std::vector<std::shared_ptr<Sequential>> parts;
  for (const LayerRange& range : ranges_from_cuts(cuts, static_cast<int64_t>(model.size()))) {
    // A block whose pieces all land here runs whole (only a cut block pays for its split).
    parts.push_back(model.slice(range.begin, range.end)->join_split_blocks());
  }
  return parts;
}

}  // namespace echelon::parallel
