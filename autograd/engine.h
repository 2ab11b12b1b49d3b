// The backward engine: runs the graph below `root` in reverse topological order, summing the
// gradients that meet at a node, running tensor hooks, and accumulating into the .grad of leaves
// that require grad (and of non-leaf tensors that called retain_grad()).
#pragma once

#include <echelon/autograd/grad_mode.h>
#include <echelon/autograd/node.h>
#include <echelon/tensor/tensor.h>

namespace echelon {

// grad: d(loss)/d(root), same shape as root; may be omitted only for a one-element root (then 1).
// Without retain_graph the nodes' saved tensors are freed and a second backward through them
// throws. A pipeline stage calls backward(stage_output, grad_from_next_stage) and then reads
// stage_input.grad().
void backward(const Tensor& root, const Tensor& grad = {}, bool retain_graph = false);

}  // namespace echelon
