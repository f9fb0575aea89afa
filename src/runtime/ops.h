// Op front-ends: free functions with explicit outputs. Each validates shapes, dtypes and
// devices once, then dispatches to the backend of its output's device.
#pragma once
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace vllm {

// The CPU's float summation order where llama.cpp's depends on the shape of a step (the
// attention products of one query row or of several, the K-quant kernel by activation rows).
// kBatchInvariant, the default: every token takes the order of a decode step, so its logits do
// not depend on batching, chunked prefill or preemption. kLlamaCpp: llama.cpp's own, to give
// its logits bit for bit under its schedule (a prompt in one step, then a token per step).
// Process-wide; set it before a model runs. CUDA kernels do not look at it.
enum class CpuOrder { kBatchInvariant, kLlamaCpp };
void set_cpu_order(CpuOrder order);
CpuOrder cpu_order();
// "batch-invariant" or "llamacpp" (the CLI's --cpu-order); throws vllm::Error on anything else.
CpuOrder parse_cpu_order(const std::string& name);

// Rotary embedding. inv_freq holds one frequency per rotated pair (rotary_dim / 2 entries),
// already adjusted for llama3 / linear / YaRN scaling; mscale multiplies cos and sin (YaRN).
struct RopeParams {
  std::vector<float> inv_freq;
  int head_dim = 0;
  int rotary_dim = 0;  // leading dims of each head that rotate (<= head_dim)
  bool neox = true;    // NeoX: pairs (i, i + rotary_dim/2); GPT-J: pairs (2i, 2i+1)
  float mscale = 1.0f;
  // GGUF models follow ggml's arithmetic instead: theta_i = p * theta_scale^i built by repeated
  // f32 multiplication, then * freq_scale / freq_factors[i]. It differs from p * inv_freq[i]
  // in the last bit, which a model can amplify into visible logit changes.
  bool ggml_theta = false;
  float theta_scale = 0.0f;
  float freq_scale = 1.0f;
  std::vector<float> freq_factors;  // empty, or one divisor per pair
  // ggml's YaRN (GGUF files; the CPU only): pair i turns by theta_i * (1 - r_i) + freq_scale *
  // theta_i * r_i, where r_i = clamp((i - yarn_low) / max(0.001, yarn_high - yarn_low), 0, 1)
  // (1 = interpolated) times ext_factor; 0 leaves it off. mscale is then the whole cos/sin
  // multiplier.
  float ext_factor = 0.0f;
  float yarn_low = 0.0f, yarn_high = 0.0f;
};

// Where each sequence of a batch sits in the flat token dimension and in the paged cache.
// Sequence b owns query tokens [query_start_loc[b], query_start_loc[b+1]); they are the last
// tokens of its context of seq_lens[b] tokens, whose KV lives in blocks block_tables[b][:].
struct AttentionMeta {
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1]
  std::vector<int32_t> seq_lens;         // [num_seqs]
  std::vector<int32_t> block_tables;     // [num_seqs, max_blocks_per_seq], row-major
  int max_blocks_per_seq = 0;
  // Device copies of the three arrays above, made once per step by the model when it runs
  // on an accelerator and shared by all layers; undefined on the CPU.
  Tensor device_query_start_loc, device_seq_lens, device_block_tables;
  // > 0: an upper bound on seq_lens that kernels size their launch by instead of the actual
  // values, so that a captured graph fits every step it is replayed for.
  int max_seq_len_bound = 0;
  // > 0: paged_attention leaves the output rows of sequences with at least this many query
  // rows as they are (CUDA's MLA kernel only; the caller computes them with
  // mla_prefill_attention).
  int skip_queries_from = 0;
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
};

// out[M, N] = x[M, K] @ w[N, K]^T. x f32; w f32/f16/bf16 or a GGUF block type.
void matmul(const Tensor& x, const Tensor& w, Tensor& out);
// out[:, h, :] = x[:, h, :] @ w[h]^T for every head h: x [T, H, K] f32, w [H, N, K] (f32 or
// 16-bit), out [T, H, N] f32; x and out may be views with strided tokens and heads (MLA's
// per-head absorbed matrices). As matmul: where that takes x rounded to w's 16-bit type
// (CUDA's GEMM path), so does this.
void matmul_heads(const Tensor& x, const Tensor& w, Tensor& out);
// Rows [row0, row0 + N) of dst, an FP8_E4M3 matmul weight [R, K] in a GPU's layout (dtype.h),
// from w [N, K] (f32/f16/bf16, same device) with one scale for all of w (vLLM's dynamic
// per-tensor FP8 weights): s = amax(|w|) / 448 (1 if w is all zeros), each byte e4m3(w / s)
// clamped to +-448 and rounded to nearest even, s in each of those rows' scale slots. The
// bytes of model/quantization.h's quantize_fp8_per_tensor. K a multiple of 32.
void quantize_fp8_weight(const Tensor& w, Tensor& dst, int64_t row0);
// w (packed f32/f16/bf16 on an accelerator) replaced by the values of that quantization:
// e4m3(w / s) * s rounded to w's type, as quantize_fp8_per_tensor and then a widening to w's
// type give (for weights read in their own type: the GPU's stacked MoE experts under --dtype
// float16 or float32, where they do not stay FP8).
void round_fp8_per_tensor(Tensor& w);
// Fused forms of the decoder's matmuls (one kernel where the backend has one; otherwise the
// plain ops, through the scratch tensors, which are then left holding the intermediate).
// out = (rms_norm(x) * norm_weight) @ w^T; scratch normed [M, K].
void rms_norm_matmul(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                     Tensor& normed, Tensor& out);
// normed = rms_norm(x) * norm_weight and out = normed @ w^T: as rms_norm_matmul, but normed
// always holds the normed rows afterwards (in one kernel where the backend has one; MoE's
// router, whose normed input the experts read next).
void rms_norm_matmul_keep(const Tensor& x, const Tensor& norm_weight, float eps,
                          const Tensor& w, Tensor& normed, Tensor& out);
// out[M, F] = silu_and_mul((rms_norm(x) * norm_weight) @ w^T), w = [gate; up] of [2F, K];
// scratch normed [M, K] and gate_up [M, 2F].
void rms_norm_matmul_silu(const Tensor& x, const Tensor& norm_weight, float eps,
                          const Tensor& w, Tensor& normed, Tensor& gate_up, Tensor& out);
// out += x @ w^T (the residual stream); scratch product [M, N].
void matmul_add(const Tensor& x, const Tensor& w, Tensor& product, Tensor& out);
// The attention block's input side: qkv[M, (Hq + 2 Hkv) * D] = (rms_norm(x) * norm_weight)
// @ w^T, then rope_and_cache over its q/k/v heads (Hkv and D from the caches); scratch normed.
void rms_norm_matmul_rope_cache(const Tensor& x, const Tensor& norm_weight, float eps,
                                const Tensor& w, Tensor& normed, Tensor& qkv, int q_heads,
                                const Tensor& positions, const RopeParams& params,
                                Tensor& k_cache, Tensor& v_cache, const Tensor& slot_mapping);
// The q/k/v heads of qkv rows [M, (q_heads + 2 kv_heads) * head_dim], as rope_and_cache takes
// them: qk = the q and k heads together, k and v.
struct QkvHeads {
  Tensor qk, k, v;
};
QkvHeads split_qkv(const Tensor& qkv, int q_heads, int kv_heads, int head_dim);

// The rotation and cache write that rms_norm_matmul_rope_cache folds into the product.
struct RopeCacheFusion {
  const RopeParams* params = nullptr;
  const Tensor* positions = nullptr;
  const Tensor* slot_mapping = nullptr;
  Tensor* k_cache = nullptr;
  Tensor* v_cache = nullptr;
  int q_heads = 0;
};
// What a backend's fused matmul applies around out = x @ w^T (see Backend::matmul_fused).
struct MatmulFusion {
  const Tensor* norm_weight = nullptr;  // x is replaced by rms_norm(x) * norm_weight
  float eps = 0.0f;
  Tensor* normed_out = nullptr;  // with norm_weight: also written with rms_norm(x) * norm_weight
  bool accumulate = false;    // out += product
  bool silu_and_mul = false;  // out = silu_and_mul(product), half the width of w
  const RopeCacheFusion* rope_cache = nullptr;  // out = qkv, rotated and cached
};
// out[T, D] = table[ids[t], :]; ids i32, table any dtype, out f32.
void embedding(const Tensor& ids, const Tensor& table, Tensor& out);
// A vocab-parallel shard's part of an embedding: `table` holds the rows [first_id, first_id +
// rows) of a larger table; out[t] = table[ids[t] - first_id] for the ids among them and zeros
// for the others, so the sum over the shards is the whole embedding.
void embedding_rows(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out);
// out[T, D] = x / rms(x) * weight.
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
// out = a + b (same shape, f32).
void add(const Tensor& a, const Tensor& b, Tensor& out);
// x[T, N] += bias[N].
void add_bias(Tensor& x, const Tensor& bias);
// x[T, H, head_dim] rotated in place at positions[T] (i32).
void rope(Tensor& x, const Tensor& positions, const RopeParams& params);
// out[T, F] = silu(gate_up[:, :F]) * gate_up[:, F:].
void silu_and_mul(const Tensor& gate_up, Tensor& out);
// out[T, F] = gelu(gate_up[:, :F]) * gate_up[:, F:], GELU with the tanh approximation
// (PyTorch's approximate="tanh").
void gelu_tanh_and_mul(const Tensor& gate_up, Tensor& out);
// The same through f16, as ggml's CPU backend (a table of f16 GELU values): x rounded to f16,
// GELU computed in f32 and rounded to f16; x <= -10 gives 0 and x >= 10 gives x.
void gelu_tanh_f16_and_mul(const Tensor& gate_up, Tensor& out);
// x[R, C] *= s (f32).
void scale(Tensor& x, float s);
// x[R, C] = value (f32).
void fill(Tensor& x, float value);
// dst = src: f32 of one shape, [R, C] or [R, H, C], each row packed, any row and head strides
// (a view of some lanes of a wider tensor into another's).
void copy_strided(const Tensor& src, Tensor& dst);
// out[rows[j], :] += weights[j] * src[j, :] for j = 0, 1, ... in order: src [n, C] f32, rows
// [n] i32 (distinct, within out), weights [n] f32, out [R, C] f32. Mixture-of-experts layers
// add each expert's output back into its tokens' rows with it.
void index_add_scaled(const Tensor& src, const Tensor& rows, const Tensor& weights, Tensor& out);
// Mixture-of-experts layers where the expert weights live on the device (CUDA): routing,
// the grouping of routed rows by expert, the grouped expert matmul and the weighted sum back
// into token rows, all without the host, so that a decode step can be a graph. A step of T
// tokens routed to k experts each has S = T * k routed rows ("slots", slot t * k + j).
struct MoeRouting {
  int top_k = 0;
  bool sigmoid = false;        // scores: sigmoid(logit) (DeepSeek-V3), else softmax over experts
  int num_groups = 1;          // group-limited routing when > 1: only the best topk_groups groups
  int topk_groups = 1;
  bool group_top2 = false;     // a group's score: the sum of its two best, else its best
  bool normalize = false;      // weights divided by their sum (norm_topk_prob)
  float scaling = 1.0f;        // routed_scaling_factor
  int shared = 0;  // shared experts stacked after the E routed ones (see moe_route)
};
// ids[T, k + s] i32 and weights[T, k + s] f32 (s = r.shared): each token's k experts, best
// first (ties to the lower index), chosen by score (+ bias[E], the e_score_correction_bias, when
// defined) among the kept groups, weighted by their unbiased score (normalized and scaled as
// `r` says), from the router's scores[T, E] f32; then experts E .. E + s - 1 with weight 1.
// margins[T] f32, when defined: the relative gap between the last choice kept and the next one
// (groups and experts), as the host routing reports it.
void moe_route(const Tensor& scores, const Tensor& bias, const MoeRouting& r, Tensor& ids,
               Tensor& weights, Tensor& margins);
// The routed rows grouped by expert, in ascending expert order and token order within one.
struct MoePlan {
  Tensor token;     // [S] i32: the token of each grouped row
  Tensor position;  // [S] i32: slot -> its grouped row
  Tensor offsets;   // [E + 1] i32: expert e's rows are offsets[e] .. offsets[e + 1] - 1
  Tensor active;    // [E + 1] i32: the number n of experts with rows, then those n, ascending
  int64_t max_rows_per_expert = 0;  // a bound known on the host: the token count T
};
// Fills plan (tensors of the sizes above, on ids' device) from ids[T, k].
void moe_align(const Tensor& ids, int num_experts, MoePlan& plan);
// moe_route, then moe_align of its ids over num_experts (routed and shared): the same results,
// in one launch on CUDA for steps of up to 32 tokens.
void moe_route_align(const Tensor& scores, const Tensor& bias, const MoeRouting& r, Tensor& ids,
                     Tensor& weights, Tensor& margins, int num_experts, MoePlan& plan);
// out[r, :] = w[e(r)] @ x[rows[r], :] for every grouped row r of expert e(r): x [R, K] f32,
// rows [S] i32 (undefined: row r of x), w [E, N, K] (f32, f16 or bf16; on a GPU also
// FP8_E4M3, each expert in dtype.h's GPU layout: its N x K e4m3 bytes, then its N row
// scales), out [S, N] f32. FP8 weights: steps of up to 4 tokens take the GEMV (x in f32),
// more are W8A8 (x quantized to e4m3 per token), as matmul's FP8 path beyond 8 rows.
void moe_matmul(const Tensor& x, const Tensor& rows, const Tensor& w, const MoePlan& plan,
                Tensor& out);
// out[S, F] = silu_and_mul(the moe_matmul product) for w [E, 2F, K] (gate rows, then up rows):
// the same bits as moe_matmul into [S, 2F] followed by silu_and_mul, in one kernel where the
// rows are few (decode).
void moe_matmul_silu(const Tensor& x, const Tensor& rows, const Tensor& w, const MoePlan& plan,
                     Tensor& out);
// out[t, :] = sum over token t's experts in ascending expert order of weights[t, j] *
// y[position[t * k + j], :]: y [S, H] f32 in grouped order, ids / weights [T, k], out [T, H].
// With `extra` ([T, H] f32, e.g. the shared experts' output) the sum is sum + extra[t, :]; with
// `accumulate`, out[t, :] + that sum is stored (a residual stream updated in place).
void moe_combine(const Tensor& y, const Tensor& ids, const Tensor& weights, const MoePlan& plan,
                 Tensor& out, const Tensor& extra = Tensor(), bool accumulate = false);
// MLA attention of one sequence of `meta` (index seq) by materialized scores, for its prefill:
// q [Tq, H, Dk] f32 are all of that sequence's query rows (the last Tq of its seq_lens
// positions), cache [num_blocks, block_size, 1, Dk] its layer's latent rows (the value is a
// row's leading v_dim lanes). The rows are gathered into one key matrix shared by all heads, the
// scores of every (token, head) row are one GEMM, then a causal (and windowed) softmax, then
// out [Tq, H, v_dim] = P V, a second GEMM, both on tensor cores for a 16-bit cache (q and P
// rounded to its type, as matmul does). Backends without it throw (the CPU's paged_attention
// takes every step).
void mla_prefill_attention(const Tensor& q, const Tensor& cache, const AttentionMeta& meta,
                           int seq, int v_dim, float scale, int sliding_window, Tensor& out);
// Row-wise softmax over the last dim of x[R, C].
void softmax(const Tensor& x, Tensor& out);
// Writes k, v [T, Hkv, D] into caches [num_blocks, block_size, Hkv, D] (f32, or f16 / bf16
// (CUDA) with rounding) at slot_mapping[T] (slot = block * block_size + offset; negative slots
// skipped). k and v may differ in D and the caches may be views of lanes of one wider buffer
// (MLA's latent row); only those lanes are written.
void reshape_and_cache(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                       const Tensor& slot_mapping);
// rope(qk, positions, params), then reshape_and_cache(k, v, ...), where k is the view of the
// last heads of qk (rotated with them): one kernel where the backend has one.
void rope_and_cache(Tensor& qk, const Tensor& positions, const RopeParams& params,
                    const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                    const Tensor& slot_mapping);
// MLA's per-token work between the projection and attention, in one kernel where the backend
// has one: latent [T, L] = rms_norm(latent) * norm_weight in place; q_pe_out [T, H, R] =
// rope(q_pe_in); k_pe [T, 1, R] rotated in place; then reshape_and_cache(latent, k_pe) into
// c_cache and pe_cache, lane views of the cache's latent rows. The bits of those plain ops.
void mla_rope_and_cache(Tensor& latent, const Tensor& norm_weight, float eps,
                        const Tensor& q_pe_in, Tensor& q_pe_out, Tensor& k_pe,
                        const Tensor& positions, const RopeParams& params, Tensor& c_cache,
                        Tensor& pe_cache, const Tensor& slot_mapping);
// Per-head RMS norms of the q and k heads (Qwen3's q_norm and k_norm, each [head_dim] f32),
// applied before the rotation.
struct HeadNorms {
  const Tensor* q_weight = nullptr;
  const Tensor* k_weight = nullptr;
  float eps = 0.0f;
  int q_heads = 0;  // qk's first q_heads heads are q, the rest k
};
// rms_norm of every q head by q_weight and every k head by k_weight, then rope_and_cache: one
// kernel where the backend has one (on CUDA, the bits of the plain ops for heads of up to 128).
void qk_norm_rope_and_cache(Tensor& qk, const HeadNorms& norms, const Tensor& positions,
                            const RopeParams& params, const Tensor& k, const Tensor& v,
                            Tensor& k_cache, Tensor& v_cache, const Tensor& slot_mapping);
// Causal attention of q[T, Hq, D] over the paged cache (GQA: Hq % Hkv == 0) into
// out[T, Hq, Dv], Dv the values' width: D, except where the caches are lane views of one
// buffer (MLA's latent rows: one KV head, the key the whole row [c, k_pe], the value its
// leading lanes c). A key at position j is visible from a query at
// position p when j <= p and, with a sliding window W > 0, p - j < W.
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionMeta& meta, float scale, int sliding_window, Tensor& out);
// out[R] i32 = argmax of each row of x[R, C] f32 (the first of equal maxima): greedy sampling
// where the logits live, so that only token ids travel.
void argmax_rows(const Tensor& x, Tensor& out);
// out[R] i32 = one token per row of logits[R, V] f32, drawn where the logits live. params[R, 4]
// f32 per row: temperature (< 1e-5: greedy), top_p, min_p, and u, a uniform draw in [0, 1)
// from the request's generator; top_k[R] i32 (<= 0: off). Kept: the top_k largest logits,
// then the smallest head of those (by descending probability) holding top_p of their mass,
// then those with probability >= min_p x the largest; ties at a threshold are all kept. The
// token is where u x (kept mass) falls in the kept tokens' cumulative mass in index order.
void sample_rows(const Tensor& logits, const Tensor& params, const Tensor& top_k, Tensor& out);

}  // namespace vllm
