// BertModel's forward: embeddings + LayerNorm, post-LayerNorm encoder layers with bidirectional
// attention per sequence, GELU (erf), then pooling and L2 normalisation. The sequences of a batch
// are packed without padding ([num_tokens, hidden]), so a token's vector depends on its own
// sequence only. Dense layers run through bert_gemm (packed f32 panels); the rest is CPU code.
#include <cmath>
#include <cstring>

#include "model/bert.h"
#include "model/bert_attention.h"
#include "model/bert_layer.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"
#include "util/check.h"

namespace vllm {
namespace {

// x[r] = LayerNorm(x[r] + add[r]) for every row (add may be null), statistics in double.
void add_layer_norm(Tensor& x, const Tensor* add, const std::vector<float>& weight,
                    const std::vector<float>& bias, float eps) {
  const int64_t rows = x.size(0), h = x.size(1);
  cpu_pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* v = reinterpret_cast<float*>(x.row(r));
      if (add != nullptr) {
        const float* a = reinterpret_cast<const float*>(add->row(r));
        for (int64_t i = 0; i < h; ++i) v[i] += a[i];
      }
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < h; ++i) sum += v[i];
      const double mean = sum / static_cast<double>(h);
      for (int64_t i = 0; i < h; ++i) sq += (v[i] - mean) * (v[i] - mean);
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(h) + eps);
      for (int64_t i = 0; i < h; ++i)
        v[i] = static_cast<float>((v[i] - mean) * inv) * weight[i] + bias[i];
    }
  });
}

void gelu_erf(Tensor& x) {
  const int64_t rows = x.size(0), n = x.size(1);
  cpu_pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* v = reinterpret_cast<float*>(x.row(r));
      for (int64_t i = 0; i < n; ++i)
        v[i] = 0.5f * v[i] * (1.0f + std::erf(v[i] * static_cast<float>(M_SQRT1_2)));
    }
  });
}

}  // namespace

BertModel::~BertModel() = default;

void BertModel::encoder_layer(const Layer& l, const std::vector<int32_t>& starts,
                              Tensor& x) const {
  const int64_t T = x.size(0), H = config_.hidden_size, I = config_.intermediate_size;
  Tensor qkv = Tensor::empty({T, 3 * H}, DType::F32);
  bert_gemm::linear(x, l.qkv, qkv);
  Tensor ctx = Tensor::empty({T, H}, DType::F32);
  bert_attention::attention(qkv, starts, config_.num_heads, ctx);
  Tensor proj = Tensor::empty({T, H}, DType::F32);
  bert_gemm::linear(ctx, l.attn_out, proj);
  add_layer_norm(x, &proj, l.attn_ln_weight, l.attn_ln_bias, config_.layer_norm_eps);
  Tensor up = Tensor::empty({T, I}, DType::F32);
  bert_gemm::linear(x, l.up, up);
  gelu_erf(up);
  bert_gemm::linear(up, l.down, proj);
  add_layer_norm(x, &proj, l.out_ln_weight, l.out_ln_bias, config_.layer_norm_eps);
}

std::vector<float> BertModel::embed(const std::vector<std::vector<int32_t>>& seqs) const {
  const int64_t H = config_.hidden_size;
  std::vector<int32_t> starts = {0};
  for (const auto& s : seqs) {
    VLLM_CHECK(!s.empty() && static_cast<int>(s.size()) <= config_.max_position_embeddings,
               "BERT sequence of ", s.size(), " tokens");
    for (int32_t id : s) VLLM_CHECK(id >= 0 && id < config_.vocab_size, "token id ", id);
    starts.push_back(starts.back() + static_cast<int32_t>(s.size()));
  }
  const int64_t T = starts.back();
  std::vector<float> out(static_cast<size_t>(seqs.size() * H));
  if (T == 0) return out;

  Tensor ids = Tensor::empty({T}, DType::I32);
  for (size_t s = 0; s < seqs.size(); ++s)
    std::memcpy(ids.data<int32_t>() + starts[s], seqs[s].data(), seqs[s].size() * sizeof(int32_t));
  Tensor x = Tensor::empty({T, H}, DType::F32);
  embedding(ids, word_embeddings_, x);
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int32_t pos = 0; pos < starts[s + 1] - starts[s]; ++pos) {
      float* v = reinterpret_cast<float*>(x.row(starts[s] + pos));
      const float* p = position_embeddings_.data() + static_cast<int64_t>(pos) * H;
      for (int64_t i = 0; i < H; ++i) v[i] = v[i] + token_type0_[i] + p[i];
    }
  add_layer_norm(x, nullptr, embed_ln_weight_, embed_ln_bias_, config_.layer_norm_eps);
  for (const Layer& l : layers_) encoder_layer(l, starts, x);

  for (size_t s = 0; s < seqs.size(); ++s) {
    float* o = out.data() + s * H;
    const int32_t begin = starts[s], end = starts[s + 1];
    if (pooling_.mode == PoolingConfig::Mode::kCls) {
      std::memcpy(o, x.row(begin), static_cast<size_t>(H) * sizeof(float));
    } else {
      for (int32_t t = begin; t < end; ++t) {
        const float* v = reinterpret_cast<const float*>(x.row(t));
        for (int64_t i = 0; i < H; ++i) o[i] += v[i];
      }
      for (int64_t i = 0; i < H; ++i) o[i] /= static_cast<float>(end - begin);
    }
  }
  return out;
}

std::string BertModel::describe() const {
  return std::string("BertModel (embedding, ") +
         (pooling_.mode == PoolingConfig::Mode::kMean ? "mean" : "CLS") + " pooling" +
         (pooling_.normalize ? ", normalized)" : ")");
}

}  // namespace vllm
