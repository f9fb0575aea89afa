// GgufFile: a validated, memory-mapped GGUF v2/v3 file: typed metadata look-ups and zero-copy
// tensor views. open() checks every count, length and offset against the file size.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loader/mapped_file.h"
#include "runtime/tensor.h"

namespace vllm {

class GgufFile {
 public:
  // GGUF metadata value types, numbered as in the spec.
  enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
    String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
  };

  struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;     // meaningful only when supported()
    std::vector<int64_t> shape;   // row-major: GGUF's ne reversed
    uint64_t offset = 0;          // from the start of the file (not of the data section)
    uint32_t ggml_type = 0;       // the type number stored in the file
    uint64_t nbytes = 0;          // 0 when ggml_type is unknown to this reader
    bool supported = false;       // ggml_type maps to a DType
  };

  // Throws vllm::Error "PATH: what is wrong" for any malformed, truncated or unsupported file.
  static std::shared_ptr<GgufFile> open(const std::string& path);

  uint32_t version() const { return version_; }
  const std::string& path() const { return file_->path(); }
  uint32_t alignment() const { return alignment_; }

  // Metadata. Absent keys give nullopt (or an empty vector); a key present with an
  // incompatible type throws vllm::Error naming the key and both types.
  bool has(std::string_view key) const { return kv_.find(key) != kv_.end(); }
  std::vector<std::string> keys() const;
  std::optional<ValueType> type_of(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;      // any integer, or bool
  std::optional<double> get_float(std::string_view key) const;     // f32/f64, or any integer
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;  // integer or bool elements
  std::vector<float> get_float_array(std::string_view key) const;  // any numeric elements

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  // Zero-copy view over the mapping that keeps the file alive. Throws if the tensor is
  // missing or its type is not supported.
  Tensor tensor(std::string_view name) const;

 private:
  // Where a value's bytes start in the mapping; decoded lazily (the bytes were validated).
  struct Value {
    ValueType type;
    ValueType elem_type;  // arrays only
    uint64_t count;       // arrays only
    uint64_t offset;      // scalars: the value; strings: the length; arrays: the first element
  };
  friend class GgufParser;
  GgufFile() = default;
  [[noreturn]] void fail(const std::string& msg) const;
  const Value* array_of(std::string_view key, const char* wanted) const;

  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::map<std::string, Value, std::less<>> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

std::string_view gguf_type_name(GgufFile::ValueType t);

}  // namespace vllm
