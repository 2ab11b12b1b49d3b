// A node of the backward graph. Each differentiable function records one Node whose apply()
// maps the gradients of its outputs to the gradients of its inputs. Edges point to the nodes that
// produced the inputs (or, for leaves, to the leaf tensor itself, whose .grad receives the sum).
//
// Nodes keep *references* (Tensor handles) to what they saved, never copies: a parameter updated
// in place between forward and backward is read at its new value (stale weights, DESIGN.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <echelon/tensor/tensor.h>

namespace echelon::autograd {

class Node;

// Where one input's gradient goes: the producer node's output `output_nr`, or a leaf tensor.
struct Edge {
  std::shared_ptr<Node> node;  // set when the input was produced by a recorded op
  uint32_t output_nr = 0;
  std::shared_ptr<TensorImpl> leaf;  // set when the input is a leaf that requires grad
  bool valid() const { return node != nullptr || leaf != nullptr; }
};

class Node {
 public:
  explicit Node(std::string name) : name_(std::move(name)) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grad_outputs[i] is the gradient of output i (undefined when no gradient reached it);
  // returns one gradient per input edge (undefined where the input needs none).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  // Drops saved tensors (after a backward without retain_graph). apply() then throws.
  virtual void release() = 0;
  virtual bool released() const = 0;

  const std::string& name() const { return name_; }
  const std::vector<Edge>& next_edges() const { return edges_; }
  void set_next_edges(std::vector<Edge> edges) { edges_ = std::move(edges); }
  bool needs_input_grad(size_t i) const { return i < edges_.size() && edges_[i].valid(); }
  // The tensors this node produced, weakly held: the engine runs their hooks / retain_grad.
  const std::vector<std::weak_ptr<TensorImpl>>& outputs() const { return outputs_; }
  void add_output(const Tensor& output) { outputs_.push_back(output.impl_ptr()); }
  size_t num_outputs() const { return outputs_.size(); }

 private:
  std::string name_;
  std::vector<Edge> edges_;
  std::vector<std::weak_ptr<TensorImpl>> outputs_;
};

// The flashlight-style node: the gradient is a lambda written right beside the forward, which
// captures what it needs. grad_out is the gradient of the single output; the lambda returns one
// gradient per input (undefined Tensor where `needs[i]` is false or the input has no gradient).
using BackwardFn =
    std::function<std::vector<Tensor>(const Tensor& grad_out, const std::vector<bool>& needs)>;

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn backward)
      : Node(std::move(name)), backward_(std::move(backward)) {}
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override;
  void release() override { backward_ = nullptr; }
  bool released() const override { return !backward_; }

 private:
  BackwardFn backward_;
};

// The edge a gradient for `input` should follow (invalid when it needs no gradient).
Edge edge_for(const Tensor& input);

// Attaches `output` to a new FunctionNode when grad mode is on and some input requires grad;
// otherwise returns `output` unchanged. `name` names the op in error messages.
Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs,
              BackwardFn backward);

}  // namespace echelon::autograd
