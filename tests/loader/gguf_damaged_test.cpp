// GgufFile on damaged files: every truncation point, bad magic and version, absurd counts
// and lengths, bad tensor infos and random corruption must give a vllm::Error naming the path.
#include <gtest/gtest.h>

#include <random>

#include "gguf_builder.h"
#include "loader/gguf.h"

namespace vllm::test {
namespace {

// A small valid file with metadata of several kinds and three tensors.
GgufBuilder sample() {
  GgufBuilder g;
  g.kv_str("general.architecture", "llama").kv<uint32_t>("llama.block_count", U32, 2);
  g.kv<float>("eps", F32, 1e-5f).kv_str_arr("tokens", {"<s>", "a", "bc"});
  g.kv_arr<int32_t>("types", I32, {1, 2, 3});
  g.tensor("a", 0, {8, 2}, Bytes(64, 1));
  g.tensor("b", 8, {32}, Bytes(34, 2));
  g.tensor("c", 1, {5}, Bytes(10, 3));
  return g;
}

// Header layout of sample(): byte offsets of the first fields.
constexpr size_t kVersionAt = 4, kTensorCountAt = 8, kKvCountAt = 16, kFirstKeyLenAt = 24;

void expect_open_fails(const TempDir& tmp, const Bytes& bytes,
                       std::initializer_list<std::string_view> parts = {}) {
  const std::string path = tmp.write("bad.gguf", bytes);
  expect_error([&] { GgufFile::open(path); }, {path});
  if (parts.size()) expect_error([&] { GgufFile::open(path); }, parts);
}

TEST(GgufDamaged, SampleIsValid) {
  TempDir tmp;
  const auto f = GgufFile::open(tmp.write("ok.gguf", sample().build()));
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
}

TEST(GgufDamaged, TruncatedAtEveryByte) {
  TempDir tmp;
  const Bytes full = sample().build();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(full.size()));
    expect_open_fails(tmp, Bytes(full.begin(), full.begin() + cut));
  }
}

TEST(GgufDamaged, BadMagicAndVersion) {
  TempDir tmp;
  Bytes b = sample().build();
  b[0] = 'X';
  expect_open_fails(tmp, b, {"magic"});
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    b = sample().build();
    patch<uint32_t>(b, kVersionAt, v);
    expect_open_fails(tmp, b, {"version"});
  }
  b = sample().build();
  patch<uint32_t>(b, kVersionAt, 0x03000000u);
  expect_open_fails(tmp, b, {"big-endian"});
}

TEST(GgufDamaged, AbsurdCounts) {
  TempDir tmp;
  for (uint64_t n : {uint64_t{1} << 40, ~uint64_t{0}, uint64_t{1000}}) {
    Bytes b = sample().build();
    patch<uint64_t>(b, kTensorCountAt, n);
    expect_open_fails(tmp, b);
    b = sample().build();
    patch<uint64_t>(b, kKvCountAt, n);
    expect_open_fails(tmp, b);
  }
}

TEST(GgufDamaged, AbsurdLengths) {
  TempDir tmp;
  for (uint64_t n : {uint64_t{1} << 40, ~uint64_t{0}, uint64_t{100000}}) {
    Bytes b = sample().build();
    patch<uint64_t>(b, kFirstKeyLenAt, n);
    expect_open_fails(tmp, b, {"truncated"});

    GgufBuilder g;
    Bytes e;  // a string value with a huge length
    put_str(e, "k"), put<uint32_t>(e, STR), put<uint64_t>(e, n);
    expect_open_fails(tmp, g.kv_raw(e).build(), {"'k'"});

    for (uint32_t elem : {U8, U64, STR, ARR}) {
      GgufBuilder h;
      Bytes a;  // an array with a huge length
      put_str(a, "arr"), put<uint32_t>(a, ARR), put<uint32_t>(a, elem), put<uint64_t>(a, n);
      expect_open_fails(tmp, h.kv_raw(a).build(), {"'arr'", "array length"});
    }
  }
}

TEST(GgufDamaged, BadValueTypesAndNesting) {
  TempDir tmp;
  Bytes e;
  put_str(e, "k"), put<uint32_t>(e, 13), put<uint8_t>(e, 0);
  expect_open_fails(tmp, GgufBuilder().kv_raw(e).build(), {"'k'", "type 13"});
  Bytes a;  // array of an unknown element type
  put_str(a, "k"), put<uint32_t>(a, ARR), put<uint32_t>(a, 77), put<uint64_t>(a, 1);
  expect_open_fails(tmp, GgufBuilder().kv_raw(a).build(), {"'k'", "type 77"});
  Bytes deep;  // arrays nested 10 deep
  put_str(deep, "deep"), put<uint32_t>(deep, ARR);
  for (int i = 0; i < 10; ++i) put<uint32_t>(deep, ARR), put<uint64_t>(deep, 1);
  put<uint32_t>(deep, U8), put<uint64_t>(deep, 0);
  expect_open_fails(tmp, GgufBuilder().kv_raw(deep).build(), {"'deep'", "nested"});
}

TEST(GgufDamaged, DuplicateKeysAndTensors) {
  TempDir tmp;
  expect_open_fails(tmp, GgufBuilder().kv_str("k", "a").kv_str("k", "b").build(),
                    {"'k'", "duplicate"});
  expect_open_fails(
      tmp, GgufBuilder().tensor("t", 0, {1}, Bytes(4)).tensor("t", 0, {1}, Bytes(4)).build(),
      {"'t'", "duplicate"});
}

TEST(GgufDamaged, BadAlignment) {
  TempDir tmp;
  for (uint32_t a : {0u, 3u, 48u, 1u << 31})
    expect_open_fails(tmp, GgufBuilder().kv<uint32_t>("general.alignment", U32, a).build(),
                      {"alignment"});
  expect_open_fails(tmp, GgufBuilder().kv_str("general.alignment", "32").build(),
                    {"general.alignment"});
}

TEST(GgufDamaged, BadTensorInfos) {
  TempDir tmp;
  auto one = [](uint32_t type, std::vector<uint64_t> ne, size_t bytes,
                std::optional<uint64_t> off = std::nullopt) {
    return GgufBuilder().tensor("t", type, std::move(ne), Bytes(bytes), off).build();
  };
  expect_open_fails(tmp, one(0, {}, 4), {"'t'", "0 dimensions"});
  expect_open_fails(tmp, one(0, {1, 1, 1, 1, 1}, 4), {"'t'", "5 dimensions"});
  expect_open_fails(tmp, one(0, {1ull << 32, 1ull << 32}, 4), {"'t'", "overflow"});
  expect_open_fails(tmp, one(0, {~0ull}, 4), {"'t'", "overflow"});
  expect_open_fails(tmp, one(0, {1ull << 61}, 4), {"'t'"});  // byte size overflows
  // 0 elements, but a view's strides multiply the other dimensions (tests/fuzz/fuzz_gguf).
  expect_open_fails(tmp, one(0, {1ull << 39, 1ull << 23, 0}, 0), {"'t'", "overflow"});
  expect_open_fails(tmp, one(8, {33}, 34), {"'t'", "block size"});
  expect_open_fails(tmp, one(0, {4}, 12), {"'t'", "outside"});  // data short by 4 bytes
  expect_open_fails(tmp, one(0, {4}, 16, 1ull << 20), {"'t'", "outside"});
  expect_open_fails(tmp, one(0, {4}, 16, ~0ull << 5), {"'t'", "outside"});
  expect_open_fails(tmp, one(0, {4}, 16, 4), {"'t'", "alignment"});
  expect_open_fails(tmp, one(99, {4}, 0, 1ull << 20), {"'t'", "outside"});
}

// Random byte corruption of the header: open either works or throws vllm::Error, and a file
// that opens answers every look-up without crashing.
TEST(GgufDamaged, RandomCorruptionNeverCrashes) {
  TempDir tmp;
  const Bytes full = sample().build();
  const size_t header_end = full.size() - 128;  // the tensor data sits in the last bytes
  std::mt19937 rng(12345);
  int opened = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = full;
    const int flips = 1 + int(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t pos = rng() % header_end;
      b[pos] = rng() % 3 == 0 ? uint8_t(0xff) : uint8_t(rng());
    }
    const std::string path = tmp.write("fuzz.gguf", b);
    std::shared_ptr<GgufFile> f;
    try {
      f = GgufFile::open(path);
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      continue;
    }
    ++opened;
    for (const std::string& k : f->keys()) {
      auto attempt = [](auto fn) {
        try {
          fn();
        } catch (const Error&) {
        }
      };
      attempt([&] { f->get_int(k); });
      attempt([&] { f->get_float(k); });
      attempt([&] { f->get_string(k); });
      attempt([&] { f->get_bool(k); });
      attempt([&] { f->get_string_array(k); });
      attempt([&] { f->get_int_array(k); });
      attempt([&] { f->get_float_array(k); });
    }
    for (const auto& t : f->tensors()) {
      try {
        volatile uint8_t sink = 0;
        const Tensor v = f->tensor(t.name);
        const auto* p = static_cast<const uint8_t*>(v.raw());
        for (int64_t i = 0; i < v.nbytes(); ++i) sink = sink + p[i];
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(opened, 0);  // some corruptions only touch values and keep the file valid
}

}  // namespace
}  // namespace vllm::test
