// MappedFile: a whole file mapped read-only into memory, alive while any shared_ptr holds it;
// view_bytes turns a byte range of it into a Tensor that keeps the mapping alive.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/tensor.h"

namespace vllm {

class MappedFile {
 public:
  // Throws vllm::Error "PATH: cannot open: REASON" (missing, unreadable, a directory ...).
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // nullptr for an empty file. The pages are read-only: writing through them faults.
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// A contiguous tensor of `shape` over the bytes at `data` inside `file` (the caller has checked
// the range). Zero-copy when `data` is aligned for the element or block type; else a copy.
Tensor view_bytes(const std::shared_ptr<MappedFile>& file, const uint8_t* data,
                  std::span<const int64_t> shape, DType dtype);

}  // namespace vllm
