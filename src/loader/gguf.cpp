#include "loader/gguf.h"

#include <bit>
#include <cstring>

#include "util/check.h"

namespace vllm {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 3;
// Smallest encoding of one metadata entry (key length, empty key, type, one-byte value) and of
// one tensor info (name length, empty name, n_dims, type, offset): bounds for the counts.
constexpr uint64_t kMinEntryBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

struct GgmlType {
  uint32_t id;
  int64_t block_size;
  int64_t block_bytes;
  std::optional<DType> dtype;
};

// Every ggml type of the spec, so even unsupported tensors are bounds-checked at open.
constexpr GgmlType kGgmlTypes[] = {
    {0, 1, 4, DType::F32},     {1, 1, 2, DType::F16},      {2, 32, 18, DType::Q4_0},
    {3, 32, 20, DType::Q4_1},  {6, 32, 22, DType::Q5_0},      {7, 32, 24, {}},
    {8, 32, 34, DType::Q8_0},  {9, 32, 40, {}},            {10, 256, 84, {}},
    {11, 256, 110, {}},        {12, 256, 144, DType::Q4_K}, {13, 256, 176, DType::Q5_K},
    {14, 256, 210, DType::Q6_K}, {15, 256, 292, {}},        {16, 256, 66, {}},
    {17, 256, 74, {}},         {18, 256, 98, {}},          {19, 256, 50, {}},
    {20, 32, 18, {}},          {21, 256, 110, {}},         {22, 256, 82, {}},
    {23, 256, 136, {}},        {24, 1, 1, {}},             {25, 1, 2, {}},
    {26, 1, 4, {}},            {27, 1, 8, {}},             {28, 1, 8, {}},
    {29, 256, 56, {}},         {30, 1, 2, DType::BF16},    {34, 256, 54, {}},
    {35, 256, 66, {}},         {39, 32, 17, {}},           {40, 64, 36, {}},
    {41, 128, 18, {}},
};

const GgmlType* find_ggml_type(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

uint64_t scalar_size(GgufFile::ValueType t) {
  using V = GgufFile::ValueType;
  switch (t) {
    case V::U8: case V::I8: case V::Bool: return 1;
    case V::U16: case V::I16: return 2;
    case V::U32: case V::I32: case V::F32: return 4;
    case V::U64: case V::I64: case V::F64: return 8;
    case V::String: case V::Array: return 0;
  }
  return 0;
}

}  // namespace

// Walks the header once, checking every read against the file size; records where each
// metadata value lives so look-ups decode straight from the mapping.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& f) : f_(f), data_(f.file_->data()), size_(f.file_->size()) {}

  void parse() {
    ctx_ = "header";
    need(4, "magic");
    if (std::memcmp(data_, kMagic, 4) != 0) fail("not a GGUF file (bad magic)");
    pos_ = 4;
    const uint32_t version = read<uint32_t>("version");
    if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3)
      fail("big-endian GGUF files are not supported");
    if (version != 2 && version != 3)
      fail("unsupported GGUF version " + std::to_string(version) + " (expected 2 or 3)");
    f_.version_ = version;
    const uint64_t n_tensors = read<uint64_t>("tensor count");
    const uint64_t n_kv = read<uint64_t>("metadata count");
    if (n_kv > remaining() / kMinEntryBytes)
      fail("metadata count " + std::to_string(n_kv) + " cannot fit in the file");
    if (n_tensors > remaining() / kMinTensorInfoBytes)
      fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the file");
    for (uint64_t i = 0; i < n_kv; ++i) parse_kv(i);
    read_alignment();
    f_.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) parse_tensor_info(i);
    place_tensors();
  }

 private:
  using V = GgufFile::ValueType;

  uint64_t remaining() const { return size_ - pos_; }
  [[noreturn]] void fail(const std::string& msg) const { f_.fail(ctx_ + ": " + msg); }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      fail(std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes at byte " +
           std::to_string(pos_) + " but the file has " + std::to_string(size_));
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }
  V read_type(const char* what) {
    const uint32_t t = read<uint32_t>(what);
    if (t > static_cast<uint32_t>(V::F64)) fail("unknown value type " + std::to_string(t));
    return static_cast<V>(t);
  }

  void skip_value(V type, int depth) {
    if (type == V::String) {
      read_string("string value");
    } else if (type == V::Array) {
      if (depth >= kMaxArrayDepth) fail("arrays nested too deeply");
      const V elem = read_type("array element type");
      const uint64_t n = read<uint64_t>("array length");
      skip_array(elem, n, depth + 1);
    } else {
      need(scalar_size(type), "value");
      pos_ += scalar_size(type);
    }
  }
  void skip_array(V elem, uint64_t n, int depth) {
    const uint64_t min_bytes = elem == V::String ? 8 : elem == V::Array ? 12 : scalar_size(elem);
    if (n > remaining() / min_bytes)
      fail("array length " + std::to_string(n) + " cannot fit in the file");
    if (elem == V::String || elem == V::Array) {
      for (uint64_t i = 0; i < n; ++i) skip_value(elem, depth);
    } else {
      pos_ += n * min_bytes;
    }
  }

  void parse_kv(uint64_t i) {
    ctx_ = "metadata entry " + std::to_string(i);
    const std::string_view key = read_string("key");
    ctx_ = "metadata key '" + std::string(key) + "'";
    if (f_.kv_.count(key)) fail("duplicate key");
    GgufFile::Value v{read_type("value type"), V::U8, 0, 0};
    if (v.type == V::Array) {
      v.elem_type = read_type("array element type");
      v.count = read<uint64_t>("array length");
      v.offset = pos_;
      skip_array(v.elem_type, v.count, 1);
    } else {
      v.offset = pos_;
      skip_value(v.type, 0);
    }
    f_.kv_.emplace(std::string(key), v);
  }

  void read_alignment() {
    ctx_ = "metadata key 'general.alignment'";
    const std::optional<int64_t> a = f_.get_int("general.alignment");
    if (!a) return;
    if (*a <= 0 || *a > (int64_t{1} << 30) || !std::has_single_bit(static_cast<uint64_t>(*a)))
      fail("alignment " + std::to_string(*a) + " is not a power of two up to 2^30");
    f_.alignment_ = static_cast<uint32_t>(*a);
  }

  void parse_tensor_info(uint64_t i) {
    ctx_ = "tensor info " + std::to_string(i);
    GgufFile::TensorInfo t;
    t.name = std::string(read_string("tensor name"));
    ctx_ = "tensor '" + t.name + "'";
    if (f_.tensor_index_.count(t.name)) fail("duplicate tensor name");
    const uint32_t n_dims = read<uint32_t>("dimension count");
    if (n_dims < 1 || n_dims > kMaxDims)
      fail(std::to_string(n_dims) + " dimensions (expected 1 to " + std::to_string(kMaxDims) + ")");
    t.shape.resize(n_dims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = read<uint64_t>("dimension");
      if (ne > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, int64_t(ne), &numel))
        fail("dimensions overflow 64 bits");
      t.shape[n_dims - 1 - d] = static_cast<int64_t>(ne);  // GGUF lists innermost first
    }
    t.ggml_type = read<uint32_t>("tensor type");
    t.offset = read<uint64_t>("tensor offset");  // relative to the data section until placed
    if (const GgmlType* gt = find_ggml_type(t.ggml_type)) {
      const int64_t inner = t.shape.back();
      if (inner % gt->block_size != 0)
        fail("row length " + std::to_string(inner) + " is not a multiple of the block size " +
             std::to_string(gt->block_size) + " of type " + std::to_string(t.ggml_type));
      const int64_t rows = inner == 0 ? 0 : numel / inner;
      int64_t row_bytes = 0, nbytes = 0;
      if (__builtin_mul_overflow(inner / gt->block_size, gt->block_bytes, &row_bytes) ||
          __builtin_mul_overflow(rows, row_bytes, &nbytes))
        fail("byte size overflows 64 bits");
      // A tensor view's strides multiply every dimension, 0s aside: with a 0 among them numel
      // is 0, yet [0, 2^41, 2^23] f32 must be refused too.
      int64_t extent = std::max<int64_t>(row_bytes, 1);
      for (size_t d = 0; d + 1 < t.shape.size(); ++d)
        if (__builtin_mul_overflow(extent, std::max<int64_t>(t.shape[d], 1), &extent))
          fail("byte size overflows 64 bits");
      t.nbytes = static_cast<uint64_t>(nbytes);
      t.supported = gt->dtype.has_value();
      if (gt->dtype) t.dtype = *gt->dtype;
    }
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
  }

  void place_tensors() {
    ctx_ = "tensor data";
    const uint64_t align = f_.alignment_;
    const uint64_t data_start = (pos_ + align - 1) / align * align;  // pos_ <= size_ < 2^63
    if (f_.tensors_.empty()) return;
    if (data_start > size_)
      fail("data section starts at byte " + std::to_string(data_start) + ", past the end");
    const uint64_t data_size = size_ - data_start;
    for (GgufFile::TensorInfo& t : f_.tensors_) {
      ctx_ = "tensor '" + t.name + "'";
      if (t.offset % align != 0)
        fail("offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(align));
      if (t.offset > data_size || t.nbytes > data_size - t.offset)
        fail("data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
             ") lies outside the data section of " + std::to_string(data_size) + " bytes");
      t.offset += data_start;
    }
  }

  GgufFile& f_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string ctx_;
};

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->file_ = MappedFile::open(path);
  GgufParser(*f).parse();
  return f;
}

void GgufFile::fail(const std::string& msg) const { throw Error(path() + ": " + msg); }

const GgufFile::TensorInfo* GgufFile::find(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::tensor(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("no tensor named '" + std::string(name) + "'");
  if (!t->supported)
    fail("tensor '" + t->name + "' has GGML type " + std::to_string(t->ggml_type) +
         ", which this reader does not support");
  return view_bytes(file_, file_->data() + t->offset, t->shape, t->dtype);
}

}  // namespace vllm
