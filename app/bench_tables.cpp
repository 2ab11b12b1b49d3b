// The readable tables of `echelon bench` (app/bench.h). Times in milliseconds; "IQR" is the
// spread between the first and third quartile of the repeated rounds.
#include <cstdarg>
#include <cstdio>

#include <echelon/app/bench.h>

namespace echelon::app {

namespace {

// printf into `out`.
void line(std::ostream& out, const char* format, ...) __attribute__((format(printf, 2, 3)));
void line(std::ostream& out, const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  out << buffer;
}

double ms(double seconds) {
  return seconds * 1e3;
}

double mib(double bytes) {
  return bytes / (1024.0 * 1024.0);
}

}  // namespace

void print_op_table(const parallel::OpBenchResult& r, std::ostream& out) {
  line(out, "op %s (%s): %s\n", r.op.c_str(), r.family.c_str(), r.shapes.c_str());
  line(out, "device %s, threads %d, warm-up %d, repeats %d, baseline %s\n",
       r.device.to_string().c_str(), r.threads, r.warmup, r.repeats,
       r.impls.empty() ? "-" : r.impls.front().impl.c_str());
  line(out, "%-7s %-16s %11s %9s %10s %10s %11s %8s\n", "impl", "pass", "median ms", "IQR ms",
       "min ms", "max ms", "rate", "speedup");
  for (const parallel::OpImplResult& impl : r.impls) {
    for (const parallel::OpPassResult& p : impl.passes) {
      const bool compute = p.flops > 0;
      line(out, "%-7s %-16s %11.4f %9.4f %10.4f %10.4f %6.2f %-4s %7.2fx\n", impl.impl.c_str(),
           p.pass.c_str(), ms(p.time.median_s), ms(p.time.iqr_s()), ms(p.time.min_s),
           ms(p.time.max_s), compute ? p.gflops() : p.gbytes(), compute ? "GF/s" : "GB/s",
           p.speedup);
    }
  }
}

void print_model_table(const parallel::ModelBenchResult& r, std::ostream& out) {
  const Shape shape = r.input.image_shape();
  line(out, "model %s, batch %lld (%lldx%lldx%lld), device %s, threads %d\n", r.input.model.c_str(),
       static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
       static_cast<long long>(shape[2]), static_cast<long long>(shape[3]),
       r.device.to_string().c_str(), r.threads);
  if (!r.layers.empty()) {
    // Split pieces: their own times include the copies between them; "cost" is what a cut weighs.
    line(out, "%-3s %-44s %10s %9s %10s %9s %10s %s%7s\n", "#", "layer", "fwd ms", "fwd IQR",
         "bwd ms", "bwd IQR", "act MiB", r.split_blocks ? "   cost ms" : "", "share");
    for (const parallel::LayerBench& l : r.layers) {
      const parallel::LayerProfile& p = l.profile;
      char cost[32] = "";
      if (r.split_blocks) std::snprintf(cost, sizeof cost, " %9.3f", ms(l.cost_s));
      line(out, "%-3lld %-44.44s %10.3f %9.3f %10.3f %9.3f %10.3f%s %6.1f%%\n",
           static_cast<long long>(l.index), l.layer.c_str(), ms(p.forward_time.median_s),
           ms(p.forward_time.iqr_s()), ms(p.backward_time.median_s), ms(p.backward_time.iqr_s()),
           mib(static_cast<double>(p.activation_bytes)), cost, 100.0 * l.share);
    }
    if (r.split_blocks)
      line(out,
           "layers total %.3f ms (costs: each block's pieces scaled to the block's own time, as "
           "--balance auto weighs them; the pieces' own times sum to %.3f ms with the copies "
           "between them, which only a block a cut falls in pays)\n",
           ms(r.layers_total_s), ms(r.pieces_total_s));
    else
      line(out, "layers total %.3f ms (forward + backward medians, layer by layer)\n",
           ms(r.layers_total_s));
  }
  line(out,
       "step (forward, loss, backward, SGD): median %.3f ms, IQR %.3f ms, min %.3f ms, "
       "max %.3f ms over %d; %.1f images/s\n",
       ms(r.step.median_s), ms(r.step.iqr_s()), ms(r.step.min_s), ms(r.step.max_s), r.step.repeats,
       r.images_per_s);
}

void print_pipeline_table(const parallel::PipelineBenchResult& r, std::ostream& out) {
  line(out, "%s, model %s, batch %lld, device %s, %d measured steps\n", r.engine.c_str(),
       r.input.model.c_str(), static_cast<long long>(r.input.batch_size),
       r.device.to_string().c_str(), r.steps);
  line(out, "%-9s %-9s %-7s %9s %9s %9s %9s %7s %9s\n", "partition", "layers", "device", "busy s",
       "idle s", "bubble s", "xfer s", "util", "peak MiB");
  for (const parallel::PartitionBench& p : r.partitions) {
    const parallel::PartitionStats& s = p.stats;
    const std::string layers = std::to_string(s.layers.begin) + "-" + std::to_string(s.layers.end);
    line(out, "%-9d %-9s %-7s %9.3f %9.3f %9.3f %9.3f %6.1f%% %9.2f\n", s.partition, layers.c_str(),
         s.device.c_str(), s.busy_s, p.idle_s, s.wait_s, s.send_s,
         r.wall_s > 0 ? 100.0 * s.busy_s / r.wall_s : 0.0, mib(static_cast<double>(s.peak_bytes)));
  }
  line(out, "pipeline %.1f images/s (%.3f s), one worker %.1f images/s (%.3f s): %.2fx\n",
       r.images_per_s, r.wall_s, r.single_images_per_s, r.single_wall_s, r.speedup());
}

void print_loader_table(const parallel::LoaderBenchResult& r, std::ostream& out) {
  const data::LoaderStats& s = r.stats;
  line(out, "loader: %lld batches, %lld items in %.3f s (%.1f items/s to the consumer)\n",
       static_cast<long long>(r.batches), static_cast<long long>(r.items), r.wall_s, r.items_per_s);
  line(out, "%-9s %7s %9s %11s %9s %9s %11s %8s\n", "stage", "workers", "items", "items/s",
       "busy s", "stall s", "ring mean", "ring cap");
  for (size_t i = 0; i < s.stages.size(); ++i) {
    const data::LoaderStageStats& st = s.stages[i];
    const double mean = i < r.rings.size() ? r.rings[i].mean_occupancy : 0.0;
    line(out, "%-9s %7d %9lld %11.1f %9.3f %9.3f %11.1f %8lld\n", st.name.c_str(), st.workers,
         static_cast<long long>(st.items), st.rate, st.busy_s, st.stall_s, mean,
         static_cast<long long>(st.ring_capacity));
  }
  line(out, "echo %s at %s: factor %.2f (effective %.2f), fresh %lld, echoed %lld\n",
       s.echo_auto ? "auto" : "fixed", data::echo_placement_name(s.placement), s.factor,
       s.effective_factor, static_cast<long long>(s.fresh), static_cast<long long>(s.echoed));
  // Inline (--workers 0) every stage runs inside next(): no parallel upstream for auto to match.
  const bool runs_inline = !s.stages.empty() && s.stages.front().workers == 0;
  if (runs_inline)
    line(out,
         "upstream %.1f fresh items/s, downstream %.1f items/s, R = %.2f; inline (--workers 0): "
         "--echo auto needs loader threads\n",
         s.upstream_rate, s.downstream_rate, s.measured_R);
  else
    line(out,
         "upstream %.1f fresh items/s, downstream %.1f items/s, R = %.2f; --echo auto would "
         "choose %.2f\n",
         s.upstream_rate, s.downstream_rate, s.measured_R, r.auto_echo);
}

}  // namespace echelon::app
