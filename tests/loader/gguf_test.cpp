// GgufFile on well-formed files written by the test: every metadata value type, every
// supported tensor type, shapes, alignment and unsupported types.
#include <gtest/gtest.h>

#include <random>

#include "gguf_builder.h"
#include "loader/gguf.h"

namespace vllm::test {
namespace {

Bytes random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

TEST(Gguf, MetadataOfEveryType) {
  TempDir tmp;
  GgufBuilder g;
  g.kv<uint8_t>("u8", U8, 200).kv<int8_t>("i8", I8, -100).kv<uint16_t>("u16", U16, 60000);
  g.kv<int16_t>("i16", I16, -30000).kv<uint32_t>("u32", U32, 4000000000u);
  g.kv<int32_t>("i32", I32, -2000000000).kv<float>("f32", F32, 1.5f).kv<uint8_t>("b", BOOL, 1);
  g.kv<uint64_t>("u64", U64, 1ull << 40).kv<int64_t>("i64", I64, -(1ll << 50));
  g.kv<double>("f64", F64, 2.25).kv_str("s", "hello").kv_str("empty", "");
  g.kv<uint64_t>("u64.big", U64, ~0ull);
  g.kv_arr<int32_t>("a.i32", I32, {1, -2, 3}).kv_arr<uint8_t>("a.bool", BOOL, {1, 0});
  g.kv_arr<float>("a.f32", F32, {0.5f, -1.0f}).kv_arr<double>("a.f64", F64, {3.0});
  g.kv_str_arr("a.str", {"a", "", "ccc"}).kv_arr<uint64_t>("a.u64.big", U64, {~0ull});
  g.kv_arr<int32_t>("a.empty", I32, {});
  Bytes nested;  // [[7], []] as an array of arrays of u8
  put_str(nested, "a.nested");
  put<uint32_t>(nested, ARR);
  put<uint32_t>(nested, ARR);
  put<uint64_t>(nested, 2);
  put<uint32_t>(nested, U8), put<uint64_t>(nested, 1), put<uint8_t>(nested, 7);
  put<uint32_t>(nested, U8), put<uint64_t>(nested, 0);
  g.kv_raw(nested);
  const std::string path = tmp.write("meta.gguf", g.build());
  const auto f = GgufFile::open(path);

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->keys().size(), 22u);
  EXPECT_EQ(f->get_int("u8"), 200);
  EXPECT_EQ(f->get_int("i8"), -100);
  EXPECT_EQ(f->get_int("u16"), 60000);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_int("u32"), 4000000000ll);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_int("u64"), 1ll << 40);
  EXPECT_EQ(f->get_int("i64"), -(1ll << 50));
  EXPECT_EQ(f->get_int("b"), 1);
  EXPECT_EQ(f->get_float("f32"), 1.5);
  EXPECT_EQ(f->get_float("f64"), 2.25);
  EXPECT_EQ(f->get_float("i32"), -2000000000.0);
  EXPECT_EQ(f->get_bool("b"), true);
  EXPECT_EQ(f->get_string("s"), "hello");
  EXPECT_EQ(f->get_string("empty"), "");
  EXPECT_EQ(f->get_int_array("a.i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->get_int_array("a.bool"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(f->get_float_array("a.f32"), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(f->get_float_array("a.f64"), (std::vector<float>{3.0f}));
  EXPECT_EQ(f->get_float_array("a.i32"), (std::vector<float>{1, -2, 3}));
  EXPECT_EQ(f->get_string_array("a.str"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_TRUE(f->get_int_array("a.empty").empty());
  EXPECT_EQ(f->type_of("a.nested"), GgufFile::ValueType::Array);
  EXPECT_EQ(f->type_of("s"), GgufFile::ValueType::String);

  // Absent: empty results. Present with another type: an error naming the file and key.
  EXPECT_FALSE(f->has("nope"));
  EXPECT_FALSE(f->get_int("nope") || f->get_float("nope") || f->get_string("nope") ||
               f->get_bool("nope") || f->type_of("nope"));
  EXPECT_TRUE(f->get_string_array("nope").empty() && f->get_int_array("nope").empty() &&
              f->get_float_array("nope").empty());
  expect_error([&] { f->get_int("s"); }, {path, "'s'", "string"});
  expect_error([&] { f->get_int("f32"); }, {path, "'f32'"});
  expect_error([&] { f->get_float("s"); }, {path, "'s'"});
  expect_error([&] { f->get_string("u8"); }, {path, "'u8'"});
  expect_error([&] { f->get_bool("u8"); }, {path, "'u8'"});
  expect_error([&] { f->get_int("u64.big"); }, {path, "u64.big"});
  expect_error([&] { f->get_int_array("a.u64.big"); }, {path, "a.u64.big"});
  expect_error([&] { f->get_string_array("a.i32"); }, {path, "a.i32"});
  expect_error([&] { f->get_int_array("a.f32"); }, {path, "a.f32"});
  expect_error([&] { f->get_int_array("s"); }, {path, "'s'"});
  expect_error([&] { f->get_float_array("a.nested"); }, {path, "a.nested"});
  EXPECT_TRUE(f->tensors().empty());
}

struct TypeCase {
  uint32_t ggml_type;
  DType dtype;
  int64_t block_size, block_bytes;
};
const TypeCase kTypes[] = {
    {0, DType::F32, 1, 4},       {1, DType::F16, 1, 2},      {30, DType::BF16, 1, 2},
    {8, DType::Q8_0, 32, 34},    {2, DType::Q4_0, 32, 18},   {3, DType::Q4_1, 32, 20},
    {12, DType::Q4_K, 256, 144}, {13, DType::Q5_K, 256, 176}, {14, DType::Q6_K, 256, 210},
    {6, DType::Q5_0, 32, 22},
};

void check_tensors_of_every_type(uint32_t version, uint32_t alignment) {
  TempDir tmp;
  GgufBuilder g;
  g.version = version;
  g.alignment = alignment;
  if (alignment != 32) g.kv<uint32_t>("general.alignment", U32, alignment);
  std::vector<Bytes> data;
  for (const TypeCase& c : kTypes) {
    const uint64_t ne0 = 2 * c.block_size, ne1 = 3;  // GGUF [ne0, ne1] is row-major [3, ne0]
    data.push_back(random_bytes(ne0 / c.block_size * c.block_bytes * ne1, c.ggml_type));
    g.tensor("w." + std::to_string(c.ggml_type), c.ggml_type, {ne0, ne1}, data.back());
  }
  g.tensor("w.4d", 0, {4, 3, 2, 1}, random_bytes(4 * 24, 7));
  const std::string path = tmp.write("types.gguf", g.build());
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), version);
  EXPECT_EQ(f->alignment(), alignment);
  ASSERT_EQ(f->tensors().size(), std::size(kTypes) + 1);

  std::vector<Tensor> views;
  for (size_t i = 0; i < std::size(kTypes); ++i) {
    const TypeCase& c = kTypes[i];
    const std::string name = "w." + std::to_string(c.ggml_type);
    const auto* info = f->find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, c.dtype);
    EXPECT_TRUE(info->supported);
    EXPECT_EQ(info->shape, (std::vector<int64_t>{3, 2 * c.block_size}));
    EXPECT_EQ(info->offset % alignment, 0u);
    EXPECT_EQ(info->nbytes, data[i].size());
    Tensor t = f->tensor(name);
    EXPECT_EQ(t.dtype(), c.dtype);
    EXPECT_EQ(t.shape(), info->shape);
    ASSERT_EQ(size_t(t.nbytes()), data[i].size());
    EXPECT_EQ(std::memcmp(t.raw(), data[i].data(), data[i].size()), 0) << name;
    views.push_back(t);
  }
  Tensor t4 = f->tensor("w.4d");
  EXPECT_EQ(t4.shape(), (std::vector<int64_t>{1, 2, 3, 4}));
  // The views keep the mapping alive after the file object is gone.
  f.reset();
  for (size_t i = 0; i < views.size(); ++i)
    EXPECT_EQ(std::memcmp(views[i].raw(), data[i].data(), data[i].size()), 0);
}

TEST(Gguf, TensorsOfEveryTypeV3) { check_tensors_of_every_type(3, 32); }
TEST(Gguf, TensorsOfEveryTypeV2) { check_tensors_of_every_type(2, 32); }
TEST(Gguf, HonoursAlignment64) { check_tensors_of_every_type(3, 64); }
TEST(Gguf, AlignmentOneCopiesMisalignedData) { check_tensors_of_every_type(3, 1); }

TEST(Gguf, ZeroCopyViewPointsIntoTheFile) {
  TempDir tmp;
  GgufBuilder g;
  g.tensor("a", 0, {8}, random_bytes(32, 1)).tensor("b", 0, {8}, random_bytes(32, 2));
  const auto f = GgufFile::open(tmp.write("z.gguf", g.build()));
  const Tensor a = f->tensor("a"), b = f->tensor("b");
  EXPECT_EQ(static_cast<char*>(b.raw()) - static_cast<char*>(a.raw()),
            int64_t(f->find("b")->offset - f->find("a")->offset));
}

TEST(Gguf, UnsupportedTypesAreListedButNotViewable) {
  TempDir tmp;
  GgufBuilder g;
  g.tensor("q2k", 10, {256, 2}, random_bytes(2 * 84, 3));  // Q2_K: known size, no DType
  g.tensor("weird", 99, {16}, Bytes(64, 0));                // not a ggml type at all
  g.tensor("ok", 0, {4}, random_bytes(16, 4));
  const std::string path = tmp.write("unsupported.gguf", g.build());
  const auto f = GgufFile::open(path);
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_FALSE(f->find("q2k")->supported);
  EXPECT_EQ(f->find("q2k")->nbytes, 168u);
  EXPECT_EQ(f->find("weird")->ggml_type, 99u);
  expect_error([&] { f->tensor("q2k"); }, {path, "'q2k'", "10"});
  expect_error([&] { f->tensor("weird"); }, {path, "'weird'", "99"});
  expect_error([&] { f->tensor("missing"); }, {path, "missing"});
  EXPECT_EQ(f->tensor("ok").numel(), 4);
}

TEST(Gguf, MissingFileNamesThePath) {
  expect_error([] { GgufFile::open("/nonexistent/dir/x.gguf"); }, {"/nonexistent/dir/x.gguf"});
  TempDir tmp;
  expect_error([&] { GgufFile::open(tmp.dir().string()); }, {tmp.dir().string(), "directory"});
}

}  // namespace
}  // namespace vllm::test
