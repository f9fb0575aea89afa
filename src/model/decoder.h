// The shared decoder serving every supported architecture: embed -> N x (attention, MLP) ->
// norm -> LM head, over a paged KV cache. Each layer runs as its LayerSpec (model/config.h)
// says: norm placement, q/k norm, window, RoPE, activation; no family has its own forward.
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>

#include "model/config.h"
#include "model/forward_batch.h"
#include "model/weights.h"
#include "runtime/communicator.h"

namespace vllm {

// What DecoderModel::forward throws when its step is called off between two layers.
struct StepCancelled {};

class DecoderModel {
 public:
  // on_layer(done, total) is called after each decoder layer's weights are in place.
  using Progress = std::function<void(int, int)>;
  // Weights are placed on `device` (see place_weight); activations and the KV cache live there.
  // With a communicator of more than one rank this is that rank's shard (model/tensor_parallel.h:
  // `config` and `weights` already split): the row-parallel outputs are summed across ranks,
  // the LM head keeps the rank's share of the vocabulary and the logits are gathered whole.
  DecoderModel(ModelConfig config, const WeightSource& weights, const Progress& on_layer = {},
               Device device = kCpu, std::shared_ptr<Communicator> comm = nullptr);

  const ModelConfig& config() const { return config_; }
  Device device() const { return device_; }
  // The tensor-parallel group this shard belongs to (null with one rank).
  Communicator* communicator() const { return comm_.get(); }
  // The cache dtype: f16 for GGUF models (llama.cpp's default); otherwise f32 on the CPU and,
  // on CUDA, the weights' own type (bf16 / f16 / f32).
  DType kv_dtype() const { return kv_dtype_; }
  // Bytes behind one token of one block id: the layers of one group (see KvCacheGroup).
  int64_t kv_bytes_per_token() const;
  int64_t kv_bytes_per_layer_token() const;  // K + V of one layer
  // The KV cache groups (vLLM's): layers with the same window share one block table.
  const std::vector<KvCacheGroup>& kv_cache_groups() const { return groups_; }
  // What steps need on the device besides the weights and the KV cache, measured by running
  // dummy steps (vLLM's profile run) rather than estimated: the peak of live activation bytes of
  // a prefill step of max_tokens tokens with max_logits_rows logits rows, and the step arena the
  // decode graphs need for every bucket at contexts up to max_model_len (0 on the CPU or with
  // enforce_eager). The arena figure is also what forward() sizes the arena by. Zeros on the
  // CPU, whose KV budget is given (--kv-cache-memory).
  struct StepMemory {
    int64_t activation_bytes = 0;
    int64_t graph_arena_bytes = 0;
  };
  StepMemory profile_step_memory(int max_tokens, int max_logits_rows, int max_model_len,
                                 int block_size) const;
  KvCache allocate_kv_cache(int num_blocks, int block_size) const;
  // Logits [batch.logits_indices.size(), vocab_size] f32, on device(). On a GPU they are
  // valid until the next forward(). An eager step asks `cancelled` (if given) between layers
  // and throws StepCancelled when it says so: the step's KV writes are then incomplete, so
  // its requests must be dropped (the engine does that for a step whose requests all left).
  Tensor forward(const ForwardBatch& batch, KvCache& cache,
                 const std::function<bool()>& cancelled = {}) const;
  // Decode steps on a GPU replay CUDA graphs unless this is set (vLLM's --enforce-eager).
  void set_enforce_eager(bool eager) { enforce_eager_ = eager; }
  // vLLM's --kv-cache-dtype, before the cache is allocated: "auto" (the type chosen at load)
  // or "fp8" / "fp8_e4m3" (e4m3 with scale 1: a quarter of an f32 cache's bytes; CPU and
  // CUDA, not MLA). Throws naming the choice it cannot take.
  void set_kv_cache_dtype(const std::string& name);
  // Called for every routing choice of a mixture-of-experts layer with its margin: how far the
  // last expert kept (and, with group-limited routing, the last group kept) scored above the
  // first one left out, relative to its own score. Tests use it to tell a routing near tie
  // from a wrong answer.
  using RoutingObserver = std::function<void(int layer, int64_t row, float margin)>;
  void set_routing_observer(RoutingObserver observer) { routing_observer_ = std::move(observer); }
  // Logits [tokens.size(), vocab_size] of one fresh sequence at every position (own cache),
  // on the host.
  Tensor score(std::span<const int32_t> tokens) const;
  // The final-norm hidden states [batch.logits_indices.size(), hidden_size] f32 of the rows
  // forward() would give logits for: what the LM head reads, and what a pooling model takes
  // as the last token's embedding. CPU and one rank only.
  Tensor hidden_states(const ForwardBatch& batch, KvCache& cache) const;

 private:
  // One step's integer inputs where the kernels read them; slots and meta per KV cache group.
  struct StepInputs {
    Tensor ids, positions, rows_wanted;
    std::vector<Tensor> slots;
    std::vector<const AttentionMeta*> meta;
  };
  // Copies the batch's arrays into `buffer` (a new one when undefined) in one transfer; `meta`
  // receives each group's attention metadata with its device views.
  StepInputs upload_inputs(const ForwardBatch& batch, std::vector<AttentionMeta>& meta,
                           Tensor buffer) const;
  void check_batch(const ForwardBatch& batch, const KvCache& cache) const;
  StepInputs host_inputs(const ForwardBatch& batch) const;  // the batch's arrays, CPU views
  // The forward itself: kernels only, no host synchronisation, so a GPU can capture it
  // (captures pass no `cancelled`).
  Tensor compute(const StepInputs& in, KvCache& cache,
                 const std::function<bool()>& cancelled = {}) const;
  // Pure decode steps of up to kMaxGraphTokens sequences through captured graphs
  // (decoder_graphs.cpp); nullopt when the step does not qualify.
  std::optional<Tensor> forward_graph(const ForwardBatch& batch, KvCache& cache) const;
  struct Graph;
  // The arena every decode-graph bucket needs with block tables for max_model_len tokens,
  // measured by an eager run of each bucket (0 where graphs are off). Remembered for the
  // captures; forward_graph measures with max_position_embeddings if nothing did before, and
  // runs steps with wider tables than measured eagerly.
  int64_t measure_graph_arena(int max_model_len, int block_size, KvCache& cache) const;
  mutable int64_t graph_arena_bytes_ = -1;  // -1: not measured yet
  mutable int graph_arena_width_ = 0;         // the block-table width it was measured at

  // One decoder layer as its LayerSpec describes it. Norm weights are f32; a norm the layer's
  // placement does not have stays undefined.
  struct Layer {
    LayerSpec spec;
    RopeParams rope;
    Tensor attn_norm, attn_post_norm, ffn_norm, ffn_post_norm, q_norm, k_norm;
    // qkv: the projections of the normed input, fused; for MLA [q_proj or q_a_proj;
    // kv_a_proj_with_mqa].
    Linear qkv, o, gate_up, down;
    // MLA (AttentionType::kMla): q_b_proj after q_a_layernorm where there is a q-LoRA, the
    // latent's norm, and from kv_b_proj, W_UK^T [heads, kv_lora, nope] (folded into the query)
    // and W_UV [heads, v_head_dim, kv_lora] (applied to the attention output): f32 on the CPU,
    // the checkpoint's type on a GPU.
    Linear q_b;
    Tensor q_a_norm, kv_a_norm;
    Tensor uk_t, uv;
    // Mixture-of-experts layers (MlpType::kMoe) instead of gate_up and down: the router
    // [num_experts, hidden] (and its score correction bias, f32), the experts' fused gate/up
    // and down (on the CPU one Linear each, their stored types kept; on a GPU stacked,
    // [E, 2 * F, hidden] and [E, hidden, F]), and the shared experts' MLP where there is one
    // (on a GPU, where they are n whole experts' widths, stacked after the routed ones).
    Linear router;
    Tensor router_bias;
    std::vector<Linear> expert_gate_up, expert_down;  // CPU
    Tensor stacked_gate_up, stacked_down;              // GPU
    int shared_in_stack = 0;                           // n
    Linear shared_gate_up, shared_down;
  };
  Layer load_layer(int i, const WeightSource& w, HostWeightArena& arena) const;
  // An RMSNorm weight of `size` entries in f32 on the device, with the config's offset added.
  Tensor norm_weight(const WeightSource& w, const std::string& name, int64_t size) const;
  RopeParams rope_params(const LayerSpec& spec, const WeightSource& w) const;
  // The attention and MLP blocks of compute(): each adds its output into `residual`.
  struct Scratch;
  // Every layer of compute() over scratch `s`; returns the views of the wanted rows, whose
  // `residual` holds their stream after the last layer (before the final norm).
  Scratch run_layers(const StepInputs& in, KvCache& cache, Scratch& s,
                     const std::function<bool()>& cancelled = {}) const;
  void attention_block(const Layer& L, int index, const StepInputs& in, KvCache& cache,
                       Scratch& s) const;
  void mla_attention_block(const Layer& L, int index, const StepInputs& in, KvCache& cache,
                           Scratch& s) const;
  void load_mla(Layer& L, const std::string& prefix, const WeightSource& w) const;
  // Each token's experts and their weights, grouped by expert: rows[e], weights[e].
  void route(int layer, const Layer& L, const Tensor& scores,
             std::vector<std::vector<int32_t>>& rows,
             std::vector<std::vector<float>>& weights) const;
  void mlp_block(int layer, const Layer& L, Scratch& s) const;
  void embed(const Tensor& ids, Tensor& out) const;
  void moe_block(int layer, const Layer& L, Scratch& s) const;
  void mla_attend(const Tensor& rows, int64_t v_dim, const AttentionMeta& a, int window,
                  Scratch& s) const;
  static constexpr int kMlaPrefillRows = 16;
  // The routed experts' sum for each token of h into out: on the host's kernels, or all on the
  // device (grouped kernels over the experts, nothing brought to the host, so graphs can hold
  // the layer; `scores` the router's output for h).
  void moe_experts_host(int layer, const Layer& L, const Tensor& h, Tensor& out) const;
  void moe_experts_device(int layer, const Layer& L, const Tensor& h, const Tensor& scores,
                          const Tensor& extra, bool accumulate, Tensor& out) const;
  // The most tokens a decode step may have to be captured in a graph (0: none).
  int max_graph_tokens() const;
  // residual += post_norm(out) * residual_multiplier, where out = lin(x); scratch `product`.
  void add_block_output(const Linear& lin, const Tensor& x, const Tensor& post_norm,
                        Tensor& product, Tensor& residual) const;

  void make_kv_cache_groups();
  // MLA models cache one latent row per token and layer (every layer is MLA or none is).
  bool is_mla() const { return config_.layers[0].attention == AttentionType::kMla; }
  bool has_moe() const {
    return std::any_of(config_.layers.begin(), config_.layers.end(),
                       [](const LayerSpec& l) { return l.mlp == MlpType::kMoe; });
  }

  ModelConfig config_;
  Device device_;
  WeightPlacement placement_;    // device_ and config_.dtype
  WeightPlacement projections_;  // placement_ with config_.quantize_fp8: the *_proj weights
  DType kv_dtype_ = DType::F32;
  std::vector<KvCacheGroup> groups_;
  std::vector<int> layer_group_, layer_slot_;  // per layer: its group, its place there
  int group_size_ = 0;                         // layers per group (the largest)
  Tensor embed_tokens;  // [vocab or this rank's share of it, hidden], stored dtype
  Tensor final_norm;
  Tensor lm_head;       // [vocab or this rank's share of it, hidden]; the embedding when tied
  std::shared_ptr<Communicator> comm_;  // tensor parallelism; null with one rank
  std::vector<Layer> layers_;
  bool enforce_eager_ = false;
  RoutingObserver routing_observer_;
};

}  // namespace vllm
