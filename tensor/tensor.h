// Tensor: a shape, strides and an offset over shared, reference-counted Storage, plus the
// autograd fields (requires_grad, grad, grad_fn). Copying a Tensor copies the handle, not the
// data (like PyTorch). Views (reshape of contiguous data, slice, transpose, permute, expand) share
// storage; contiguous() materialises.
//
// Tensor itself is not differentiable: the raw kernels live in tensor/ops.h (namespace ops), and
// the differentiable functions that record the graph live in autograd/functions.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <echelon/tensor/device.h>
#include <echelon/tensor/dtype.h>
#include <echelon/tensor/shape.h>
#include <echelon/tensor/storage.h>

namespace echelon {

namespace autograd {
class Node;  // defined in autograd/node.h
}

class Tensor;
using TensorHook = std::function<Tensor(const Tensor&)>;

// Autograd bookkeeping attached to a tensor; empty for plain data tensors.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Tensor> grad;             // accumulated gradient (leaves, or retained)
  std::shared_ptr<autograd::Node> grad_fn;  // the node that produced this tensor
  bool retains_grad = false;
  std::vector<TensorHook> hooks;  // run on the gradient before it is used
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  std::unique_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (contiguous) ----
  static Tensor empty(const Shape& shape, DType dtype = kFloat32, Device device = Device::cpu(),
                      bool pinned = false);
  static Tensor zeros(const Shape& shape, DType dtype = kFloat32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = kFloat32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = kFloat32,
                     Device device = Device::cpu());
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = kFloat32, Device device = Device::cpu());

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t numel() const { return shape_numel(impl().shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_pinned() const { return impl().storage->pinned(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  std::string to_string(int64_t max_elements = 32) const;  // prints values (copies to host)
  std::string describe() const;                            // "float32[2, 3] on cuda:0"

  // Pointer to the first element (storage + offset). data<T>() checks T against dtype().
  void* raw_data() const;
  template <typename T>
  T* data() const;

  // ---- views (share storage; no autograd) ----
  Tensor view(const Shape& shape) const;     // contiguous only; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // view when possible, else copies
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;  // broadcast view: stride 0 on expanded dims

  // ---- copies ----
  Tensor contiguous() const;  // this if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy (same device)
  // Copy to another device. non_blocking: asynchronous on the current stream when the host side
  // is pinned; the caller synchronizes (stream or event) before reading.
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype) const;  // cast (same device)
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor pin_memory() const;      // copy into pinned host memory
  void copy_(const Tensor& src);  // in place; broadcasts src; casts; any devices

  template <typename T>
  T item() const;  // single-element tensor -> host value
  template <typename T>
  std::vector<T> to_vector() const;  // contiguous host copy of all elements

  // ---- autograd fields (the engine lives in autograd/) ----
  bool requires_grad() const { return impl_ && impl_->autograd && impl_->autograd->requires_grad; }
  Tensor& set_requires_grad(bool requires_grad);
  Tensor grad() const;  // undefined when none
  void set_grad(const Tensor& grad);
  void zero_grad();  // drops the gradient
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  AutogradMeta& autograd_meta();  // creates on first use
  bool is_leaf() const { return !grad_fn(); }
  Tensor detach() const;  // same storage, no autograd
  void retain_grad();
  void register_hook(TensorHook hook);

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// A view sharing `base`'s storage with new geometry.
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);

}  // namespace echelon
