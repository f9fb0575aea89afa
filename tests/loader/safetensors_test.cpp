// SafetensorsModel on files written by the test: single files, sharded checkpoints with an
// index, and damaged headers, each error naming the offending file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gguf_builder.h"
#include "loader/safetensors.h"

namespace vllm::test {
namespace {

using json = nlohmann::json;

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  Bytes data;
};

// The file layout: u64 header length, JSON header, data. Sized once up front.
Bytes frame(const std::string& header, const Bytes& data) {
  Bytes b(8 + header.size() + data.size());
  const uint64_t len = header.size();
  std::memcpy(b.data(), &len, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(b.data() + 8 + header.size(), data.data(), data.size());
  return b;
}

// A file of `ts`; `pad` extra header bytes shift the data's alignment.
Bytes safetensors_bytes(const std::vector<StTensor>& ts, size_t pad = 0) {
  json h = json::object();
  h["__metadata__"] = {{"format", "pt"}};
  Bytes data;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  return frame(h.dump() + std::string(pad, ' '), data);
}
Bytes raw_header(const std::string& header, size_t data_bytes = 0) {
  return frame(header, Bytes(data_bytes, 0));
}

template <typename T>
Bytes as_bytes(std::vector<T> v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<StTensor> tensors() {
  return {{"w.f32", "F32", {2, 3}, as_bytes<float>({1, 2, 3, 4, 5, 6})},
          {"w.f16", "F16", {4}, as_bytes<uint16_t>({0x3c00, 0x4000, 0xc000, 0})},
          {"w.bf16", "BF16", {1, 1, 2}, as_bytes<uint16_t>({0x3f80, 0x4040})},
          {"pos", "I64", {2}, as_bytes<int64_t>({0, 1})}};
}

TEST(Safetensors, SingleFile) {
  TempDir tmp;
  for (size_t pad : {0, 1, 2}) {  // pad 1 and 2 misalign the data: read through a copy
    const std::string path = tmp.write("model.safetensors", safetensors_bytes(tensors(), pad));
    for (const std::string& open_as : {path, tmp.dir().string()}) {
      const auto m = SafetensorsModel::open(open_as);
      EXPECT_EQ(m->names(), (std::vector<std::string>{"pos", "w.bf16", "w.f16", "w.f32"}));
      EXPECT_TRUE(m->has("w.f32"));
      EXPECT_FALSE(m->has("__metadata__"));
      const Tensor f32 = m->tensor("w.f32");
      EXPECT_EQ(f32.dtype(), DType::F32);
      EXPECT_EQ(f32.shape(), (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(f32.data<float>()[5], 6.0f);
      const Tensor f16 = m->tensor("w.f16");
      EXPECT_EQ(f16.dtype(), DType::F16);
      EXPECT_EQ(f16_to_f32(f16.data<uint16_t>()[2]), -2.0f);
      const Tensor bf16 = m->tensor("w.bf16");
      EXPECT_EQ(bf16.shape(), (std::vector<int64_t>{1, 1, 2}));
      EXPECT_EQ(bf16_to_f32(bf16.data<uint16_t>()[1]), 3.0f);
      expect_error([&] { m->tensor("pos"); }, {path, "'pos'", "I64"});
      expect_error([&] { m->tensor("missing"); }, {open_as, "missing"});
    }
  }
}

TEST(Safetensors, ShardedWithIndex) {
  TempDir tmp;
  auto ts = tensors();
  tmp.write("model-00001-of-00002.safetensors", safetensors_bytes({ts[0], ts[1]}));
  tmp.write("model-00002-of-00002.safetensors", safetensors_bytes({ts[2], ts[3]}));
  json index = {{"metadata", {{"total_size", 42}}},
                {"weight_map",
                 {{"w.f32", "model-00001-of-00002.safetensors"},
                  {"w.f16", "model-00001-of-00002.safetensors"},
                  {"w.bf16", "model-00002-of-00002.safetensors"},
                  {"pos", "model-00002-of-00002.safetensors"}}}};
  const std::string dump = index.dump();
  const std::string index_path =
      tmp.write("model.safetensors.index.json", Bytes(dump.begin(), dump.end()));
  for (const std::string& open_as : {tmp.dir().string(), index_path}) {
    const auto m = SafetensorsModel::open(open_as);
    EXPECT_EQ(m->names().size(), 4u);
    EXPECT_EQ(m->tensor("w.f32").data<float>()[0], 1.0f);
    EXPECT_EQ(bf16_to_f32(m->tensor("w.bf16").data<uint16_t>()[0]), 1.0f);
    EXPECT_NE(m->file_of("w.bf16").find("model-00002-of-00002"), std::string::npos);
  }

  // The index names a tensor its shard lacks, a missing shard, or a path outside the dir.
  auto write_index = [&](const json& j) {
    const std::string s = j.dump();
    return tmp.write("model.safetensors.index.json", Bytes(s.begin(), s.end()));
  };
  json bad = index;
  bad["weight_map"]["ghost"] = "model-00001-of-00002.safetensors";
  std::string p = write_index(bad);
  expect_error([&] { SafetensorsModel::open(tmp.dir().string()); }, {p, "'ghost'"});
  bad = index;
  bad["weight_map"]["w.f32"] = "model-00009.safetensors";
  write_index(bad);
  expect_error([&] { SafetensorsModel::open(tmp.dir().string()); }, {"model-00009.safetensors"});
  bad = index;
  bad["weight_map"]["w.f32"] = "../x.safetensors";
  p = write_index(bad);
  expect_error([&] { SafetensorsModel::open(p); }, {p, "outside"});
  p = write_index(json{{"weight_map", 3}});
  expect_error([&] { SafetensorsModel::open(p); }, {p, "weight_map"});
  const std::string garbage = "{not json";
  p = tmp.write("model.safetensors.index.json", Bytes(garbage.begin(), garbage.end()));
  expect_error([&] { SafetensorsModel::open(tmp.dir().string()); }, {p, "JSON"});
}

TEST(Safetensors, DuplicateAcrossShards) {
  TempDir tmp;
  auto ts = tensors();
  tmp.write("a.safetensors", safetensors_bytes({ts[0]}));
  const std::string b = tmp.write("b.safetensors", safetensors_bytes({ts[0]}));
  expect_error([&] { SafetensorsModel::open(tmp.dir().string()); }, {b, "'w.f32'"});
}

TEST(Safetensors, EmptyDirectory) {
  TempDir tmp;
  expect_error([&] { SafetensorsModel::open(tmp.dir().string()); }, {tmp.dir().string()});
  expect_error([&] { SafetensorsModel::open(tmp.path("none.safetensors")); }, {"none"});
}

TEST(Safetensors, DamagedHeaders) {
  TempDir tmp;
  auto fails = [&](const Bytes& bytes, std::initializer_list<std::string_view> parts) {
    const std::string path = tmp.write("bad.safetensors", bytes);
    expect_error([&] { SafetensorsModel::open(path); }, {path});
    expect_error([&] { SafetensorsModel::open(path); }, parts);
  };
  const Bytes good = safetensors_bytes(tensors());
  for (size_t cut = 0; cut < good.size(); ++cut) {
    SCOPED_TRACE(cut);
    fails(Bytes(good.begin(), good.begin() + cut), {});
  }
  Bytes huge = good;
  patch<uint64_t>(huge, 0, ~0ull);
  fails(huge, {"header length"});
  fails(raw_header("[1, 2]"), {"not a JSON object"});
  fails(raw_header("{\"a\": 5}"), {"'a'"});
  fails(raw_header(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", 4), {"'a'", "dtype"});
  fails(raw_header(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), {"'a'", "shape"});
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [1]}})", 4), {"'a'", "data_offsets"});
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
        {"'a'", "shape"});
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
        {"'a'"});
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4),
        {"'a'", "need 8"});
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4),
        {"'a'", "outside"});
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}})", 4),
        {"'a'", "outside"});
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296],
                      "data_offsets": [0, 4]}})", 4), {"'a'", "overflow"});
  // 0 elements, but a view's strides multiply the other dimensions (tests/fuzz).
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [0, 8388608, 549755813888],
                      "data_offsets": [0, 0]}})"), {"'a'", "overflow"});
  fails(raw_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551615]}})", 4),
        {"'a'", "outside"});
  // Unknown dtypes and odd ranks are listed but cannot be viewed.
  const std::string path = tmp.write("odd.safetensors", raw_header(R"({
      "f4": {"dtype": "F4", "shape": [8], "data_offsets": [0, 4]},
      "scalar": {"dtype": "F32", "shape": [], "data_offsets": [4, 8]},
      "r5": {"dtype": "F32", "shape": [1, 1, 1, 1, 1], "data_offsets": [8, 12]}})", 12));
  const auto m = SafetensorsModel::open(path);
  EXPECT_EQ(m->names().size(), 3u);
  expect_error([&] { m->tensor("f4"); }, {path, "'f4'", "F4"});
  expect_error([&] { m->tensor("scalar"); }, {path, "'scalar'", "0 dimensions"});
  expect_error([&] { m->tensor("r5"); }, {path, "'r5'", "5 dimensions"});
}

}  // namespace
}  // namespace vllm::test
