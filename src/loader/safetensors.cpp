#include "loader/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "util/check.h"

namespace vllm {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the format's own limit

// Element sizes of the safetensors dtypes; tensors of any other dtype are listed but not
// size-checked, and only F32/F16/BF16 can be viewed.
std::optional<int64_t> element_size(std::string_view dtype) {
  static const std::pair<std::string_view, int64_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},     {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},      {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1},    {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"F8_E8M0", 1},
  };
  for (const auto& [name, size] : kSizes)
    if (name == dtype) return size;
  return std::nullopt;
}

std::optional<DType> to_dtype(std::string_view dtype) {
  if (dtype == "F32") return DType::F32;
  if (dtype == "F16") return DType::F16;
  if (dtype == "BF16") return DType::BF16;
  return std::nullopt;
}

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw Error(path + ": " + msg);
}

json parse_json(const std::string& path, const uint8_t* data, uint64_t size) {
  try {
    return json::parse(data, data + size);
  } catch (const json::exception& e) {
    fail(path, std::string("invalid JSON: ") + e.what());
  }
}

// A non-negative integer JSON value, or a failure naming `what`.
uint64_t to_u64(const std::string& path, const json& v, const std::string& what) {
  if (!v.is_number_unsigned()) fail(path, what + " is not a non-negative integer");
  return v.get<uint64_t>();
}

}  // namespace

std::shared_ptr<SafetensorsModel> SafetensorsModel::open(const std::string& dir_or_file) {
  std::shared_ptr<SafetensorsModel> m(new SafetensorsModel());
  m->root_ = dir_or_file;
  std::error_code ec;
  if (fs::is_directory(dir_or_file, ec)) {
    const fs::path dir(dir_or_file);
    if (fs::exists(dir / "model.safetensors.index.json", ec)) {
      m->add_index((dir / "model.safetensors.index.json").string());
    } else if (fs::exists(dir / "model.safetensors", ec)) {
      m->add_shard((dir / "model.safetensors").string());
    } else {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
      if (files.empty())
        fail(dir_or_file, "no model.safetensors.index.json or *.safetensors files");
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) m->add_shard(f);
    }
  } else if (dir_or_file.ends_with(".json")) {
    m->add_index(dir_or_file);
  } else {
    m->add_shard(dir_or_file);
  }
  return m;
}

void SafetensorsModel::add_index(const std::string& index_path) {
  const auto file = MappedFile::open(index_path);
  const json index = parse_json(index_path, file->data(), file->size());
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(index_path, "no \"weight_map\" object");
  const json& weight_map = index["weight_map"];
  std::set<std::string> shard_names;
  for (const auto& [name, shard] : weight_map.items()) {
    if (!shard.is_string()) fail(index_path, "weight_map entry '" + name + "' is not a string");
    const fs::path p(shard.get<std::string>());
    const bool escapes = std::find(p.begin(), p.end(), "..") != p.end();
    if (p.empty() || p.is_absolute() || escapes)
      fail(index_path, "weight_map entry '" + name + "' names a file outside the directory");
    shard_names.insert(p.string());
  }
  const fs::path dir = fs::path(index_path).parent_path();
  for (const std::string& s : shard_names) add_shard((dir / s).string());
  for (const auto& [name, shard] : weight_map.items()) {
    const auto it = tensors_.find(name);
    const std::string expected = (dir / shard.get<std::string>()).string();
    if (it == tensors_.end() || shards_[it->second.shard]->path() != expected)
      fail(index_path, "tensor '" + name + "' is mapped to " + expected +
                           ", which does not contain it");
  }
}

void SafetensorsModel::add_shard(const std::string& path) {
  const auto file = MappedFile::open(path);
  const uint64_t size = file->size();
  if (size < 8) fail(path, "truncated: no 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, file->data(), 8);
  if (header_len > size - 8)
    fail(path, "header length " + std::to_string(header_len) + " exceeds the file size " +
                   std::to_string(size));
  if (header_len > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(header_len) + " exceeds 100 MiB");
  const json header = parse_json(path, file->data() + 8, header_len);
  if (!header.is_object()) fail(path, "header is not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  const size_t shard = shards_.size();

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string what = "tensor '" + name + "'";
    if (!entry.is_object()) fail(path, what + " is not a JSON object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string())
      fail(path, what + " has no string \"dtype\"");
    if (!entry.contains("shape") || !entry["shape"].is_array())
      fail(path, what + " has no \"shape\" array");
    const json& offsets = entry.contains("data_offsets") ? entry["data_offsets"] : json();
    if (!offsets.is_array() || offsets.size() != 2)
      fail(path, what + " has no \"data_offsets\" pair");

    TensorInfo t;
    t.dtype = entry["dtype"].get<std::string>();
    t.shard = shard;
    // numel, and the byte extent of the dimensions that are not 0 (a tensor view's strides
    // multiply them all, so [0, 2^41, 2^23] must be refused too; 8: the widest element).
    int64_t numel = 1, extent = 8;
    for (const json& d : entry["shape"]) {
      const uint64_t n = to_u64(path, d, what + " shape entry");
      if (n > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, int64_t(n), &numel) ||
          __builtin_mul_overflow(extent, std::max<int64_t>(int64_t(n), 1), &extent))
        fail(path, what + " shape overflows 64 bits");
      t.shape.push_back(static_cast<int64_t>(n));
    }
    const uint64_t begin = to_u64(path, offsets[0], what + " data_offsets[0]");
    const uint64_t end = to_u64(path, offsets[1], what + " data_offsets[1]");
    if (begin > end || end > data_size)
      fail(path, what + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") lie outside the data section of " + std::to_string(data_size) + " bytes");
    t.offset = data_start + begin;
    t.nbytes = end - begin;
    if (const auto esize = element_size(t.dtype)) {
      int64_t expect = 0;
      if (__builtin_mul_overflow(numel, *esize, &expect) || uint64_t(expect) != t.nbytes)
        fail(path, what + " data_offsets span " + std::to_string(t.nbytes) +
                       " bytes, but its shape and dtype " + t.dtype + " need " +
                       std::to_string(expect));
    }
    if (const auto it = tensors_.find(name); it != tensors_.end())
      fail(path, what + " also appears in " + shards_[it->second.shard]->path());
    tensors_.emplace(name, std::move(t));
  }
  shards_.push_back(file);
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsModel::TensorInfo* SafetensorsModel::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const std::string& SafetensorsModel::file_of(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail(root_, "no tensor named '" + std::string(name) + "'");
  return shards_[t->shard]->path();
}

Tensor SafetensorsModel::tensor(std::string_view name) const {
  const std::string& path = file_of(name);
  const TensorInfo& t = *find(name);
  const std::optional<DType> dtype = to_dtype(t.dtype);
  if (!dtype)
    fail(path, "tensor '" + std::string(name) + "' has dtype " + t.dtype +
                   " (supported: F32, F16, BF16)");
  if (t.shape.empty() || t.shape.size() > Tensor::kMaxDims)
    fail(path, "tensor '" + std::string(name) + "' has " + std::to_string(t.shape.size()) +
                   " dimensions (supported: 1 to " + std::to_string(Tensor::kMaxDims) + ")");
  const auto& file = shards_[t.shard];
  return view_bytes(file, file->data() + t.offset, t.shape, *dtype);
}

std::span<const uint8_t> SafetensorsModel::bytes(std::string_view name) const {
  file_of(name);  // throws naming the checkpoint if missing
  const TensorInfo& t = *find(name);
  const uint8_t* base = shards_[t.shard]->data() + t.offset;
  return {base, static_cast<size_t>(t.nbytes)};
}

}  // namespace vllm
