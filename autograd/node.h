// A node of the backward graph. Each differentiable function records one Node whose apply()
// maps the gradient of its output to the gradients of its inputs. Edges point to the nodes that
// produced the inputs (or, for leaves, to the leaf tensor itself, whose .grad receives the sum).
//
// Nodes keep *references* (Tensor handles) to what they saved, never copies: a parameter updated
// in place between forward and backward is read at its new value (stale weights, DESIGN.md).
// Deliberately there is no version counter to refuse that backward, as PyTorch's would: the
// pipeline's stale-weights schedule is exactly this read.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <echelon/tensor/tensor.h>

namespace echelon::autograd {

class Node;

// Where one input's gradient goes: the node that produced the input, or a leaf tensor.
struct Edge {
  std::shared_ptr<Node> node;        // set when the input was produced by a recorded op
  std::shared_ptr<TensorImpl> leaf;  // set when the input is a leaf that requires grad
  bool valid() const { return node != nullptr || leaf != nullptr; }
};

// The flashlight-style gradient: a lambda written right beside the forward, which captures what
// it needs. grad_out is the gradient of the op's output; the lambda returns one gradient per
// input (undefined Tensor where `needs[i]` is false or the input has no gradient).
using BackwardFn =
    std::function<std::vector<Tensor>(const Tensor& grad_out, const std::vector<bool>& needs)>;
// A backward that may add an input's gradient into sums[i] where that is defined: the sum of
// the gradients the input has received so far, which nothing else holds (contiguous, the input's
// shape and dtype). It then returns sums[i] itself as that gradient, and the engine skips its own
// add (a pass that reads two tensors and writes one). A ResNet block's input gets the shortcut's
// gradient first; the convolution's backward-data then adds into it as it stores.
using AddingBackwardFn = std::function<std::vector<Tensor>(
    const Tensor& grad_out, const std::vector<bool>& needs, const std::vector<Tensor>& sums)>;

// One recorded op. Every differentiable function has a single output, so a node has one.
class Node {
 public:
  Node(std::string name, BackwardFn backward, std::vector<Edge> edges, const Tensor& output)
      : name_(std::move(name)),
        backward_(std::move(backward)),
        edges_(std::move(edges)),
        output_(output.impl_ptr()) {}
  Node(std::string name, AddingBackwardFn backward, std::vector<Edge> edges, const Tensor& output)
      : name_(std::move(name)),
        adding_backward_(std::move(backward)),
        edges_(std::move(edges)),
        output_(output.impl_ptr()) {}
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // One gradient per input edge (undefined where the input needs none) from the gradient of the
  // output. sums: empty, or one per edge (see AddingBackwardFn; ignored unless adds_into_sums()).
  std::vector<Tensor> apply(const Tensor& grad_out, const std::vector<Tensor>& sums = {});
  // Whether apply may add into the sums it is given.
  bool adds_into_sums() const { return adding_backward_ != nullptr; }
  // Drops saved tensors (after a backward without retain_graph). apply() then throws.
  void release() {
    backward_ = nullptr;
    adding_backward_ = nullptr;
  }

  const std::string& name() const { return name_; }
  const std::vector<Edge>& next_edges() const { return edges_; }
  bool needs_input_grad(size_t i) const { return i < edges_.size() && edges_[i].valid(); }
  // The tensor this node produced, weakly held (null once freed): the engine runs its hooks and
  // retain_grad.
  std::shared_ptr<TensorImpl> output() const { return output_.lock(); }

 private:
  std::string name_;
  BackwardFn backward_;  // one of the two is set (until release)
  AddingBackwardFn adding_backward_;
  std::vector<Edge> edges_;
  std::weak_ptr<TensorImpl> output_;
};

// The edge a gradient for `input` should follow (invalid when it needs no gradient).
Edge edge_for(const Tensor& input);

// Attaches `output` to a new Node when grad mode is on and some input requires grad;
// otherwise returns `output` unchanged. `name` names the op in error messages.
Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs,
              BackwardFn backward);
// record for a backward that may add into the inputs' gradient sums.
Tensor record_adding(const char* name, Tensor output, const std::vector<Tensor>& inputs,
                     AddingBackwardFn backward);

}  // namespace echelon::autograd
