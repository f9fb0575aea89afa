// GgufFile metadata look-ups: values are decoded from the mapping on demand (open() already
// checked that every value lies inside the file).
#include <cstring>

#include "loader/gguf.h"
#include "util/check.h"

namespace vllm {

namespace {

using V = GgufFile::ValueType;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool is_integer(V t) {
  switch (t) {
    case V::U8: case V::I8: case V::U16: case V::I16: case V::U32: case V::I32:
    case V::U64: case V::I64: case V::Bool:
      return true;
    default:
      return false;
  }
}

// Scalar size of a numeric type (strings and arrays are not numeric).
uint64_t numeric_size(V t) {
  switch (t) {
    case V::U8: case V::I8: case V::Bool: return 1;
    case V::U16: case V::I16: return 2;
    case V::U32: case V::I32: case V::F32: return 4;
    case V::U64: case V::I64: case V::F64: return 8;
    default: return 0;
  }
}

// An integer or bool at p; false in `ok` when a u64 does not fit in int64.
int64_t decode_int(V t, const uint8_t* p, bool& ok) {
  ok = true;
  switch (t) {
    case V::U8: return load<uint8_t>(p);
    case V::I8: return load<int8_t>(p);
    case V::U16: return load<uint16_t>(p);
    case V::I16: return load<int16_t>(p);
    case V::U32: return load<uint32_t>(p);
    case V::I32: return load<int32_t>(p);
    case V::I64: return load<int64_t>(p);
    case V::Bool: return load<uint8_t>(p) != 0;
    case V::U64: {
      const uint64_t u = load<uint64_t>(p);
      ok = u <= uint64_t(INT64_MAX);
      return static_cast<int64_t>(u);
    }
    default: ok = false; return 0;
  }
}

double decode_number(V t, const uint8_t* p) {
  if (t == V::F32) return load<float>(p);
  if (t == V::F64) return load<double>(p);
  if (t == V::U64) return static_cast<double>(load<uint64_t>(p));
  bool ok = false;
  return static_cast<double>(decode_int(t, p, ok));
}

}  // namespace

std::string_view gguf_type_name(GgufFile::ValueType t) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",    "i16",   "u32",
                                                "i32", "f32", "bool",   "string", "array",
                                                "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(kv_.size());
  for (const auto& [k, v] : kv_) out.push_back(k);
  return out;
}

std::optional<GgufFile::ValueType> GgufFile::type_of(std::string_view key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second.type;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  const Value& v = it->second;
  if (!is_integer(v.type))
    fail("metadata key '" + std::string(key) + "' is " + std::string(gguf_type_name(v.type)) +
         ", not an integer");
  bool ok = false;
  const int64_t x = decode_int(v.type, file_->data() + v.offset, ok);
  if (!ok) fail("metadata key '" + std::string(key) + "' does not fit in int64");
  return x;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  const Value& v = it->second;
  if (v.type == V::Bool || numeric_size(v.type) == 0)
    fail("metadata key '" + std::string(key) + "' is " + std::string(gguf_type_name(v.type)) +
         ", not a number");
  return decode_number(v.type, file_->data() + v.offset);
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  const Value& v = it->second;
  if (v.type != V::String)
    fail("metadata key '" + std::string(key) + "' is " + std::string(gguf_type_name(v.type)) +
         ", not a string");
  const uint8_t* p = file_->data() + v.offset;
  return std::string(reinterpret_cast<const char*>(p + 8), load<uint64_t>(p));
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  const Value& v = it->second;
  if (v.type != V::Bool)
    fail("metadata key '" + std::string(key) + "' is " + std::string(gguf_type_name(v.type)) +
         ", not a bool");
  return load<uint8_t>(file_->data() + v.offset) != 0;
}

const GgufFile::Value* GgufFile::array_of(std::string_view key, const char* wanted) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return nullptr;
  const Value& v = it->second;
  const bool numeric = numeric_size(v.elem_type) != 0;
  const bool fits = std::string_view(wanted) == "strings" ? v.elem_type == V::String
                    : std::string_view(wanted) == "integers"
                        ? is_integer(v.elem_type)
                        : numeric;
  if (v.type != V::Array || !fits) {
    const std::string got = v.type == V::Array
                                ? "an array of " + std::string(gguf_type_name(v.elem_type))
                                : std::string(gguf_type_name(v.type));
    fail("metadata key '" + std::string(key) + "' is " + got + ", not an array of " + wanted);
  }
  return &v;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const Value* v = array_of(key, "strings");
  if (!v) return {};
  std::vector<std::string> out;
  out.reserve(v->count);  // bounded by the file size at open
  const uint8_t* p = file_->data() + v->offset;
  for (uint64_t i = 0; i < v->count; ++i) {
    const uint64_t len = load<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), len);
    p += 8 + len;
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const Value* v = array_of(key, "integers");
  if (!v) return {};
  std::vector<int64_t> out(v->count);
  const uint8_t* p = file_->data() + v->offset;
  const uint64_t step = numeric_size(v->elem_type);
  for (uint64_t i = 0; i < v->count; ++i) {
    bool ok = false;
    out[i] = decode_int(v->elem_type, p + i * step, ok);
    if (!ok) fail("metadata key '" + std::string(key) + "' has an element beyond int64");
  }
  return out;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  const Value* v = array_of(key, "numbers");
  if (!v) return {};
  std::vector<float> out(v->count);
  const uint8_t* p = file_->data() + v->offset;
  const uint64_t step = numeric_size(v->elem_type);
  for (uint64_t i = 0; i < v->count; ++i)
    out[i] = static_cast<float>(decode_number(v->elem_type, p + i * step));
  return out;
}

}  // namespace vllm
