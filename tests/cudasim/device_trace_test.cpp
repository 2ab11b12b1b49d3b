// The trace of a 2-partition pipeline on the emulated cuda:0: besides each partition's host
// tracks, a "cuda:0" track per partition holds the CUDA-event spans of its ops (F, each layer
// L<i>, B, step); spans nest per track, and device and host clocks agree (no op runs on the
// stream before the host launched it).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <echelon/base/json.h>
#include <echelon/layers/conv2d.h>
#include <echelon/layers/flatten.h>
#include <echelon/layers/linear.h>
#include <echelon/layers/relu.h>
#include <echelon/layers/sequential.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

using namespace echelon;
using namespace echelon::parallel;

namespace {

struct Span {
  std::string name;
  double start, end;  // microseconds on the recorder's clock
};

std::vector<data::Batch> random_batches(int count, int64_t size) {
  Generator gen(3);
  std::vector<data::Batch> batches;
  for (int i = 0; i < count; ++i) {
    data::Batch batch;
    batch.images = ops::randn({size, 2, 5, 5}, gen);
    batch.labels = Tensor::from_vector<int64_t>(std::vector<int64_t>(size, i % 5), {size});
    batch.index = i;
    batch.fresh = size;
    batches.push_back(batch);
  }
  return batches;
}

// On one track spans nest: each lies after, or wholly inside, the ones before it.
void check_nesting(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.start < b.start || (a.start == b.start && a.end > b.end);
  });
  std::vector<double> open;
  for (const Span& s : spans) {
    CHECK(s.end >= s.start);
    while (!open.empty() && open.back() <= s.start + 1e-3) open.pop_back();
    if (!open.empty()) CHECK_MESSAGE(s.end <= open.back() + 1e-3, s.name);
    open.push_back(s.end);
  }
}

}  // namespace

TEST_SUITE("cudasim_trace") {
  TEST_CASE("pipeline --trace on cuda:0: an events-per-op track per partition, nested, one clock") {
    Generator gen(1);
    Conv2dOptions conv;
    conv.padding = 1;
    auto model = std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
        std::make_shared<Conv2d>(2, 3, 3, conv, gen), std::make_shared<ReLU>(),
        std::make_shared<Flatten>(), std::make_shared<Linear>(75, 5, gen)});
    PipelineOptions options;
    options.partitions = 2;
    options.ppv = "2";
    options.schedule = ScheduleKind::Stale;
    options.trace_path = "cudasim_device_trace.json";
    SGDOptions sgd;
    sgd.lr = 0.05;
    PipelineEngine engine(model, sgd, Device::cuda(0), options);
    for (const data::Batch& batch : random_batches(3, 4)) engine.train_step(batch);
    engine.finish_epoch();

    const json::Value file = json::parse_file(options.trace_path);
    std::map<int64_t, std::string> processes;
    std::map<std::pair<int64_t, int64_t>, std::string> threads;
    std::map<std::pair<int64_t, int64_t>, std::vector<Span>> spans;
    for (const json::Value& e : file.at("traceEvents").as_array()) {
      const std::string ph = e.at("ph").as_string();
      const json::Value* tid = e.find("tid");  // absent on process names
      const std::pair<int64_t, int64_t> track{e.at("pid").as_int(), tid ? tid->as_int() : 0};
      if (ph == "M" && e.at("name").as_string() == "process_name")
        processes[track.first] = e.at("args").at("name").as_string();
      if (ph == "M" && e.at("name").as_string() == "thread_name")
        threads[track] = e.at("args").at("name").as_string();
      if (ph != "X") continue;
      const double ts = e.at("ts").as_double();
      spans[track].push_back({e.at("name").as_string(), ts, ts + e.at("dur").as_double()});
    }
    int device_tracks = 0;
    for (const auto& [track, list] : spans) {
      check_nesting(list);
      if (processes[track.first] != "cuda:0") continue;
      ++device_tracks;
      const std::string& thread = threads[track];
      const int partition = thread.find("partition 1") == 0 ? 1 : 0;
      CHECK(thread.find("stream (events per op)") != std::string::npos);
      // The host's compute track of the same partition: pid = partition, tid 0.
      std::map<std::string, Span> host;
      for (const Span& s : spans[{partition, 0}]) host.emplace(s.name, s);
      std::map<std::string, int> kinds;
      for (const Span& s : list) {
        kinds[s.name.substr(0, s.name.find(' '))]++;
        const auto it = host.find(s.name);
        if (it == host.end()) continue;  // layers and steps inside B have no host twin by name
        // A stream cannot start an op before the host enqueued it (1 us of rounding).
        CHECK_MESSAGE(s.start >= it->second.start - 1, s.name);
      }
      CHECK(kinds["F"] == 3);  // one per mini-batch
      CHECK(kinds["B"] == 3);
      CHECK(kinds["step"] == 3);
      CHECK(kinds.count(partition == 0 ? "L0" : "L2") == 1);  // flat layer indices
      CHECK(kinds.count(partition == 0 ? "L1" : "L3") == 1);
    }
    CHECK(device_tracks == 2);
  }
}
