// Test helpers: GgufBuilder writes small GGUF files byte by byte (including deliberately
// malformed ones), and TempDir gives each test a fresh scratch directory.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "util/check.h"

namespace vllm::test {

using Bytes = std::vector<uint8_t>;

template <typename T>
void put(Bytes& b, T v) {
  const size_t n = b.size();
  b.resize(n + sizeof(T));
  std::memcpy(b.data() + n, &v, sizeof(T));
}
inline void put_str(Bytes& b, std::string_view s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
template <typename T>
void patch(Bytes& b, size_t pos, T v) {
  std::memcpy(b.data() + pos, &v, sizeof(T));
}

// GGUF value type numbers.
enum Gt : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 };

class GgufBuilder {
 public:
  uint32_t version = 3;
  uint32_t alignment = 32;  // used for layout; written only through kv("general.alignment")

  template <typename T>
  GgufBuilder& kv(std::string_view key, Gt type, T value) {
    put_str(kvs_, key);
    put<uint32_t>(kvs_, type);
    put<T>(kvs_, value);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& kv_str(std::string_view key, std::string_view value) {
    put_str(kvs_, key);
    put<uint32_t>(kvs_, STR);
    put_str(kvs_, value);
    ++n_kv_;
    return *this;
  }
  template <typename T>
  GgufBuilder& kv_arr(std::string_view key, Gt elem, const std::vector<T>& values) {
    put_str(kvs_, key);
    put<uint32_t>(kvs_, ARR);
    put<uint32_t>(kvs_, elem);
    put<uint64_t>(kvs_, values.size());
    for (const T& v : values) put<T>(kvs_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& kv_str_arr(std::string_view key, const std::vector<std::string>& values) {
    put_str(kvs_, key);
    put<uint32_t>(kvs_, ARR);
    put<uint32_t>(kvs_, STR);
    put<uint64_t>(kvs_, values.size());
    for (const auto& v : values) put_str(kvs_, v);
    ++n_kv_;
    return *this;
  }
  // An entry whose encoding (key included) the test writes itself.
  GgufBuilder& kv_raw(const Bytes& entry) {
    kvs_.insert(kvs_.end(), entry.begin(), entry.end());
    ++n_kv_;
    return *this;
  }
  // `ne` innermost first, as GGUF stores it; `offset` overrides the computed data offset.
  GgufBuilder& tensor(std::string name, uint32_t ggml_type, std::vector<uint64_t> ne, Bytes data,
                      std::optional<uint64_t> offset = std::nullopt) {
    tensors_.push_back({std::move(name), ggml_type, std::move(ne), std::move(data), offset});
    return *this;
  }

  // The whole file; no padding after the last tensor, so any cut makes it invalid.
  Bytes build() const {
    Bytes b{'G', 'G', 'U', 'F'};
    put<uint32_t>(b, version);
    put<uint64_t>(b, tensors_.size());
    put<uint64_t>(b, n_kv_);
    b.insert(b.end(), kvs_.begin(), kvs_.end());
    std::vector<uint64_t> offsets;
    uint64_t off = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(t.offset.value_or(off));
      off = align(off + t.data.size());
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      put_str(b, t.name);
      put<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t n : t.ne) put<uint64_t>(b, n);
      put<uint32_t>(b, t.type);
      put<uint64_t>(b, offsets[i]);
    }
    if (tensors_.empty()) return b;
    b.resize(align(b.size()), 0);
    const size_t data_start = b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].offset) continue;  // placed by hand: no bytes behind it
      b.resize(data_start + offsets[i], 0);
      b.insert(b.end(), tensors_[i].data.begin(), tensors_[i].data.end());
    }
    return b;
  }

 private:
  uint64_t align(uint64_t x) const { return (x + alignment - 1) / alignment * alignment; }
  struct T {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    Bytes data;
    std::optional<uint64_t> offset;
  };
  Bytes kvs_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

// A fresh directory per test under the GoogleTest temp dir, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (std::string("vllm_loader_") + info->test_suite_name() + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() { std::filesystem::remove_all(dir_); }
  std::string path(std::string_view name) const { return (dir_ / name).string(); }
  std::string write(std::string_view name, const Bytes& bytes) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return p;
  }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

// Runs `fn`, expecting a vllm::Error whose message contains every string in `parts`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected vllm::Error";
  } catch (const vllm::Error& e) {
    const std::string msg = e.what();
    for (std::string_view p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace vllm::test
