#include "model/tensor_parallel.h"

#include <algorithm>
#include <string>

#include "util/check.h"

namespace vllm {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string tp_name(TpRank tp) { return "--tensor-parallel-size " + std::to_string(tp.size); }

// The KV heads rank tp.rank keeps: its share when there are at least as many as ranks, else
// the one its query heads read (every num_ranks / kv ranks share one).
Share kv_heads_of(int kv, TpRank tp) {
  if (kv >= tp.size) return share_of(kv, tp);
  return {int64_t(tp.rank) * kv / tp.size, 1};
}

enum class Dim { kNone, kRows, kColumns };
struct Split {
  Dim dim = Dim::kNone;
  Share units;             // of the dimension's units
  int64_t unit_size = 1;   // rows or columns per unit (head_dim for heads)
};

Tensor take_rows(const Tensor& t, int64_t begin, int64_t length) {
  return t.narrow(begin, length);
}

Tensor take_columns(const Tensor& t, int64_t begin, int64_t length, const std::string& name) {
  VLLM_CHECK(t.ndim() == 2, name, ": a row-parallel weight must be 2-D, got ", t.shape_str());
  const int64_t block = dtype_info(t.dtype()).block_size;
  if (begin % block != 0 || length % block != 0)
    throw Error(name + " (" + std::string(dtype_name(t.dtype())) + ", blocks of " +
                std::to_string(block) + ") cannot be split at column " + std::to_string(begin) +
                " for tensor parallelism: the split must fall on a block boundary");
  return copy_columns(t, begin, length);
}

class ShardSource final : public WeightSource {
 public:
  ShardSource(const WeightSource& full, const ModelConfig& config, TpRank tp)
      : full_(full), config_(config), tp_(tp) {}

  std::optional<Tensor> get(const std::string& name) const override {
    std::optional<Tensor> t = full_.get(name);
    if (!t || tp_.size == 1) return t;
    const Split s = split_of(name, *t);
    const int64_t begin = s.units.begin * s.unit_size, length = s.units.length * s.unit_size;
    switch (s.dim) {
      case Dim::kRows: return take_rows(*t, begin, length);
      case Dim::kColumns: return take_columns(*t, begin, length, name);
      case Dim::kNone: break;
    }
    return t;
  }

  std::string describe() const override {
    return full_.describe() + " (tensor-parallel rank " + std::to_string(tp_.rank) + " of " +
           std::to_string(tp_.size) + ")";
  }

 private:
  Split split_of(const std::string& name, const Tensor& t) const {
    const int heads = config_.num_heads;
    const auto by_heads = [&](Dim dim, int n, Share units) {
      const int64_t extent = dim == Dim::kRows ? t.size(0) : t.size(1);
      VLLM_CHECK(extent % n == 0, name, " ", t.shape_str(), " does not split into ", n, " heads");
      return Split{dim, units, extent / n};
    };
    for (const char* fused : {".qkv_proj.weight", ".gate_up_proj.weight", ".k_b_proj.weight",
                              ".v_b_proj.weight"})
      if (ends_with(name, fused))
        throw Error(name + ": fused or pre-split projections are not split for tensor "
                    "parallelism yet (use --tensor-parallel-size 1)");
    for (const char* q : {".self_attn.q_proj.", ".self_attn.q_b_proj.", ".self_attn.kv_b_proj."})
      if (name.find(q) != std::string::npos) return by_heads(Dim::kRows, heads, share_of(heads, tp_));
    for (const char* kv : {".self_attn.k_proj.", ".self_attn.v_proj."})
      if (name.find(kv) != std::string::npos)
        return by_heads(Dim::kRows, config_.num_kv_heads, kv_heads_of(config_.num_kv_heads, tp_));
    if (ends_with(name, ".self_attn.o_proj.weight"))
      return by_heads(Dim::kColumns, heads, share_of(heads, tp_));
    if (ends_with(name, ".gate_proj.weight") || ends_with(name, ".up_proj.weight"))
      return {Dim::kRows, share_of(t.size(0), tp_), 1};
    if (ends_with(name, ".down_proj.weight"))
      return {Dim::kColumns, share_of(t.size(1), tp_), 1};
    return {};
  }

  const WeightSource& full_;
  const ModelConfig& config_;
  TpRank tp_;
};

}  // namespace

Share share_of(int64_t n, TpRank tp) {
  const int64_t base = n / tp.size, extra = n % tp.size;
  return {tp.rank * base + std::min<int64_t>(tp.rank, extra), base + (tp.rank < extra ? 1 : 0)};
}

ModelConfig shard_config(const ModelConfig& full, TpRank tp) {
  VLLM_CHECK(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size, "tensor-parallel rank ", tp.rank,
             " of ", tp.size);
  if (tp.size == 1) return full;
  const auto divides = [&](int64_t value, const char* field) {
    if (value % tp.size != 0)
      throw Error(tp_name(tp) + " does not divide " + field + " (" + std::to_string(value) + ")");
  };
  ModelConfig c = full;
  divides(full.num_heads, "num_attention_heads");
  if (full.num_kv_heads >= tp.size) divides(full.num_kv_heads, "num_key_value_heads");
  else if (tp.size % full.num_kv_heads != 0)
    throw Error(tp_name(tp) + " is not a multiple of num_key_value_heads (" +
                std::to_string(full.num_kv_heads) + ") below it, so KV heads cannot be replicated");
  bool dense = false, moe = false;
  for (const LayerSpec& l : full.layers) {
    if (l.qk_norm == QkNorm::kWhole)
      throw Error("tensor parallelism: the q/k norm over the whole projection (" + full.architecture +
                  ") is not split yet (use --tensor-parallel-size 1)");
    (l.mlp == MlpType::kMoe ? moe : dense) = true;
  }
  if (dense) divides(full.intermediate_size, "intermediate_size");
  if (moe) {
    divides(full.moe.intermediate_size, "moe_intermediate_size");
    divides(full.moe.shared_intermediate_size, "the shared experts' intermediate size");
  }
  c.num_heads = full.num_heads / tp.size;
  c.num_kv_heads = std::max(1, full.num_kv_heads / tp.size);
  c.intermediate_size = full.intermediate_size / tp.size;
  c.moe.intermediate_size = full.moe.intermediate_size / tp.size;
  c.moe.shared_intermediate_size = full.moe.shared_intermediate_size / tp.size;
  return c;
}

std::unique_ptr<WeightSource> make_shard_source(const WeightSource& full,
                                                const ModelConfig& config, TpRank tp) {
  return std::make_unique<ShardSource>(full, config, tp);
}

}  // namespace vllm
