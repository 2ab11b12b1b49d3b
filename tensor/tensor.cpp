#include <echelon/tensor/tensor.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>

#include <echelon/tensor/ops.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/allocator.h>
#include <echelon/cuda/check.h>
#include <echelon/cuda/stream.h>
#endif

namespace echelon {

// ---- factories ---------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, bool pinned) {
  for (int64_t s : shape) ECH_CHECK(s >= 0, "Tensor::empty: negative size in shape ", shape);
  ECH_CHECK(!(pinned && device.is_cuda()),
            "Tensor::empty: pinned memory is host memory, but device is ", device.to_string());
  auto impl = std::make_shared<TensorImpl>();
  const int64_t numel = shape_numel(shape);
  ECH_CHECK(numel <= std::numeric_limits<int64_t>::max() / static_cast<int64_t>(dtype_size(dtype)),
            "Tensor::empty: shape ", shape, " of ", dtype_name(dtype),
            " needs more bytes than int64 can count");
  const size_t nbytes = static_cast<size_t>(numel) * dtype_size(dtype);
  impl->storage = std::make_shared<Storage>(nbytes, allocator_for(device, pinned), pinned);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  ops::fill_(t, value);
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  ECH_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
            "Tensor::from_vector: ", values.size(), " values do not fill shape ", shape, " (",
            shape_numel(shape), " elements)");
  Tensor host = empty(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  return device.is_cpu() ? host : host.to(device);
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

// ---- metadata ----------------------------------------------------------------------------------

TensorImpl& Tensor::impl() const {
  ECH_CHECK(impl_ != nullptr, "operation on an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const {
  ECH_CHECK(dim() > 0, "Tensor::size: a scalar has no dims");
  return impl().shape[wrap_dim(d, dim(), "Tensor::size")];
}

int64_t Tensor::stride(int64_t d) const {
  ECH_CHECK(dim() > 0, "Tensor::stride: a scalar has no dims");
  return impl().strides[wrap_dim(d, dim(), "Tensor::stride")];
}

bool Tensor::is_contiguous() const {
  const Shape& shape = impl().shape;
  const Strides& strides = impl().strides;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;  // the stride of a size-1 dim never matters
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return str(dtype_name(dtype()), shape(), " on ", device().to_string());
}

std::string Tensor::to_string(int64_t max_elements) const {
  if (!defined()) return "undefined tensor";
  std::ostringstream out;
  out << describe() << " {";
  const Tensor host = to(Device::cpu()).to(kFloat64).contiguous();
  const double* values = host.data<double>();
  const int64_t shown = std::min(numel(), max_elements);
  for (int64_t i = 0; i < shown; ++i) out << (i ? ", " : "") << values[i];
  if (shown < numel()) out << ", ...";
  out << "}";
  return out.str();
}

void* Tensor::raw_data() const {
  auto* base = static_cast<char*>(impl().storage->data());
  if (!base) return nullptr;
  return base + impl().offset * static_cast<int64_t>(dtype_size(dtype()));
}

template <typename T>
T* Tensor::data() const {
  ECH_CHECK(dtype() == dtype_of<T>(), "Tensor::data<", dtype_name(dtype_of<T>()), ">: tensor is ",
            describe());
  return static_cast<T*>(raw_data());
}

// ---- views -------------------------------------------------------------------------------------

Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

namespace {
// Resolves one -1 in a requested shape against numel; throws naming the op and both shapes.
Shape infer_shape(const Shape& requested, int64_t numel, const Shape& from, const char* op) {
  Shape shape = requested;
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      ECH_CHECK(infer_at < 0, op, ": only one dim may be -1, got ", requested);
      infer_at = static_cast<int>(i);
    } else {
      ECH_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in shape ", requested);
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    ECH_CHECK(known != 0 && numel % known == 0, op, ": shape ", requested,
              " is invalid for a tensor of shape ", from, " (", numel, " elements)");
    shape[infer_at] = numel / known;
  }
  ECH_CHECK(shape_numel(shape) == numel, op, ": shape ", requested,
            " is invalid for a tensor of shape ", from, " (", numel, " elements)");
  return shape;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  ECH_CHECK(is_contiguous(), "Tensor::view: tensor of shape ", this->shape(), " with strides ",
            strides(), " is not contiguous; use reshape()");
  Shape resolved = infer_shape(shape, numel(), this->shape(), "Tensor::view");
  Strides strides = contiguous_strides(resolved);
  return make_view(*this, std::move(resolved), std::move(strides), offset());
}

Tensor Tensor::reshape(const Shape& shape) const {
  return is_contiguous() ? view(shape) : contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t start = wrap_dim(start_dim, dim(), "Tensor::flatten");
  const int64_t end = wrap_dim(end_dim, dim(), "Tensor::flatten");
  ECH_CHECK(start <= end, "Tensor::flatten: start_dim ", start_dim, " comes after end_dim ",
            end_dim, " for shape ", shape());
  Shape out(shape().begin(), shape().begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= shape()[d];
  out.push_back(merged);
  out.insert(out.end(), shape().begin() + end + 1, shape().end());
  return reshape(out);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  ECH_CHECK(dim() > 0, "Tensor::slice: cannot slice a scalar");
  d = wrap_dim(d, dim(), "Tensor::slice");
  ECH_CHECK(step > 0, "Tensor::slice: step must be positive, got ", step);
  const int64_t size = shape()[d];
  // Python-style clamping: negative bounds count from the end, out-of-range bounds clip.
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Shape new_shape = shape();
  Strides new_strides = strides();
  new_shape[d] = (end - start + step - 1) / step;
  new_strides[d] *= step;
  return make_view(*this, new_shape, new_strides, offset() + start * strides()[d]);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  ECH_CHECK(dim() > 0, "Tensor::select: cannot select from a scalar");
  d = wrap_dim(d, dim(), "Tensor::select");
  const int64_t size = shape()[d];
  ECH_CHECK(index >= -size && index < size, "Tensor::select: index ", index,
            " is out of range for dim ", d, " of size ", size, " (shape ", shape(), ")");
  if (index < 0) index += size;
  Shape new_shape = shape();
  Strides new_strides = strides();
  new_shape.erase(new_shape.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  return make_view(*this, new_shape, new_strides, offset() + index * strides()[d]);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  ECH_CHECK(dim() > 0, "Tensor::narrow: cannot narrow a scalar");
  d = wrap_dim(d, dim(), "Tensor::narrow");
  const int64_t size = shape()[d];
  ECH_CHECK(start >= 0 && length >= 0 && start + length <= size, "Tensor::narrow: [", start, ", ",
            start + length, ") is out of range for dim ", d, " of size ", size, " (shape ", shape(),
            ")");
  return slice(d, start, start + length);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  if (dim() == 0) return *this;
  dim0 = wrap_dim(dim0, dim(), "Tensor::transpose");
  dim1 = wrap_dim(dim1, dim(), "Tensor::transpose");
  Shape new_shape = shape();
  Strides new_strides = strides();
  std::swap(new_shape[dim0], new_shape[dim1]);
  std::swap(new_strides[dim0], new_strides[dim1]);
  return make_view(*this, new_shape, new_strides, offset());
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  ECH_CHECK(static_cast<int64_t>(dims.size()) == dim(), "Tensor::permute: ", dims.size(),
            " dims given for a tensor of shape ", shape());
  std::vector<bool> seen(dims.size(), false);
  Shape new_shape(dims.size());
  Strides new_strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "Tensor::permute");
    ECH_CHECK(!seen[d], "Tensor::permute: dim ", d, " repeated in ", dims);
    seen[d] = true;
    new_shape[i] = shape()[d];
    new_strides[i] = strides()[d];
  }
  return make_view(*this, new_shape, new_strides, offset());
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "Tensor::unsqueeze");
  Shape new_shape = shape();
  Strides new_strides = strides();
  const int64_t stride = d < dim() ? strides()[d] * shape()[d] : 1;
  new_shape.insert(new_shape.begin() + d, 1);
  new_strides.insert(new_strides.begin() + d, stride);
  return make_view(*this, new_shape, new_strides, offset());
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "Tensor::squeeze");
  if (shape()[d] != 1) return *this;  // as PyTorch: squeezing a non-1 dim is a no-op
  Shape new_shape = shape();
  Strides new_strides = strides();
  new_shape.erase(new_shape.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  return make_view(*this, new_shape, new_strides, offset());
}

Tensor Tensor::expand(const Shape& target) const {
  ECH_CHECK(target.size() >= shape().size(), "Tensor::expand: cannot expand shape ", shape(),
            " to fewer dims ", target);
  const size_t lead = target.size() - shape().size();
  Shape new_shape(target.size());
  Strides new_strides(target.size(), 0);
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      ECH_CHECK(target[i] >= 0, "Tensor::expand: size -1 not allowed in new leading dim ", i,
                " of ", target);
      new_shape[i] = target[i];
      continue;
    }
    const int64_t have = shape()[i - lead];
    const int64_t want = target[i] == -1 ? have : target[i];
    ECH_CHECK(want == have || have == 1, "Tensor::expand: cannot expand shape ", shape(), " to ",
              target, " (dim ", i, ": ", have, " vs ", want, ")");
    new_shape[i] = want;
    new_strides[i] = (want == have) ? strides()[i - lead] : 0;
  }
  return make_view(*this, new_shape, new_strides, offset());
}

// ---- copies ------------------------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  ops::copy_(out, *this);
  return out;
}

Tensor Tensor::to(Device target, bool non_blocking) const {
  if (target == device()) return *this;
#if ECHELON_WITH_CUDA
  const Tensor src = contiguous();
  // Device->host copies land in pinned memory when asked to be asynchronous.
  const bool pin_dst = target.is_cpu() && non_blocking;
  Tensor dst = empty(shape(), dtype(), target, pin_dst);
  if (nbytes() == 0) return dst;
  const int stream_device = target.is_cuda() ? target.index : device().index;
  cuda::DeviceGuard guard(stream_device);
  cudaStream_t stream = cuda::current_stream(stream_device);
  if (device().is_cuda() && target.is_cuda()) {
    // The source was written on its own device's current stream, which `stream` (on the target
    // device) is not ordered after: wait for it (cross-device waits are allowed).
    {
      cuda::DeviceGuard source_guard(device().index);
      cuda::Event produced;
      produced.record(cuda::current_stream(device().index));
      produced.wait(stream);
    }
    ECH_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data(), target.index, src.raw_data(), device().index,
                                       nbytes(), stream));
  } else {
    ECH_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), nbytes(), cudaMemcpyDefault, stream));
  }
  const bool host_pinned = target.is_cpu() ? dst.is_pinned() : src.is_pinned();
  if (non_blocking && host_pinned) {
    // The copy is still running when this returns: the pinned block must not be reused (after its
    // tensor dies) before the copy is done, whichever thread frees it.
    cuda::pinned_record_stream((target.is_cpu() ? dst : src).storage()->data(), stream);
  } else {
    ECH_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return dst;
#else
  ECH_FAIL("Tensor::to(", target.to_string(), "): Echelon was built without CUDA (tensor ",
           describe(), ")");
#endif
}

Tensor Tensor::to(DType target) const {
  return dtype() == target ? *this : ops::cast(*this, target);
}

Tensor Tensor::pin_memory() const {
  ECH_CHECK(device().is_cpu(), "Tensor::pin_memory: tensor is already on ", device().to_string());
  Tensor out = empty(shape(), dtype(), Device::cpu(), /*pinned=*/true);
  ops::copy_(out, *this);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  ops::copy_(*this, src);
}

template <typename T>
T Tensor::item() const {
  ECH_CHECK(numel() == 1, "Tensor::item: tensor ", describe(), " has ", numel(),
            " elements, expected 1");
  const Tensor host = to(Device::cpu()).to(dtype_of<T>()).contiguous();
  return *host.data<T>();
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const Tensor host = to(Device::cpu()).to(dtype_of<T>()).contiguous();
  const T* values = host.data<T>();
  return std::vector<T>(values, values + host.numel());
}

// ---- autograd fields ---------------------------------------------------------------------------

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  ECH_CHECK(!requires_grad || is_floating(dtype()),
            "set_requires_grad: only floating-point tensors can require gradients, got ",
            describe());
  if (!requires_grad && !impl().autograd) return *this;
  autograd_meta().requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  if (!impl().autograd || !impl().autograd->grad) return Tensor();
  return *impl().autograd->grad;
}

void Tensor::set_grad(const Tensor& grad) {
  if (!grad.defined()) {
    zero_grad();
    return;
  }
  ECH_CHECK(grad.shape() == shape(), "set_grad: gradient shape ", grad.shape(),
            " differs from tensor shape ", shape());
  autograd_meta().grad = std::make_shared<Tensor>(grad);
}

void Tensor::zero_grad() {
  if (impl().autograd) impl().autograd->grad.reset();
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  if (!impl_ || !impl_->autograd) return none;
  return impl_->autograd->grad_fn;
}

AutogradMeta& Tensor::autograd_meta() {
  if (!impl().autograd) impl().autograd = std::make_unique<AutogradMeta>();
  return *impl().autograd;
}

Tensor Tensor::detach() const {
  return make_view(*this, shape(), strides(), offset());
}

void Tensor::retain_grad() {
  autograd_meta().retains_grad = true;
}

void Tensor::register_hook(TensorHook hook) {
  autograd_meta().hooks.push_back(std::move(hook));
}

// ---- explicit instantiations -------------------------------------------------------------------

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_TENSOR_TEMPLATES(T)                                            \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&, Device); \
  template T* Tensor::data<T>() const;                                                 \
  template T Tensor::item<T>() const;                                                  \
  template std::vector<T> Tensor::to_vector<T>() const;
ECH_INSTANTIATE_TENSOR_TEMPLATES(float)
ECH_INSTANTIATE_TENSOR_TEMPLATES(double)
ECH_INSTANTIATE_TENSOR_TEMPLATES(int32_t)
ECH_INSTANTIATE_TENSOR_TEMPLATES(int64_t)
ECH_INSTANTIATE_TENSOR_TEMPLATES(uint8_t)
ECH_INSTANTIATE_TENSOR_TEMPLATES(bfloat16)
#undef ECH_INSTANTIATE_TENSOR_TEMPLATES
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon
