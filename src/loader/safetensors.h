// SafetensorsModel: the tensors of one .safetensors file or of a sharded checkpoint
// (model.safetensors.index.json), each shard memory-mapped and its header validated at open.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loader/mapped_file.h"
#include "runtime/tensor.h"

namespace vllm {

class SafetensorsModel {
 public:
  struct TensorInfo {
    std::string dtype;            // as written in the header ("F32", "BF16", "I64" ...)
    std::vector<int64_t> shape;   // row-major
    uint64_t offset = 0;          // from the start of the shard file
    uint64_t nbytes = 0;
    size_t shard = 0;             // index into the mapped shards
  };

  // `dir_or_file`: a directory holding model.safetensors.index.json or model.safetensors
  // (or else every *.safetensors in it), a .safetensors file, or an index .json file.
  // Throws vllm::Error naming the offending file.
  static std::shared_ptr<SafetensorsModel> open(const std::string& dir_or_file);

  std::vector<std::string> names() const;  // sorted
  bool has(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  const TensorInfo* find(std::string_view name) const;
  // The file that holds `name` (for messages); throws if missing.
  const std::string& file_of(std::string_view name) const;
  // F32/F16/BF16 only: a zero-copy view when aligned (else a copy); throws naming the
  // tensor, its dtype and its file for anything else.
  Tensor tensor(std::string_view name) const;
  // The stored bytes of `name`, whatever its dtype (find() gives dtype and shape); throws if
  // missing.
  std::span<const uint8_t> bytes(std::string_view name) const;

 private:
  SafetensorsModel() = default;
  void add_shard(const std::string& path);
  void add_index(const std::string& index_path);

  std::string root_;  // what open() was given
  std::vector<std::shared_ptr<MappedFile>> shards_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
};

}  // namespace vllm
