// Quantized weights of Hugging Face checkpoints: FP8 checkpoints (`quantization_config` with
// quant_method "fp8", as DeepSeek-V3 and Qwen3-FP8 ship, or "compressed-tensors" with 8-bit
// float weights, as the FP8 checkpoints vLLM serves), and `--quantization fp8`, which quantizes
// a float checkpoint's linear weights at load (the decoder does, through
// WeightPlacement::quantize_fp8: on the host with quantize_fp8_per_tensor below, or on the GPU).
// Either way the model computes with FP8_E4M3 tensors (runtime/dtype.h): e4m3 bytes with their
// scales, multiplied on the CPU as f32 weights (activations are not quantized); a GPU keeps
// those with one scale a row as FP8 and widens the rest to the compute type.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/weights.h"

namespace vllm {

class SafetensorsModel;

struct QuantConfig {
  enum class Method : uint8_t {
    kNone,
    kFp8Checkpoint,  // F8_E4M3 weights with weight_scale / weight_scale_inv tensors
    kFp8AtLoad,      // --quantization fp8 over float weights
  };
  Method method = Method::kNone;
  // kFp8Checkpoint: what the weight's name takes to name its scale ("_scale_inv":
  // x.weight_scale_inv for quant_method fp8 with weight_block_size, else "_scale"), and the
  // block shape
  // [rows, cols] of 2-D block scales (0: per-tensor or per-output-channel, told by the
  // scale's shape).
  std::string scale_suffix;
  int64_t block_rows = 0, block_cols = 0;
  std::string describe() const;  // for logs, e.g. "fp8 checkpoint, 128x128 block scales"
};

// The quantization a model loads with: the checkpoint's `quantization_config` (absent: none)
// and --quantization ("" or "none": the checkpoint's; "fp8"). Throws vllm::Error naming the
// field for a method or scheme this engine does not run, rather than reading quantized
// weights as something else.
QuantConfig parse_quant_config(const nlohmann::json& hf_config, const std::string& cli);

// The checkpoint's tensors as the model uses them under `q`: an FP8 checkpoint's F8_E4M3
// weights with their scales as FP8_E4M3; everything else as stored.
std::unique_ptr<WeightSource> make_quantized_source(std::shared_ptr<SafetensorsModel> st,
                                                    const QuantConfig& q);

// `w` ([N, K], any float type) as FP8_E4M3 with one per-tensor scale, amax / 448, each element
// clamped to +-448 after division by it and rounded to nearest even (vLLM's dynamic per-tensor
// FP8 weight quantization). An all-zero tensor gets scale 1.
Tensor quantize_fp8_per_tensor(const Tensor& w);
// The type quantize_fp8_per_tensor gives rows of k elements: FP8_E4M3 where k is a whole
// number of 32-element blocks, else F32 (the quantized values widened).
DType fp8_quantized_dtype(int64_t k);

}  // namespace vllm
