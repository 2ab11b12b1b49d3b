#include <echelon/autograd/engine.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>
#if ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon {

namespace {

using autograd::Edge;
using autograd::Node;

Tensor run_hooks(const AutogradMeta& meta, Tensor grad) {
  for (const TensorHook& hook : meta.hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = replaced;
  }
  return grad;
}

void check_grad_matches(const Tensor& grad, const Shape& shape, const std::string& where) {
  ECH_CHECK(grad.shape() == shape, "backward: ", where, " produced a gradient of shape ",
            grad.shape(), " for a tensor of shape ", shape);
}

// True when nothing but `grad` itself can see its memory: its Tensor object, impl and storage
// each referenced once, and it spans its whole storage (no view keeps a larger block alive).
bool owned_alone(const Tensor& grad) {
  return grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1 &&
         grad.is_contiguous() && grad.offset() == 0 && !grad.requires_grad() &&
         grad.storage()->nbytes() == grad.nbytes();
}

// Sums into the tensor's .grad. The first gradient becomes .grad as it is when nothing else holds
// it (a parameter's gradient, fresh from its node: one copy kernel less per parameter and step);
// otherwise it is cloned, since it may alias a tensor the caller still holds (e.g. the grad passed
// to backward flows unchanged through add) and later accumulation writes in place.
void accumulate_into(TensorImpl& impl, Tensor grad) {
  AutogradMeta& meta = *impl.autograd;
  if (meta.grad && meta.grad->defined()) {
    Tensor& existing = *meta.grad;
    if (existing.dtype() == grad.dtype() && existing.device() == grad.device() &&
        existing.is_contiguous()) {
      ops::axpy_(existing, grad.contiguous(), 1.0);
    } else {
      existing = ops::add(existing, grad);
    }
  } else {
    meta.grad = std::make_shared<Tensor>(owned_alone(grad) ? std::move(grad) : grad.clone());
  }
}

// True when `sum` may be added to in place: nothing else holds it (its Tensor object, its impl
// and its storage each referenced once: no view, copy or saved tensor sees the write), and it is
// a dense block. A node's gradient often is shared (add passes its gradient to both inputs, views
// alias it), so this is checked each time.
bool addable_in_place(const Tensor& sum) {
  return sum.impl_ptr().use_count() == 1 && sum.storage().use_count() == 1 && sum.is_contiguous() &&
         !sum.requires_grad() &&
         (sum.dtype() == kFloat32 ||
          (sum.dtype() == kFloat64 && !sum.is_cuda()));  // as axpy_ takes
}

// True when `sum` may take `g` in place: addable, not g's storage, and of g's shape, dtype and
// device.
bool owned_here(const Tensor& sum, const Tensor& g) {
  return addable_in_place(sum) && sum.storage() != g.storage() && sum.shape() == g.shape() &&
         sum.dtype() == g.dtype() && sum.device() == g.device();
}

// For a node that adds into its inputs' gradient sums: per edge, the pending sum of the input's
// producer, moved out of `pending` (so that it is held once), where it may be added to in place;
// undefined elsewhere. The caller puts every taken sum back.
std::vector<Tensor> take_sums(const Node& node, std::unordered_map<Node*, Tensor>& pending) {
  const std::vector<Edge>& edges = node.next_edges();
  std::vector<Tensor> sums(edges.size());
  for (size_t i = 0; i < edges.size(); ++i) {
    if (!edges[i].node) continue;
    auto it = pending.find(edges[i].node.get());
    if (it == pending.end() || !it->second.defined() || !addable_in_place(it->second)) continue;
    sums[i] = std::move(it->second);
    it->second = Tensor();
  }
  return sums;
}

void deliver_to_leaf(const std::shared_ptr<TensorImpl>& leaf, Tensor grad, const Node* from) {
  check_grad_matches(grad, leaf->shape, from ? from->name() : std::string("root"));
  grad = run_hooks(*leaf->autograd, grad);
  accumulate_into(*leaf, std::move(grad));
}

// Counts, for each node reachable from root, how many edges point at it; with `leaf_edges`, also
// for each leaf.
std::unordered_map<Node*, int> count_dependencies(
    Node* root, std::unordered_map<const TensorImpl*, int>* leaf_edges) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root};
  deps[root] = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (edge.leaf && leaf_edges) ++(*leaf_edges)[edge.leaf.get()];
      if (!edge.node) continue;
      auto [it, inserted] = deps.emplace(edge.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(edge.node.get());
    }
  }
  return deps;
}

// The shared seeds of unit_seed, by (device, dtype).
struct UnitSeeds {
  std::mutex mutex;
  std::map<std::pair<int, DType>, Tensor> by_device;
};

UnitSeeds& unit_seeds() {
  // Never destroyed: freeing device memory during exit could outlive the CUDA runtime.
  static auto* seeds = new UnitSeeds;
  return *seeds;
}

// The seed of a scalar root's backward. On a GPU, one shared 1 per (device, dtype), filled once,
// so that a training step's backward launches no fill kernel. It stays 1: the engine writes in
// place only into tensors nothing else holds (addable_in_place, owned_alone) and a node's function
// never writes its incoming gradient. A root with hooks gets its own (a hook might write it).
Tensor unit_seed(const Tensor& root) {
  const bool hooked = root.impl().autograd && !root.impl().autograd->hooks.empty();
  if (!root.is_cuda() || hooked) return Tensor::ones(root.shape(), root.dtype(), root.device());
#if ECHELON_WITH_CUDA
  const Device device = root.device();
  const cudaStream_t stream = cuda::current_stream(device.index);
  UnitSeeds& shared = unit_seeds();
  std::lock_guard lock(shared.mutex);
  auto* const seeds = &shared.by_device;
  const auto it = seeds->find({device.index, root.dtype()});
  if (it != seeds->end()) return it->second.reshape(root.shape());
  Tensor seed = Tensor::ones({}, root.dtype(), device);
  // Filled on this stream; every stream may read it later, so wait for the fill, once. Not
  // while capturing: filled only inside a graph, it would hold garbage for an eager step.
  if (cuda::stream_capturing(stream)) return seed.reshape(root.shape());
  ECH_CUDA_CHECK(cudaStreamSynchronize(stream));
  return seeds->emplace(std::pair{device.index, root.dtype()}, seed)
      .first->second.reshape(root.shape());
#else
  return Tensor::ones(root.shape(), root.dtype(), root.device());
#endif
}

}  // namespace

namespace autograd {

bool is_unit_seed(const Tensor& grad) {
  if (!grad.defined() || !grad.is_cuda() || grad.numel() != 1) return false;
  UnitSeeds& shared = unit_seeds();
  std::lock_guard lock(shared.mutex);
  const auto it = shared.by_device.find({grad.device().index, grad.dtype()});
  return it != shared.by_device.end() && it->second.raw_data() == grad.raw_data();
}

}  // namespace autograd

void backward(const Tensor& root, const Tensor& grad, bool retain_graph,
              const LeafReadyFn& on_leaf_ready) {
  ECH_CHECK(root.defined(), "backward: the root tensor is undefined");
  ECH_CHECK(root.requires_grad(), "backward: ", root.describe(),
            " does not require grad (no input required grad, or it was made under NoGradGuard)");
  Tensor root_grad = grad;
  if (!root_grad.defined()) {
    ECH_CHECK(root.numel() == 1, "backward: a gradient must be given for non-scalar root ",
              root.describe());
    root_grad = unit_seed(root);
  }
  check_grad_matches(root_grad, root.shape(), "the gradient passed to backward");
  // Backward never records: gradients are plain tensors.
  NoGradGuard no_grad;

  const std::shared_ptr<Node>& root_node = root.grad_fn();
  if (!root_node) {
    deliver_to_leaf(root.impl_ptr(), root_grad, nullptr);
    if (on_leaf_ready) on_leaf_ready(root.impl());
    return;
  }
  std::unordered_map<const TensorImpl*, int> leaf_edges;  // edges not yet run, per leaf
  std::unordered_map<Node*, int> deps =
      count_dependencies(root_node.get(), on_leaf_ready ? &leaf_edges : nullptr);
  std::unordered_map<Node*, Tensor> pending;  // summed output gradient per node
  pending[root_node.get()] = root_grad;

  // Keep shared ownership of nodes in flight: releasing a tensor must not free a ready node.
  std::vector<std::shared_ptr<Node>> ready{root_node};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.back();
    ready.pop_back();
    Tensor grad = std::move(pending[node.get()]);
    pending.erase(node.get());
    // Hooks and retain_grad of the tensor this node produced see the fully summed gradient.
    const std::shared_ptr<TensorImpl> out = node->output();
    if (out && out->autograd && grad.defined()) {
      check_grad_matches(grad, out->shape, "the consumers of " + node->name());
      grad = run_hooks(*out->autograd, grad);
      if (out->autograd->retains_grad) accumulate_into(*out, grad);
    }
    std::vector<Tensor> sums;
    if (grad.defined() && node->adds_into_sums()) sums = take_sums(*node, pending);
    // No gradient reached this node (its output fed only non-differentiable paths).
    std::vector<Tensor> input_grads =
        grad.defined() ? node->apply(grad, sums) : std::vector<Tensor>(node->next_edges().size());
    if (!retain_graph) node->release();

    const std::vector<Edge>& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      Tensor& g = input_grads[i];
      if (edge.leaf) {
        // Moved: a gradient held only here may then become the leaf's .grad without a copy.
        if (g.defined()) deliver_to_leaf(edge.leaf, std::move(g), node.get());
        if (on_leaf_ready && --leaf_edges[edge.leaf.get()] == 0) on_leaf_ready(*edge.leaf);
        continue;
      }
      if (!edge.node) continue;
      bool added = false;  // g is the taken sum, with this gradient added in
      if (i < sums.size() && sums[i].defined()) {
        added = g.defined() && g.impl_ptr() == sums[i].impl_ptr();
        pending[edge.node.get()] = std::move(sums[i]);
      }
      if (g.defined() && !added) {
        Tensor& sum = pending[edge.node.get()];
        if (!sum.defined())
          sum = g;
        else if (owned_here(sum, g))
          ops::axpy_(sum, g, 1.0);  // sum + 1 * g: the same values as add, no new tensor
        else
          sum = ops::add(sum, g);
      }
      if (--deps[edge.node.get()] == 0) ready.push_back(edge.node);
    }
  }
}

}  // namespace echelon
