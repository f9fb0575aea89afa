// Tensor: a typed, strided view (up to 4 dims, row-major, byte strides) over shared storage
// on one device. Quantized tensors keep their innermost dim contiguous and block-aligned.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace vllm {

enum class DeviceKind : uint8_t { Cpu, Cuda };

struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;
};
inline constexpr Device kCpu{};

// A block of memory; `owner` keeps it alive (a backend allocation, an mmap, a vector).
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  std::shared_ptr<void> owner;
};

class Tensor {
 public:
  static constexpr int kMaxDims = 4;

  Tensor() = default;
  // A new contiguous tensor from the device's backend (uninitialised).
  static Tensor empty(std::span<const int64_t> shape, DType dtype, Device device = kCpu);
  static Tensor empty(std::initializer_list<int64_t> shape, DType dtype, Device device = kCpu) {
    return empty(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device);
  }
  static Tensor zeros(std::initializer_list<int64_t> shape, DType dtype, Device device = kCpu);
  // A contiguous view of memory someone else owns; `owner` keeps it alive.
  static Tensor from_blob(void* data, std::span<const int64_t> shape, DType dtype,
                          std::shared_ptr<void> owner, Device device = kCpu);

  bool defined() const { return storage_ != nullptr; }
  int ndim() const { return ndim_; }
  int64_t size(int dim) const { return shape_[norm_dim(dim)]; }
  int64_t stride_bytes(int dim) const { return strides_[norm_dim(dim)]; }
  std::vector<int64_t> shape() const { return {shape_.begin(), shape_.begin() + ndim_}; }
  int64_t numel() const;
  int64_t nbytes() const;  // bytes of a contiguous tensor of this shape and dtype
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : kCpu; }
  bool is_contiguous() const;
  std::string shape_str() const;

  void* raw() const { return static_cast<char*>(storage_->data) + offset_; }
  template <typename T>
  T* data() const { return static_cast<T*>(raw()); }
  // Pointer to row i of dim 0 (any dtype).
  char* row(int64_t i) const { return static_cast<char*>(raw()) + i * strides_[0]; }

  // Views share storage. reshape needs a contiguous tensor; narrow slices dim 0.
  Tensor reshape(std::initializer_list<int64_t> shape) const;
  Tensor narrow(int64_t start, int64_t length) const { return slice(0, start, length); }
  Tensor slice(int dim, int64_t start, int64_t length) const;
  // [..., n * d] -> [..., n, d] over the same memory (the last dim must be packed).
  Tensor split_last(int64_t n) const;
  // [a, b, c] -> [a, b * c] over the same memory (dims 1 and 2 must be packed together).
  Tensor merge_last() const;
  // A contiguous copy on `device` (plain dtypes converted through f32 when `dtype` differs).
  Tensor to(Device device) const;

 private:
  int norm_dim(int dim) const { return dim < 0 ? dim + ndim_ : dim; }
  void set_contiguous_strides();

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  DType dtype_ = DType::F32;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};  // bytes
};

}  // namespace vllm
