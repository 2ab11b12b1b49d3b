// The captured training step of the single-device engine (PipelineOptions::cuda_graph; the design
// is in cuda_graph.h): eager warm-up steps, one capture, replays for every later batch of the
// captured shape.
#include <echelon/parallel/pipeline.h>

#include <string>

#include <echelon/base/error.h>
#include <echelon/layers/dropout.h>
#include <echelon/tensor/ops.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon::parallel {

namespace {

// The path of the first Dropout in `module` ("" when none): its mask's Philox counter is a
// kernel argument, fixed at capture, so every replay would drop the same units.
std::string first_dropout(const Module& module, const std::string& path) {
  for (const auto& [name, child] : module.named_children()) {
    std::string child_path = path.empty() ? name : path;
    if (!path.empty()) child_path.append(".").append(name);
    if (dynamic_cast<const Dropout*>(child.get())) return child_path;
    if (std::string found = first_dropout(*child, child_path); !found.empty()) return found;
  }
  return "";
}

}  // namespace

void PipelineEngine::start_cuda_graph() {
  std::string dropout;
  const char* need = "";
  if (stages_.size() != 1 || distributed()) {
    need = "one partition in one process (no --pipeline, no --data-parallel)";
  } else if (!stages_[0]->device().is_cuda()) {
    need = "a CUDA device";
  } else if (!deferred_) {
    need = "the sync-free step (defer_step_stats; the trainer sets it from the log interval)";
  } else if (trace_ || options_.timed_ops) {
    need = "no trace and no timed ops (both read clocks inside the step)";
  } else if (dropout = first_dropout(stages_[0]->layers(), ""); !dropout.empty()) {
    need =
        "a model without dropout (its mask's random offset is fixed at capture, so every "
        "replay would drop the same units); this one has a Dropout at ";
  }
  ECH_CHECK(*need == '\0', "--cuda-graph: capturing the training step needs ", need, dropout);
#if ECHELON_WITH_CUDA
  graph_ = std::make_unique<CudaGraphStep>(stages_[0]->device());
  // The rate reaches the graph through device memory, set on the graph's stream before a step.
  const cuda::StreamGuard on_graph_stream(graph_->stream(), stages_[0]->device().index);
  stages_[0]->optimizer().keep_lr_on_device(stages_[0]->device());
#else
  ECH_FAIL("--cuda-graph: this build has no CUDA");
#endif
}

void PipelineEngine::graph_step(const data::Batch& batch) {
#if ECHELON_WITH_CUDA
  const Device device = stages_[0]->device();
  const cudaStream_t caller = cuda::current_stream(device.index);
  graph_->enter(caller);
  {
    const cuda::StreamGuard on_graph_stream(graph_->stream(), device.index);
    SGD& sgd = stages_[0]->optimizer();
    sgd.set_lr(lr_);  // a changed rate is written to its device scalar, before the step
    const bool static_shape =
        graph_images_.defined() && batch.images.shape() == graph_images_.shape() &&
        batch.labels.shape() == graph_labels_.shape() && batch.images.dtype() == kFloat32 &&
        batch.labels.dtype() == graph_labels_.dtype() && current_ != ScheduleKind::GPipe;
    if (!static_shape && !graph_->captured()) {  // a new shape: warm up on it
      graph_images_ = Tensor::empty(batch.images.shape(), kFloat32, device);
      graph_labels_ = Tensor::empty(batch.labels.shape(), batch.labels.dtype(), device);
      graph_warmup_ = 0;
    }
    if (!static_shape || graph_warmup_ < CudaGraphStep::kWarmupSteps) {
      submit_batch(batch);  // eager: a warm-up step, or a batch of another shape
      if (!graph_->captured()) ++graph_warmup_;
    } else {
      ops::copy_(graph_images_, batch.images.to(device, /*non_blocking=*/true));
      ops::copy_(graph_labels_, batch.labels.to(device, /*non_blocking=*/true));
      const bool capturing = !graph_->captured();
      if (capturing) {
        data::Batch inputs = batch;
        inputs.images = graph_images_;
        inputs.labels = graph_labels_;
        // The step's host side runs once here (it takes an id and counts an optimizer step);
        // its device work runs at each replay.
        graph_->capture([&] { submit_batch(inputs); });
        deferred_->take_last_as_template();
        --unflushed_;
      }
      graph_->replay();
      if (!capturing) sgd.count_replayed_step();
      ++graph_replays_;
      BatchResult meta;
      meta.id = next_id_++;
      meta.batch_index = batch.index;
      meta.samples = batch.images.size(0);
      deferred_->record_replay(meta);
      ++unflushed_;
    }
  }
  graph_->leave(caller);
#else
  (void)batch;
  ECH_FAIL("--cuda-graph: this build has no CUDA");
#endif
}

}  // namespace echelon::parallel
