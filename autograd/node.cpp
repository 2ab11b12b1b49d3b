#include <echelon/autograd/node.h>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>

namespace echelon::autograd {

std::vector<Tensor> FunctionNode::apply(const std::vector<Tensor>& grad_outputs) {
  ECH_CHECK(backward_, "backward through ", name(),
            " a second time: its saved tensors were freed; pass retain_graph=true to the first "
            "backward");
  ECH_CHECK(grad_outputs.size() == 1, name(), ": expected 1 output gradient, got ",
            grad_outputs.size());
  std::vector<bool> needs(next_edges().size());
  for (size_t i = 0; i < needs.size(); ++i) needs[i] = needs_input_grad(i);
  std::vector<Tensor> grads = backward_(grad_outputs[0], needs);
  ECH_CHECK(grads.size() == needs.size(), name(), ": backward returned ", grads.size(),
            " gradients for ", needs.size(), " inputs");
  return grads;
}

Edge edge_for(const Tensor& input) {
  Edge edge;
  if (!input.defined() || !input.requires_grad()) return edge;
  if (input.grad_fn()) {
    edge.node = input.grad_fn();
    edge.output_nr = input.impl().autograd->output_nr;
  } else {
    edge.leaf = input.impl_ptr();
  }
  return edge;
}

Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs,
              BackwardFn backward) {
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
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->set_next_edges(std::move(edges));
  AutogradMeta& meta = output.autograd_meta();
  meta.requires_grad = true;
  meta.grad_fn = node;
  meta.output_nr = 0;
  node->add_output(output);
  return output;
}

}  // namespace echelon::autograd
