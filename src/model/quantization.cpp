#include "model/quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "loader/safetensors.h"
#include "runtime/cpu/quant.h"
#include "runtime/thread_pool.h"
#include "util/check.h"

namespace vllm {
namespace {

using json = nlohmann::json;

constexpr float kFp8Max = 448.0f;

[[noreturn]] void refuse(const std::string& msg) {
  throw Error("quantization_config: " + msg);
}

// compressed-tensors: every config group must quantize weights to 8-bit floats, symmetric,
// as a tensor, channel or block strategy (the scale tensor's shape then says which).
void check_compressed_tensors(const json& q) {
  const std::string format = q.value("format", "");
  if (format != "float-quantized" && format != "naive-quantized")
    refuse("compressed-tensors format '" + format +
           "' is not supported (supported: float-quantized, naive-quantized with 8-bit float "
           "weights)");
  const json groups = q.value("config_groups", json::object());
  if (!groups.is_object() || groups.empty()) refuse("compressed-tensors without config_groups");
  for (const auto& [name, g] : groups.items()) {
    const json w = g.is_object() ? g.value("weights", json()) : json();
    if (!w.is_object()) refuse("config_groups." + name + ".weights is missing");
    const std::string type = w.value("type", "");
    const int bits = w.value("num_bits", 0);
    const std::string strategy = w.value("strategy", "");
    if (type != "float" || bits != 8)
      refuse("config_groups." + name + ".weights: " + std::to_string(bits) + "-bit " + type +
             " weights are not supported (supported: 8-bit float)");
    if (strategy != "tensor" && strategy != "channel" && strategy != "block")
      refuse("config_groups." + name + ".weights.strategy '" + strategy +
             "' is not supported (supported: tensor, channel, block)");
    if (!w.value("symmetric", true)) refuse("config_groups." + name + ": asymmetric weights");
  }
}

// The scales stored under `name` in f32, with their shape (a 0-d scalar has shape {}).
struct Scales {
  std::vector<float> values;
  std::vector<int64_t> shape;
};

Scales read_scales(const SafetensorsModel& st, const std::string& name) {
  const SafetensorsModel::TensorInfo* info = st.find(name);
  VLLM_CHECK(info, "no scale tensor ", name);
  const std::span<const uint8_t> bytes = st.bytes(name);
  Scales s{{}, info->shape};
  int64_t n = 1;
  for (int64_t d : info->shape) n *= d;
  s.values.resize(static_cast<size_t>(n));
  if (info->dtype == "F32") {
    std::memcpy(s.values.data(), bytes.data(), size_t(n) * 4);
  } else if (info->dtype == "BF16" || info->dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      s.values[size_t(i)] = info->dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
    }
  } else {
    throw Error(st.file_of(name) + ": scale tensor '" + name + "' has dtype " + info->dtype +
                " (supported: F32, BF16, F16)");
  }
  return s;
}

// [N, K] FP8_E4M3 from e4m3 bytes and scale(n, k), the scale of element (n, k), constant over
// each aligned run of 32 columns. K not a multiple of 32: the same values as f32.
template <typename ScaleAt>
Tensor assemble_fp8(const uint8_t* q, int64_t N, int64_t K, const ScaleAt& scale) {
  if (K % kFp8Block != 0) {
    Tensor out = Tensor::empty({N, K}, DType::F32);
    float* o = out.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) o[n * K + k] = fp8_e4m3_to_f32(q[n * K + k]) * scale(n, k);
    return out;
  }
  Tensor out = Tensor::empty({N, K}, DType::FP8_E4M3);
  const int64_t nb = K / kFp8Block;
  for (int64_t n = 0; n < N; ++n) {
    auto* blocks = reinterpret_cast<BlockFp8E4M3*>(out.row(n));
    for (int64_t b = 0; b < nb; ++b) {
      blocks[b].d = scale(n, b * kFp8Block);
      std::memcpy(blocks[b].qs, q + n * K + b * kFp8Block, kFp8Block);
    }
  }
  return out;
}

class QuantizedSource final : public WeightSource {
 public:
  QuantizedSource(std::shared_ptr<SafetensorsModel> st, QuantConfig q)
      : st_(std::move(st)), q_(std::move(q)) {}

  std::optional<Tensor> get(const std::string& name) const override {
    const SafetensorsModel::TensorInfo* info = st_->find(name);
    if (!info) return std::nullopt;
    if (info->dtype == "F8_E4M3") return fp8_weight(name, *info);
    if (info->dtype.starts_with("F8_"))
      throw Error(st_->file_of(name) + ": tensor '" + name + "' has dtype " + info->dtype +
                  " (supported float8: F8_E4M3)");
    return st_->tensor(name);  // --quantization fp8: the decoder quantizes its projections
  }
  std::string describe() const override { return "safetensors checkpoint (" + q_.describe() + ")"; }

 private:
  Tensor fp8_weight(const std::string& name, const SafetensorsModel::TensorInfo& info) const {
    const std::string& file = st_->file_of(name);
    if (q_.method != QuantConfig::Method::kFp8Checkpoint)
      throw Error(file + ": tensor '" + name + "' is F8_E4M3 but config.json has no FP8 "
                  "quantization_config");
    if (info.shape.size() != 2)
      throw Error(file + ": FP8 tensor '" + name + "' has " + std::to_string(info.shape.size()) +
                  " dimensions (supported: 2)");
    const int64_t N = info.shape[0], K = info.shape[1];
    const std::string scale_name = name + q_.scale_suffix;
    if (!st_->has(scale_name))
      throw Error(file + ": FP8 tensor '" + name + "' has no scale tensor '" + scale_name + "'");
    const Scales s = read_scales(*st_, scale_name);
    const uint8_t* q = st_->bytes(name).data();
    const auto bad_shape = [&](const std::string& expected) {
      std::string got;
      for (int64_t d : s.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return Error(file + ": scale '" + scale_name + "' of [" + std::to_string(N) + ", " +
                   std::to_string(K) + "] weight has shape [" + got + "], expected " + expected);
    };
    if (q_.block_rows > 0) {
      const int64_t br = q_.block_rows, bc = q_.block_cols;
      const int64_t rows = (N + br - 1) / br, cols = (K + bc - 1) / bc;
      if (s.shape != std::vector<int64_t>{rows, cols})
        throw bad_shape("[" + std::to_string(rows) + ", " + std::to_string(cols) + "] (" +
                        std::to_string(br) + "x" + std::to_string(bc) + " blocks)");
      return assemble_fp8(q, N, K, [&](int64_t n, int64_t k) {
        return s.values[size_t(n / br * cols + k / bc)];
      });
    }
    if (s.values.size() == 1)
      return assemble_fp8(q, N, K, [&](int64_t, int64_t) { return s.values[0]; });
    if (int64_t(s.values.size()) == N && s.shape.size() <= 2 && s.shape[0] == N)
      return assemble_fp8(q, N, K, [&](int64_t n, int64_t) { return s.values[size_t(n)]; });
    throw bad_shape("one scale ([] or [1]) or one per output row ([" + std::to_string(N) +
                    "] or [" + std::to_string(N) + ", 1])");
  }

  std::shared_ptr<SafetensorsModel> st_;
  QuantConfig q_;
};

}  // namespace

std::string QuantConfig::describe() const {
  switch (method) {
    case Method::kNone: return "unquantized";
    case Method::kFp8AtLoad: return "fp8 quantized at load, per-tensor scales";
    case Method::kFp8Checkpoint:
      return block_rows > 0 ? "fp8 checkpoint, " + std::to_string(block_rows) + "x" +
                                  std::to_string(block_cols) + " block scales"
                            : "fp8 checkpoint";
  }
  return "";
}

QuantConfig parse_quant_config(const json& hf_config, const std::string& cli) {
  if (!cli.empty() && cli != "none" && cli != "fp8")
    throw Error("--quantization " + cli + ": supported are fp8 and none");
  QuantConfig out;
  const auto qit = hf_config.find("quantization_config");
  if (qit == hf_config.end() || qit->is_null()) {
    if (cli == "fp8") out.method = QuantConfig::Method::kFp8AtLoad;
    return out;
  }
  const json& q = *qit;
  if (!q.is_object()) refuse("not an object");
  const std::string method = q.value("quant_method", "");
  if (method == "fp8") {
    out.method = QuantConfig::Method::kFp8Checkpoint;
    const std::string act = q.value("activation_scheme", "dynamic");
    if (act != "dynamic" && act != "static")
      refuse("activation_scheme '" + act + "' (supported: dynamic, static)");
    const json block = q.value("weight_block_size", json());
    if (!block.is_null()) {
      if (!block.is_array() || block.size() != 2 || !block[0].is_number_integer() ||
          !block[1].is_number_integer() || block[0].get<int64_t>() <= 0 ||
          block[1].get<int64_t>() <= 0)
        refuse("weight_block_size must be two positive integers, got " + block.dump());
      out.block_rows = block[0].get<int64_t>();
      out.block_cols = block[1].get<int64_t>();
      if (out.block_cols % kFp8Block != 0)
        refuse("weight_block_size " + block.dump() + ": columns per block must be a multiple of " +
               std::to_string(kFp8Block));
      out.scale_suffix = "_scale_inv";
    } else {
      out.scale_suffix = "_scale";
    }
  } else if (method == "compressed-tensors") {
    check_compressed_tensors(q);
    out.method = QuantConfig::Method::kFp8Checkpoint;
    out.scale_suffix = "_scale";
    // Block strategies name their block shape per group; one shape for the model is what the
    // FP8 checkpoints carry.
    for (const auto& [name, g] : q["config_groups"].items()) {
      const json& w = g["weights"];
      if (w.value("strategy", "") != "block") continue;
      const json bs = w.value("block_structure", json());
      if (!bs.is_array() || bs.size() != 2 || !bs[0].is_number_integer() ||
          !bs[1].is_number_integer() || bs[0].get<int64_t>() <= 0 || bs[1].get<int64_t>() <= 0)
        refuse("config_groups." + name + ".weights.block_structure must be two positive "
               "integers");
      if (out.block_rows > 0 && (out.block_rows != bs[0].get<int64_t>() ||
                                 out.block_cols != bs[1].get<int64_t>()))
        refuse("config_groups with different block_structure");
      out.block_rows = bs[0].get<int64_t>();
      out.block_cols = bs[1].get<int64_t>();
      if (out.block_cols % kFp8Block != 0)
        refuse("block_structure columns must be a multiple of " + std::to_string(kFp8Block));
    }
  } else {
    refuse("quant_method '" + method +
           "' is not supported (supported: fp8, compressed-tensors with 8-bit float weights)");
  }
  return out;
}

std::unique_ptr<WeightSource> make_quantized_source(std::shared_ptr<SafetensorsModel> st,
                                                    const QuantConfig& q) {
  return std::make_unique<QuantizedSource>(std::move(st), q);
}

DType fp8_quantized_dtype(int64_t k) {
  return k % kFp8Block == 0 ? DType::FP8_E4M3 : DType::F32;
}

Tensor quantize_fp8_per_tensor(const Tensor& w) {
  VLLM_CHECK(w.ndim() == 2 && w.is_contiguous(), "quantize_fp8_per_tensor of ", w.shape_str());
  const int64_t N = w.size(0), K = w.size(1);
  // Rows on the CPU pool's threads, each dequantized into a per-chunk buffer twice (for the
  // amax, then for the bytes) rather than the whole tensor once: an 8B model has 7 G elements.
  std::vector<float> row_amax(static_cast<size_t>(N));
  cpu_pool().parallel_for(N, [&](int64_t begin, int64_t end) {
    std::vector<float> r(static_cast<size_t>(K));
    for (int64_t n = begin; n < end; ++n) {
      cpu::dequantize_row(w.dtype(), w.row(n), r.data(), K);
      float m = 0;
      for (float v : r) m = std::max(m, std::fabs(v));
      row_amax[size_t(n)] = m;
    }
  });
  const float amax = N > 0 ? *std::max_element(row_amax.begin(), row_amax.end()) : 0.0f;
  const float scale = amax > 0 ? amax / kFp8Max : 1.0f;
  const auto quantize_rows = [&](const std::function<void(int64_t, const uint8_t*)>& put) {
    cpu_pool().parallel_for(N, [&](int64_t begin, int64_t end) {
      std::vector<float> r(static_cast<size_t>(K));
      std::vector<uint8_t> q(static_cast<size_t>(K));
      for (int64_t n = begin; n < end; ++n) {
        cpu::dequantize_row(w.dtype(), w.row(n), r.data(), K);
        for (int64_t k = 0; k < K; ++k)
          q[size_t(k)] = f32_to_fp8_e4m3(std::clamp(r[size_t(k)] / scale, -kFp8Max, kFp8Max));
        put(n, q.data());
      }
    });
  };
  if (fp8_quantized_dtype(K) == DType::F32) {  // assemble_fp8's f32 values
    std::vector<uint8_t> all(static_cast<size_t>(N * K));
    quantize_rows([&](int64_t n, const uint8_t* q) {
      std::memcpy(&all[size_t(n * K)], q, size_t(K));
    });
    return assemble_fp8(all.data(), N, K, [&](int64_t, int64_t) { return scale; });
  }
  Tensor out = Tensor::empty({N, K}, DType::FP8_E4M3);
  quantize_rows([&](int64_t n, const uint8_t* q) {
    auto* blocks = reinterpret_cast<BlockFp8E4M3*>(out.row(n));
    for (int64_t b = 0; b < K / kFp8Block; ++b) {
      blocks[b].d = scale;
      std::memcpy(blocks[b].qs, q + b * kFp8Block, kFp8Block);
    }
  });
  return out;
}

}  // namespace vllm
