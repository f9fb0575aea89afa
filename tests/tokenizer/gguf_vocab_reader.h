// Test helper: reads the tokenizer.* metadata of a GGUF file into a GgufVocab (the model loader
// owns real GGUF parsing; this minimal reader keeps test_tokenizer free of the loader library).
#pragma once
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>

#include "tokenizer/tokenizer.h"

namespace vllm::testing {

class GgufMetaReader {
 public:
  explicit GgufMetaReader(const std::string& path) : in_(path, std::ios::binary) {
    if (!in_) throw std::runtime_error("cannot open " + path);
  }

  GgufVocab read_vocab() {
    if (read_string_of(4) != "GGUF") throw std::runtime_error("not a GGUF file");
    const uint32_t version = read<uint32_t>();
    if (version < 2) throw std::runtime_error("GGUF v1 is not supported");
    read<uint64_t>();  // tensor count
    const uint64_t kv_count = read<uint64_t>();
    GgufVocab v;
    for (uint64_t i = 0; i < kv_count; ++i) {
      const std::string key = read_string();
      const uint32_t type = read<uint32_t>();
      if (key == "tokenizer.ggml.model")
        v.model = read_string();
      else if (key == "tokenizer.ggml.pre")
        v.pre = read_string();
      else if (key == "tokenizer.chat_template")
        v.chat_template = read_string();
      else if (key == "tokenizer.ggml.tokens")
        v.tokens = read_string_array();
      else if (key == "tokenizer.ggml.merges")
        v.merges = read_string_array();
      else if (key == "tokenizer.ggml.token_type")
        v.token_types = read_numeric_array<int32_t>();
      else if (key == "tokenizer.ggml.scores")
        v.scores = read_numeric_array<float>();
      else if (key == "tokenizer.ggml.bos_token_id")
        v.bos_id = static_cast<int32_t>(read_scalar(type));
      else if (key == "tokenizer.ggml.eos_token_id")
        v.eos_id = static_cast<int32_t>(read_scalar(type));
      else if (key == "tokenizer.ggml.unknown_token_id")
        v.unk_id = static_cast<int32_t>(read_scalar(type));
      else if (key == "tokenizer.ggml.padding_token_id")
        v.pad_id = static_cast<int32_t>(read_scalar(type));
      else if (key == "tokenizer.ggml.add_bos_token")
        v.add_bos = read_scalar(type) != 0;
      else if (key == "tokenizer.ggml.add_eos_token")
        v.add_eos = read_scalar(type) != 0;
      else if (key == "tokenizer.ggml.add_space_prefix")
        v.add_space_prefix = read_scalar(type) != 0;
      else
        skip(type);
    }
    return v;
  }

 private:
  template <typename T>
  T read() {
    T x{};
    in_.read(reinterpret_cast<char*>(&x), sizeof(T));
    if (!in_) throw std::runtime_error("truncated GGUF");
    return x;
  }
  std::string read_string_of(uint64_t n) {
    std::string s(n, '\0');
    in_.read(s.data(), static_cast<std::streamsize>(n));
    if (!in_) throw std::runtime_error("truncated GGUF");
    return s;
  }
  std::string read_string() { return read_string_of(read<uint64_t>()); }
  static size_t scalar_size(uint32_t type) {
    switch (type) {
      case 0:
      case 1:
      case 7:
        return 1;
      case 2:
      case 3:
        return 2;
      case 4:
      case 5:
      case 6:
        return 4;
      case 10:
      case 11:
      case 12:
        return 8;
      default:
        throw std::runtime_error("bad GGUF value type");
    }
  }
  int64_t read_scalar(uint32_t type) {
    switch (type) {
      case 0:
      case 7:
        return read<uint8_t>();
      case 1:
        return read<int8_t>();
      case 2:
        return read<uint16_t>();
      case 3:
        return read<int16_t>();
      case 4:
        return read<uint32_t>();
      case 5:
        return read<int32_t>();
      case 10:
        return static_cast<int64_t>(read<uint64_t>());
      case 11:
        return read<int64_t>();
      default:
        throw std::runtime_error("GGUF value is not an integer");
    }
  }
  std::vector<std::string> read_string_array() {
    if (read<uint32_t>() != 8) throw std::runtime_error("expected a GGUF string array");
    std::vector<std::string> out(read<uint64_t>());
    for (auto& s : out) s = read_string();
    return out;
  }
  template <typename T>
  std::vector<T> read_numeric_array() {
    const uint32_t elem = read<uint32_t>();
    std::vector<T> out(read<uint64_t>());
    for (auto& x : out)
      x = elem == 6 ? static_cast<T>(read<float>()) : static_cast<T>(read_scalar(elem));
    return out;
  }
  void skip(uint32_t type) {
    if (type == 8) {
      read_string();
    } else if (type == 9) {
      const uint32_t elem = read<uint32_t>();
      const uint64_t n = read<uint64_t>();
      for (uint64_t i = 0; i < n; ++i) skip(elem);
    } else {
      in_.ignore(static_cast<std::streamsize>(scalar_size(type)));
    }
  }

  std::ifstream in_;
};

}  // namespace vllm::testing
