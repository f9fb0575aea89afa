#include "runtime/tensor.h"

#include <sstream>

#include "runtime/backend.h"
#include "util/check.h"

namespace vllm {

std::string Device::str() const {
  return kind == DeviceKind::Cpu ? "cpu" : "cuda:" + std::to_string(index);
}

void Tensor::set_contiguous_strides() {
  if (ndim_ == 0) return;
  // Innermost stride: the element size for plain types; for block types, the block size in
  // bytes (only whole rows of those are addressed).
  strides_[ndim_ - 1] = dtype_info(dtype_).block_bytes;
  int64_t s = row_bytes(dtype_, shape_[ndim_ - 1]);
  for (int d = ndim_ - 2; d >= 0; --d) {
    strides_[d] = s;
    s *= shape_[d];
  }
}

Tensor Tensor::from_blob(void* data, std::span<const int64_t> shape, DType dtype,
                         std::shared_ptr<void> owner, Device device) {
  VLLM_CHECK(!shape.empty() && shape.size() <= kMaxDims, "tensor rank ", shape.size());
  Tensor t;
  t.dtype_ = dtype;
  t.ndim_ = static_cast<int>(shape.size());
  for (int d = 0; d < t.ndim_; ++d) {
    VLLM_CHECK(shape[d] >= 0, "negative dimension");
    t.shape_[d] = shape[d];
  }
  t.set_contiguous_strides();
  t.storage_ = std::make_shared<Storage>(
      Storage{data, static_cast<size_t>(t.nbytes()), device, std::move(owner)});
  return t;
}

Tensor Tensor::empty(std::span<const int64_t> shape, DType dtype, Device device) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const int64_t inner = shape.empty() ? 1 : shape.back();
  const int64_t bytes = n == 0 ? 0 : row_bytes(dtype, inner) * (n / inner);
  Backend& be = backend_for(device);
  void* p = be.alloc(static_cast<size_t>(bytes > 0 ? bytes : 1));
  std::shared_ptr<void> owner(p, [&be](void* q) { be.free(q); });
  return from_blob(p, shape, dtype, std::move(owner), device);
}

Tensor Tensor::zeros(std::initializer_list<int64_t> shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  VLLM_CHECK(device.kind == DeviceKind::Cpu, "zeros on ", device.str());
  std::memset(t.raw(), 0, static_cast<size_t>(t.nbytes()));
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[d];
  return n;
}

int64_t Tensor::nbytes() const {
  if (ndim_ == 0) return 0;
  return row_bytes(dtype_, shape_[ndim_ - 1]) * (numel() / std::max<int64_t>(shape_[ndim_ - 1], 1));
}

bool Tensor::is_contiguous() const {
  Tensor c = *this;
  c.set_contiguous_strides();
  for (int d = 0; d < ndim_; ++d)
    if (shape_[d] != 1 && c.strides_[d] != strides_[d]) return false;
  return true;
}

std::string Tensor::shape_str() const {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < ndim_; ++d) os << (d ? ", " : "") << shape_[d];
  os << "] " << dtype_name(dtype_);
  return os.str();
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
  VLLM_CHECK(is_contiguous(), "reshape of a non-contiguous tensor ", shape_str());
  Tensor t = *this;
  t.ndim_ = static_cast<int>(shape.size());
  VLLM_CHECK(t.ndim_ >= 1 && t.ndim_ <= kMaxDims, "reshape rank");
  int d = 0;
  for (int64_t s : shape) t.shape_[d++] = s;
  VLLM_CHECK(t.numel() == numel(), "reshape ", shape_str(), " to ", t.numel(), " elements");
  t.set_contiguous_strides();
  return t;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t length) const {
  dim = norm_dim(dim);
  VLLM_CHECK(dim >= 0 && dim < ndim_ && start >= 0 && length >= 0 &&
                 start + length <= shape_[dim],
             "slice [", start, ", ", start + length, ") of dim ", dim, " of ", shape_str());
  if (dim == ndim_ - 1) {
    const int64_t bs = dtype_info(dtype_).block_size;
    VLLM_CHECK(start % bs == 0 && length % bs == 0, "slice not block aligned");
  }
  Tensor t = *this;
  const int64_t step = dim == ndim_ - 1 ? row_bytes(dtype_, start) : start * strides_[dim];
  t.offset_ += static_cast<size_t>(step);
  t.shape_[dim] = length;
  return t;
}

Tensor Tensor::split_last(int64_t n) const {
  VLLM_CHECK(ndim_ < kMaxDims && n > 0 && shape_[ndim_ - 1] % n == 0, "split_last ", n, " of ",
             shape_str());
  VLLM_CHECK(!dtype_info(dtype_).quantized, "split_last of a block type");
  Tensor t = *this;
  const int64_t d = shape_[ndim_ - 1] / n;
  t.shape_[ndim_ - 1] = n;
  t.shape_[ndim_] = d;
  t.strides_[ndim_] = strides_[ndim_ - 1];
  t.strides_[ndim_ - 1] = strides_[ndim_ - 1] * d;
  ++t.ndim_;
  return t;
}

Tensor Tensor::merge_last() const {
  // A dim of one element has no stride to honour.
  VLLM_CHECK(ndim_ >= 2 && (shape_[ndim_ - 2] == 1 ||
                            strides_[ndim_ - 2] == strides_[ndim_ - 1] * shape_[ndim_ - 1]),
             "merge_last of ", shape_str());
  Tensor t = *this;
  t.shape_[ndim_ - 2] *= shape_[ndim_ - 1];
  t.strides_[ndim_ - 2] = strides_[ndim_ - 1];
  --t.ndim_;
  return t;
}

Tensor Tensor::to(Device device) const {
  VLLM_CHECK(is_contiguous(), "to() of a non-contiguous tensor");
  // A GPU holds FP8_E4M3 rows in its own layout (model/weights.cpp, Linear::fused).
  VLLM_CHECK(dtype_ != DType::FP8_E4M3 || device.kind == this->device().kind,
             "fp8_e4m3 tensors are not copied between devices (Linear::fused places them)");
  Tensor t = empty(std::span<const int64_t>(shape_.data(), ndim_), dtype_, device);
  Backend& be = backend_for(device.kind == DeviceKind::Cpu ? this->device() : device);
  be.copy(t.raw(), device, raw(), this->device(), static_cast<size_t>(nbytes()));
  return t;
}

}  // namespace vllm
