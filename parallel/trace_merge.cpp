#include <echelon/parallel/trace_merge.h>

#include <set>
#include <utility>

#include <echelon/base/error.h>
#include <echelon/base/json.h>

namespace echelon::parallel {

std::string merge_rank_traces(const std::vector<std::string>& texts,
                              const std::vector<double>& offsets_us) {
  ECH_CHECK(texts.size() == offsets_us.size(), "merge_rank_traces: ", texts.size(), " traces but ",
            offsets_us.size(), " clock offsets");
  json::Value merged = json::Value::array();
  for (size_t rank = 0; rank < texts.size(); ++rank) {
    const std::string what = str("trace of rank ", rank);
    json::Value trace = json::parse(texts[rank], what);
    json::Value* events = nullptr;
    if (trace.is_object())
      for (auto& [key, value] : trace.as_object())
        if (key == "traceEvents" && value.is_array()) events = &value;
    ECH_CHECK(events != nullptr, what, ": no traceEvents array");
    const int64_t pid_base = static_cast<int64_t>(rank) * kRankPidStride;
    // A rank names every partition but runs one: keep the names of processes it has events in.
    std::set<int64_t> active;
    for (const json::Value& event : events->as_array()) {
      ECH_CHECK(event.is_object() && event.contains("pid") && event.contains("ph"), what,
                ": an event without pid or ph");
      if (event.at("ph").as_string() != "M") active.insert(event.at("pid").as_int());
    }
    for (json::Value& event : events->as_array()) {
      if (active.count(event.at("pid").as_int()) == 0) continue;
      event.set("pid", pid_base + event.at("pid").as_int());
      if (event.contains("ts")) event.set("ts", event.at("ts").as_double() + offsets_us[rank]);
      const bool names_process =
          event.at("ph").as_string() == "M" && event.at("name").as_string() == "process_name";
      if (names_process) {
        const std::string name = event.at("args").at("name").as_string();
        event.set("args", json::Value::object().set("name", str("rank ", rank, ": ", name)));
        // Perfetto and chrome://tracing sort processes by this index: rank by rank.
        merged.push(json::Value::object()
                        .set("name", "process_sort_index")
                        .set("ph", "M")
                        .set("pid", event.at("pid"))
                        .set("args", json::Value::object().set("sort_index", event.at("pid"))));
      }
      merged.push(std::move(event));
    }
  }
  return json::Value::object()
      .set("traceEvents", std::move(merged))
      .set("displayTimeUnit", "ms")
      .dump();
}

}  // namespace echelon::parallel
