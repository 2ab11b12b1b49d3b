#include <echelon/autograd/node.h>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>

namespace echelon::autograd {

std::vector<Tensor> Node::apply(const Tensor& grad_out, const std::vector<Tensor>& sums) {
  ECH_CHECK(backward_ || adding_backward_, "backward through ", name(),
            " a second time: its saved tensors were freed; pass retain_graph=true to the first "
            "backward");
  ECH_CHECK(sums.empty() || sums.size() == edges_.size(), name(), ": ", sums.size(),
            " gradient sums for ", edges_.size(), " inputs");
  std::vector<bool> needs(edges_.size());
  for (size_t i = 0; i < needs.size(); ++i) needs[i] = needs_input_grad(i);
  std::vector<Tensor> grads;
  if (adding_backward_)
    grads =
        adding_backward_(grad_out, needs, sums.empty() ? std::vector<Tensor>(edges_.size()) : sums);
  else
    grads = backward_(grad_out, needs);
  ECH_CHECK(grads.size() == needs.size(), name(), ": backward returned ", grads.size(),
            " gradients for ", needs.size(), " inputs");
  return grads;
}

Edge edge_for(const Tensor& input) {
  Edge edge;
  if (!input.defined() || !input.requires_grad()) return edge;
  if (input.grad_fn())
    edge.node = input.grad_fn();
  else
    edge.leaf = input.impl_ptr();
  return edge;
}

namespace {

template <typename Fn>
Tensor record_node(const char* name, Tensor output, const std::vector<Tensor>& inputs,
                   Fn backward) {
  if (!grad_enabled()) return output;
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  bool any = false;
  for (const Tensor& input : inputs) {
    edges.push_back(edge_for(input));
    any = any || edges.back().valid();
  }
  if (!any) return output;
  // An op may hand back one of its inputs' handles (a no-op reshape): give the output its own
  // TensorImpl so that recording never rewrites the input's history.
  if (output.impl().autograd) {
    output = make_view(output, output.shape(), output.strides(), output.offset());
  }
  AutogradMeta& meta = output.autograd_meta();
  meta.requires_grad = true;
  meta.grad_fn = std::make_shared<Node>(name, std::move(backward), std::move(edges), output);
  return output;
}

}  // namespace

Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs,
              BackwardFn backward) {
  return record_node(name, std::move(output), inputs, std::move(backward));
}

Tensor record_adding(const char* name, Tensor output, const std::vector<Tensor>& inputs,
                     AddingBackwardFn backward) {
  return record_node(name, std::move(output), inputs, std::move(backward));
}

}  // namespace echelon::autograd
