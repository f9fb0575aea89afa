// Weight access by Hugging Face tensor name, whatever the file format, and the Linear layer
// that owns one or more projections fused along the output dim.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace vllm {

class GgufFile;
class SafetensorsModel;

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor stored under the HF name `name` (e.g. "model.layers.0.mlp.up_proj.weight").
  virtual std::optional<Tensor> get(const std::string& name) const = 0;
  Tensor require(const std::string& name) const;
  virtual std::string describe() const = 0;
};

std::unique_ptr<WeightSource> make_safetensors_source(std::shared_ptr<SafetensorsModel> st);
// GGUF tensors under their HF names (llama.cpp's naming translated).
std::unique_ptr<WeightSource> make_gguf_source(std::shared_ptr<GgufFile> gguf);

// A contiguous f32 copy (norm weights and biases are used in f32).
Tensor to_f32(const Tensor& t);

// y = x @ W^T (+ b), W the row-wise concatenation of `parts` when their dtypes allow it.
struct Linear {
  std::vector<Tensor> parts;  // [out_i, in]; one entry once fused
  Tensor bias;                // [out] f32, or undefined
  int64_t out_features = 0;

  static Linear fused(const std::vector<Tensor>& weights, const std::vector<Tensor>& biases);
  void operator()(const Tensor& x, Tensor& out) const;
};

}  // namespace vllm
