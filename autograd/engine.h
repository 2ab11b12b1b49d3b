// The backward engine: runs the graph below `root` in reverse topological order, summing the
// gradients that meet at a node, running tensor hooks, and accumulating into the .grad of leaves
// that require grad (and of non-leaf tensors that called retain_grad()).
#pragma once

#include <functional>

#include <echelon/autograd/grad_mode.h>
#include <echelon/autograd/node.h>
#include <echelon/tensor/tensor.h>

namespace echelon {

// grad: d(loss)/d(root), same shape as root; may be omitted only for a one-element root (then 1).
// Without retain_graph the nodes' saved tensors are freed and a second backward through them
// throws. A pipeline stage calls backward(stage_output, grad_from_next_stage) and then reads
// stage_input.grad().
//
// on_leaf_ready, when given, is called once for every leaf reached by this backward, as soon as
// every gradient of this backward has been summed into its .grad (the last of its edges was run),
// while the rest of the graph still runs: data parallelism starts summing gradients over the
// replicas there (parallel/grad_buckets.h), as PyTorch DDP's post-accumulate-grad hooks do.
using LeafReadyFn = std::function<void(const TensorImpl& leaf)>;
void backward(const Tensor& root, const Tensor& grad = {}, bool retain_graph = false,
              const LeafReadyFn& on_leaf_ready = {});

namespace autograd {
// Whether grad is the 1 that backward seeds a one-element root on a GPU with (shared, never
// written, one per device and dtype): a node whose forward already computed its input's gradient
// for a unit output gradient may hand that on without a launch (cross_entropy).
bool is_unit_seed(const Tensor& grad);
}  // namespace autograd

}  // namespace echelon
