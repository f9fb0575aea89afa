// Op front-ends: validate once, then dispatch to the output's backend.
#include "runtime/ops.h"

#include "runtime/backend.h"
#include "util/check.h"

namespace vllm {
namespace {

void expect(const Tensor& t, const char* name, int ndim, DType dtype) {
  VLLM_CHECK(t.defined(), name, " is undefined");
  VLLM_CHECK(t.ndim() == ndim, name, " must have ", ndim, " dims, got ", t.shape_str());
  VLLM_CHECK(t.dtype() == dtype, name, " must be ", dtype_name(dtype), ", got ", t.shape_str());
}

void same_device(const Tensor& a, const Tensor& b) {
  VLLM_CHECK(a.device() == b.device(), "tensors on ", a.device().str(), " and ",
             b.device().str());
}

// Rows may be strided, but each row's elements must be packed.
void inner_packed(const Tensor& t, const char* name) {
  VLLM_CHECK(t.stride_bytes(-1) == dtype_info(t.dtype()).block_bytes, name,
             " must be contiguous in its last dim");
}

// Paged K/V caches: [num_blocks, block_size, Hkv, D], both f32, both f16, both e4m3 or (CUDA)
// both bf16.
// K and V may differ in D and be views of one wider buffer (MLA's latent row: the key is the
// whole row, the value its first lanes); each token's heads stay packed.
void expect_cache(const Tensor& k_cache, const Tensor& v_cache) {
  const DType dt = k_cache.dtype();
  const bool cuda = k_cache.device().kind == DeviceKind::Cuda;
  VLLM_CHECK(dt == DType::F32 || dt == DType::F16 || dt == DType::F8_E4M3 ||
                 (dt == DType::BF16 && cuda),
             "kv cache dtype ", dtype_name(dt), " on ", k_cache.device().str());
  expect(k_cache, "k_cache", 4, k_cache.dtype());
  expect(v_cache, "v_cache", 4, k_cache.dtype());
  same_device(k_cache, v_cache);
  for (int d = 0; d < 3; ++d)
    VLLM_CHECK(k_cache.size(d) == v_cache.size(d), "kv caches ", k_cache.shape_str(), " and ",
               v_cache.shape_str(), " differ in blocks, block size or heads");
  for (const Tensor* c : {&k_cache, &v_cache})
    VLLM_CHECK(c->stride_bytes(3) == dtype_info(dt).block_bytes &&
                   (c->size(2) == 1 || c->stride_bytes(2) == c->size(3) * c->stride_bytes(3)) &&
                   c->stride_bytes(0) == c->size(1) * c->stride_bytes(1),
               "kv cache views must keep each token's heads packed, got ", c->shape_str());
}

void check_matmul(const Tensor& x, const Tensor& w, const Tensor& out) {
  expect(x, "x", 2, DType::F32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(w.ndim() == 2, "weight must be 2-D, got ", w.shape_str());
  VLLM_CHECK(w.dtype() != DType::I32, "weight dtype i32");
  VLLM_CHECK(x.size(1) == w.size(1), "matmul inner dims: x ", x.shape_str(), " w ", w.shape_str());
  VLLM_CHECK(out.size(0) == x.size(0) && out.size(1) == w.size(0), "matmul out ",
             out.shape_str(), " for x ", x.shape_str(), " w ", w.shape_str());
  VLLM_CHECK(w.size(1) % dtype_info(w.dtype()).block_size == 0, "weight row length");
  inner_packed(x, "x");
  inner_packed(out, "out");
  same_device(x, w);
  same_device(x, out);
}

void check_rms_norm(const Tensor& x, const Tensor& weight, const Tensor& out) {
  VLLM_CHECK(x.ndim() == 2 || x.ndim() == 3, "rms_norm x must be [T, D] or [T, H, D], got ",
             x.shape_str());
  expect(x, "x", x.ndim(), DType::F32);
  expect(out, "out", x.ndim(), DType::F32);
  expect(weight, "weight", 1, DType::F32);
  VLLM_CHECK(weight.size(0) == x.size(-1) && out.shape() == x.shape(), "rms_norm shapes ",
             x.shape_str(), " weight ", weight.shape_str(), " out ", out.shape_str());
  inner_packed(x, "x");
  inner_packed(out, "out");
}

void check_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  expect(a, "a", 2, DType::F32);
  expect(b, "b", 2, DType::F32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(a.shape() == b.shape() && a.shape() == out.shape(), "add shapes");
}

void check_silu_and_mul(const Tensor& gate_up, const Tensor& out) {
  expect(gate_up, "gate_up", 2, DType::F32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(gate_up.size(1) == 2 * out.size(1) && gate_up.size(0) == out.size(0),
             "gated activation shapes ", gate_up.shape_str(), " -> ", out.shape_str());
}

void check_rope(const Tensor& x, const Tensor& positions, const RopeParams& params) {
  expect(x, "x", 3, DType::F32);
  expect(positions, "positions", 1, DType::I32);
  VLLM_CHECK(positions.size(0) == x.size(0), "rope positions for ", x.shape_str());
  VLLM_CHECK(x.size(2) == params.head_dim && params.rotary_dim <= params.head_dim &&
                 params.rotary_dim % 2 == 0 &&
                 static_cast<int>(params.inv_freq.size()) == params.rotary_dim / 2,
             "rope params for head_dim ", x.size(2));
  VLLM_CHECK(x.stride_bytes(2) == 4, "rope needs packed heads");
  VLLM_CHECK(params.ext_factor == 0.0f || x.device().kind == DeviceKind::Cpu,
             "ggml's YaRN rotation (GGUF files) runs on the CPU only so far");
}

void check_cache_write(const Tensor& k, const Tensor& v, const Tensor& k_cache,
                       const Tensor& v_cache, const Tensor& slot_mapping) {
  expect(k, "k", 3, DType::F32);
  expect(v, "v", 3, DType::F32);
  expect_cache(k_cache, v_cache);
  expect(slot_mapping, "slot_mapping", 1, DType::I32);
  VLLM_CHECK(k.size(0) == v.size(0), "k and v token counts");
  VLLM_CHECK(k.size(1) == k_cache.size(2) && k.size(2) == k_cache.size(3) &&
                 v.size(1) == v_cache.size(2) && v.size(2) == v_cache.size(3),
             "k ", k.shape_str(), " v ", v.shape_str(), " for caches ", k_cache.shape_str(),
             " and ", v_cache.shape_str());
  VLLM_CHECK(slot_mapping.size(0) == k.size(0), "slot_mapping length");
  VLLM_CHECK(k.stride_bytes(2) == 4 && k.stride_bytes(1) == 4 * k.size(2) &&
                 v.stride_bytes(2) == 4 && v.stride_bytes(1) == 4 * v.size(2),
             "k and v rows must be packed");
  same_device(k, k_cache);
  same_device(slot_mapping, k_cache);
  if (slot_mapping.device().kind == DeviceKind::Cpu) {  // device copies are checked on upload
    const int64_t num_slots = k_cache.size(0) * k_cache.size(1);
    const int32_t* s = slot_mapping.data<int32_t>();
    for (int64_t t = 0; t < k.size(0); ++t)
      VLLM_CHECK(s[t] < num_slots, "slot ", s[t], " beyond cache of ", num_slots);
  }
}

// The bodies of rms_norm_matmul (rms_norm_matmul_keep with `keep`) and rope_and_cache for
// arguments already validated: the fused kernel where the backend has one, else the plain ops.
void run_rms_norm_matmul(Backend& b, const Tensor& x, const Tensor& norm_weight, float eps,
                         const Tensor& w, Tensor& normed, Tensor& out, bool keep = false) {
  MatmulFusion f;
  f.norm_weight = &norm_weight;
  f.eps = eps;
  if (keep) f.normed_out = &normed;
  if (b.matmul_fused(x, w, out, f)) return;
  b.rms_norm(x, norm_weight, eps, normed);
  b.matmul(normed, w, out);
}

void run_rope_and_cache(Backend& b, Tensor& qk, const Tensor& positions,
                        const RopeParams& params, const Tensor& k, const Tensor& v,
                        Tensor& k_cache, Tensor& v_cache, const Tensor& slot_mapping,
                        const HeadNorms* norms = nullptr) {
  if (b.rope_and_cache(qk, positions, params, k, v, k_cache, v_cache, slot_mapping, norms))
    return;
  if (norms) {
    Tensor q = qk.slice(1, 0, norms->q_heads);
    Tensor kh = qk.slice(1, norms->q_heads, qk.size(1) - norms->q_heads);
    b.rms_norm(q, *norms->q_weight, norms->eps, q);
    b.rms_norm(kh, *norms->k_weight, norms->eps, kh);
  }
  b.rope(qk, positions, params);
  b.reshape_and_cache(k, v, k_cache, v_cache, slot_mapping);
}

}  // namespace

void matmul(const Tensor& x, const Tensor& w, Tensor& out) {
  check_matmul(x, w, out);
  backend_for(out.device()).matmul(x, w, out);
}

void rms_norm_matmul(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                     Tensor& normed, Tensor& out) {
  check_matmul(x, w, out);
  check_rms_norm(x, norm_weight, normed);
  run_rms_norm_matmul(backend_for(out.device()), x, norm_weight, eps, w, normed, out);
}

void rms_norm_matmul_keep(const Tensor& x, const Tensor& norm_weight, float eps,
                          const Tensor& w, Tensor& normed, Tensor& out) {
  check_matmul(x, w, out);
  check_rms_norm(x, norm_weight, normed);
  run_rms_norm_matmul(backend_for(out.device()), x, norm_weight, eps, w, normed, out, true);
}

void rms_norm_matmul_silu(const Tensor& x, const Tensor& norm_weight, float eps,
                          const Tensor& w, Tensor& normed, Tensor& gate_up, Tensor& out) {
  check_matmul(x, w, gate_up);
  check_rms_norm(x, norm_weight, normed);
  check_silu_and_mul(gate_up, out);
  MatmulFusion f;
  f.norm_weight = &norm_weight;
  f.eps = eps;
  f.silu_and_mul = true;
  Backend& b = backend_for(out.device());
  if (b.matmul_fused(x, w, out, f)) return;
  b.rms_norm(x, norm_weight, eps, normed);
  f.norm_weight = nullptr;
  if (b.matmul_fused(normed, w, out, f)) return;
  b.matmul(normed, w, gate_up);
  b.silu_and_mul(gate_up, out);
}

void matmul_add(const Tensor& x, const Tensor& w, Tensor& product, Tensor& out) {
  check_matmul(x, w, out);
  check_matmul(x, w, product);
  MatmulFusion f;
  f.accumulate = true;
  Backend& b = backend_for(out.device());
  if (b.matmul_fused(x, w, out, f)) return;
  b.matmul(x, w, product);
  b.add(out, product, out);
}

void embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  expect(ids, "ids", 1, DType::I32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(table.ndim() == 2, "embedding table must be 2-D");
  VLLM_CHECK(out.size(0) == ids.size(0) && out.size(1) == table.size(1), "embedding out ",
             out.shape_str());
  if (ids.device().kind == DeviceKind::Cpu) {
    const int32_t* p = ids.data<int32_t>();
    for (int64_t i = 0; i < ids.size(0); ++i)
      VLLM_CHECK(p[i] >= 0 && p[i] < table.size(0), "token id ", p[i], " outside vocab of ",
                 table.size(0));
  }
  same_device(ids, table);
  same_device(ids, out);
  backend_for(out.device()).embedding(ids, table, 0, out);
}

void embedding_rows(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out) {
  expect(ids, "ids", 1, DType::I32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(table.ndim() == 2, "embedding table must be 2-D");
  VLLM_CHECK(first_id >= 0, "embedding_rows: first id ", first_id);
  VLLM_CHECK(out.size(0) == ids.size(0) && out.size(1) == table.size(1), "embedding out ",
             out.shape_str());
  same_device(ids, table);
  same_device(ids, out);
  backend_for(out.device()).embedding(ids, table, first_id, out);
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  check_rms_norm(x, weight, out);
  backend_for(out.device()).rms_norm(x, weight, eps, out);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_add(a, b, out);
  backend_for(out.device()).add(a, b, out);
}

void add_bias(Tensor& x, const Tensor& bias) {
  expect(x, "x", 2, DType::F32);
  expect(bias, "bias", 1, DType::F32);
  VLLM_CHECK(bias.size(0) == x.size(1), "bias of ", bias.shape_str(), " for ", x.shape_str());
  backend_for(x.device()).add_bias(x, bias);
}

void rope(Tensor& x, const Tensor& positions, const RopeParams& params) {
  check_rope(x, positions, params);
  backend_for(x.device()).rope(x, positions, params);
}

void silu_and_mul(const Tensor& gate_up, Tensor& out) {
  check_silu_and_mul(gate_up, out);
  backend_for(out.device()).silu_and_mul(gate_up, out);
}

void gelu_tanh_and_mul(const Tensor& gate_up, Tensor& out) {
  check_silu_and_mul(gate_up, out);
  backend_for(out.device()).gelu_tanh_and_mul(gate_up, out);
}

void gelu_tanh_f16_and_mul(const Tensor& gate_up, Tensor& out) {
  check_silu_and_mul(gate_up, out);
  backend_for(out.device()).gelu_tanh_f16_and_mul(gate_up, out);
}

void scale(Tensor& x, float s) {
  expect(x, "x", 2, DType::F32);
  backend_for(x.device()).scale(x, s);
}

void fill(Tensor& x, float value) {
  expect(x, "x", 2, DType::F32);
  inner_packed(x, "x");
  backend_for(x.device()).fill(x, value);
}

void quantize_fp8_weight(const Tensor& w, Tensor& dst, int64_t row0) {
  VLLM_CHECK(w.ndim() == 2 && w.is_contiguous() &&
                 (w.dtype() == DType::F32 || w.dtype() == DType::F16 || w.dtype() == DType::BF16),
             "quantize_fp8_weight input must be packed [N, K] f32/f16/bf16, got ", w.shape_str(),
             " ", dtype_name(w.dtype()));
  VLLM_CHECK(dst.ndim() == 2 && dst.is_contiguous() && dst.dtype() == DType::FP8_E4M3 &&
                 dst.size(1) == w.size(1) && w.size(1) % kFp8Block == 0 && row0 >= 0 &&
                 row0 + w.size(0) <= dst.size(0),
             "quantize_fp8_weight: rows ", row0, "+", w.size(0), " of ", w.shape_str(), " into ",
             dst.shape_str(), " ", dtype_name(dst.dtype()));
  same_device(w, dst);
  backend_for(dst.device()).quantize_fp8_weight(w, dst, row0);
}

void round_fp8_per_tensor(Tensor& w) {
  VLLM_CHECK(w.is_contiguous() && (w.dtype() == DType::F32 || w.dtype() == DType::F16 ||
                                   w.dtype() == DType::BF16),
             "round_fp8_per_tensor of ", w.shape_str(), " ", dtype_name(w.dtype()),
             " (packed f32/f16/bf16)");
  backend_for(w.device()).round_fp8_per_tensor(w);
}

void matmul_heads(const Tensor& x, const Tensor& w, Tensor& out) {
  expect(x, "x", 3, DType::F32);
  expect(out, "out", 3, DType::F32);
  VLLM_CHECK(w.ndim() == 3 && w.is_contiguous() &&
                 (w.dtype() == DType::F32 || w.dtype() == DType::F16 || w.dtype() == DType::BF16),
             "matmul_heads weights must be packed [H, N, K] f32/f16/bf16, got ", w.shape_str());
  VLLM_CHECK(x.size(1) == w.size(0) && out.size(1) == w.size(0) && x.size(2) == w.size(2) &&
                 out.size(2) == w.size(1) && out.size(0) == x.size(0),
             "matmul_heads: x ", x.shape_str(), " w ", w.shape_str(), " out ", out.shape_str());
  inner_packed(x, "x");
  inner_packed(out, "out");
  same_device(x, w);
  same_device(x, out);
  backend_for(out.device()).matmul_heads(x, w, out);
}

void copy_strided(const Tensor& src, Tensor& dst) {
  VLLM_CHECK(src.ndim() == 2 || src.ndim() == 3, "copy_strided of ", src.shape_str());
  expect(src, "src", src.ndim(), DType::F32);
  expect(dst, "dst", src.ndim(), DType::F32);
  VLLM_CHECK(src.shape() == dst.shape(), "copy_strided from ", src.shape_str(), " into ",
             dst.shape_str());
  inner_packed(src, "src");
  inner_packed(dst, "dst");
  same_device(src, dst);
  backend_for(dst.device()).copy_strided(src, dst);
}

void index_add_scaled(const Tensor& src, const Tensor& rows, const Tensor& weights, Tensor& out) {
  expect(src, "src", 2, DType::F32);
  expect(rows, "rows", 1, DType::I32);
  expect(weights, "weights", 1, DType::F32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(rows.size(0) == src.size(0) && weights.size(0) == src.size(0) &&
                 out.size(1) == src.size(1),
             "index_add_scaled: src ", src.shape_str(), ", rows ", rows.shape_str(), ", weights ",
             weights.shape_str(), ", out ", out.shape_str());
  inner_packed(src, "src");
  inner_packed(out, "out");
  VLLM_CHECK(rows.is_contiguous() && weights.is_contiguous(), "rows and weights must be packed");
  for (const Tensor* t : {&rows, &weights, static_cast<const Tensor*>(&out)}) same_device(src, *t);
  if (rows.device().kind == DeviceKind::Cpu)
    for (int64_t j = 0; j < rows.size(0); ++j)
      VLLM_CHECK(rows.data<int32_t>()[j] >= 0 && rows.data<int32_t>()[j] < out.size(0), "row ",
                 rows.data<int32_t>()[j], " outside out of ", out.size(0));
  backend_for(out.device()).index_add_scaled(src, rows, weights, out);
}

namespace {

void check_moe_route(const Tensor& scores, const Tensor& bias, const MoeRouting& r,
                     const Tensor& ids, const Tensor& weights, const Tensor& margins) {
  expect(scores, "scores", 2, DType::F32);
  expect(ids, "ids", 2, DType::I32);
  expect(weights, "weights", 2, DType::F32);
  const int64_t T = scores.size(0), E = scores.size(1);
  VLLM_CHECK(r.top_k > 0 && r.top_k <= E && r.num_groups > 0 && E % r.num_groups == 0 &&
                 r.topk_groups > 0 && r.topk_groups <= r.num_groups &&
                 int64_t(r.topk_groups) * (E / r.num_groups) >= r.top_k,
             "moe_route: top_k ", r.top_k, " of ", E, " experts in ", r.num_groups,
             " groups, keeping ", r.topk_groups);
  VLLM_CHECK(r.shared >= 0 && ids.size(0) == T && ids.size(1) == r.top_k + r.shared &&
                 weights.shape() == ids.shape(),
             "moe_route: ids ", ids.shape_str(), " weights ", weights.shape_str(), " for ",
             scores.shape_str(), ", top_k ", r.top_k, " and ", r.shared, " shared");
  VLLM_CHECK(scores.is_contiguous() && ids.is_contiguous() && weights.is_contiguous(),
             "moe_route tensors must be packed");
  same_device(scores, ids);
  same_device(scores, weights);
  if (bias.defined()) {
    expect(bias, "bias", 1, DType::F32);
    VLLM_CHECK(bias.size(0) == E, "moe_route: bias ", bias.shape_str(), " for ", E, " experts");
    same_device(scores, bias);
  }
  if (margins.defined()) {
    expect(margins, "margins", 1, DType::F32);
    VLLM_CHECK(margins.size(0) == T, "moe_route: margins ", margins.shape_str());
    same_device(scores, margins);
  }
}

// Checks ids and allocates the plan's tensors on their device.
void new_moe_plan(const Tensor& ids, int num_experts, MoePlan& plan) {
  expect(ids, "ids", 2, DType::I32);
  VLLM_CHECK(ids.is_contiguous() && num_experts > 0, "moe_align: ids ", ids.shape_str(), ", ",
             num_experts, " experts");
  const int64_t S = ids.numel();
  plan.token = Tensor::empty({S}, DType::I32, ids.device());
  plan.position = Tensor::empty({S}, DType::I32, ids.device());
  plan.offsets = Tensor::empty({num_experts + 1}, DType::I32, ids.device());
  plan.active = Tensor::empty({num_experts + 1}, DType::I32, ids.device());
  plan.max_rows_per_expert = ids.size(0);  // a token's experts are distinct
}

}  // namespace

void moe_route(const Tensor& scores, const Tensor& bias, const MoeRouting& r, Tensor& ids,
               Tensor& weights, Tensor& margins) {
  check_moe_route(scores, bias, r, ids, weights, margins);
  backend_for(scores.device()).moe_route(scores, bias, r, ids, weights, margins);
}

void moe_align(const Tensor& ids, int num_experts, MoePlan& plan) {
  new_moe_plan(ids, num_experts, plan);
  backend_for(ids.device()).moe_align(ids, num_experts, plan);
}

void moe_route_align(const Tensor& scores, const Tensor& bias, const MoeRouting& r, Tensor& ids,
                     Tensor& weights, Tensor& margins, int num_experts, MoePlan& plan) {
  check_moe_route(scores, bias, r, ids, weights, margins);
  VLLM_CHECK(num_experts >= scores.size(1) + r.shared, "moe_route_align: ", num_experts,
             " experts for ", scores.size(1), " routed and ", r.shared, " shared");
  new_moe_plan(ids, num_experts, plan);
  backend_for(scores.device()).moe_route_align(scores, bias, r, ids, weights, margins,
                                               num_experts, plan);
}

namespace {
// The checks of moe_matmul and moe_matmul_silu: out is `width` wide (N, or N / 2 after the
// activation).
void check_moe_matmul(const Tensor& x, const Tensor& rows, const Tensor& w, const MoePlan& plan,
                      int64_t width, const Tensor& out) {
  expect(x, "x", 2, DType::F32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(w.ndim() == 3 && w.is_contiguous() &&
                 (w.dtype() == DType::F32 || w.dtype() == DType::F16 ||
                  w.dtype() == DType::BF16 || w.dtype() == DType::FP8_E4M3),
             "moe_matmul: expert weights must be packed [E, N, K] f32/f16/bf16/fp8, got ",
             w.shape_str(), " ", dtype_name(w.dtype()));
  const int64_t S = plan.token.numel();
  VLLM_CHECK(x.size(1) == w.size(2) && out.size(0) == S && out.size(1) == width &&
                 plan.offsets.numel() == w.size(0) + 1,
             "moe_matmul: x ", x.shape_str(), " w ", w.shape_str(), " out ", out.shape_str(),
             " for ", S, " rows");
  if (rows.defined()) {
    expect(rows, "rows", 1, DType::I32);
    VLLM_CHECK(rows.numel() == S, "moe_matmul: rows ", rows.shape_str());
  } else {
    VLLM_CHECK(x.size(0) == S, "moe_matmul: x ", x.shape_str(), " without rows, for ", S);
  }
  inner_packed(x, "x");
  VLLM_CHECK(out.is_contiguous(), "moe_matmul: out must be packed");
  same_device(x, w);
  same_device(x, out);
}
}  // namespace

void moe_matmul(const Tensor& x, const Tensor& rows, const Tensor& w, const MoePlan& plan,
                Tensor& out) {
  check_moe_matmul(x, rows, w, plan, w.ndim() == 3 ? w.size(1) : -1, out);
  backend_for(out.device()).moe_matmul(x, rows, w, plan, false, out);
}

void moe_matmul_silu(const Tensor& x, const Tensor& rows, const Tensor& w, const MoePlan& plan,
                     Tensor& out) {
  VLLM_CHECK(w.ndim() == 3 && w.size(1) % 2 == 0, "moe_matmul_silu: w ", w.shape_str(),
             " is no [E, 2F, K] of gate and up rows");
  check_moe_matmul(x, rows, w, plan, w.size(1) / 2, out);
  backend_for(out.device()).moe_matmul(x, rows, w, plan, true, out);
}

void mla_prefill_attention(const Tensor& q, const Tensor& cache, const AttentionMeta& meta,
                           int seq, int v_dim, float scale, int sliding_window, Tensor& out) {
  expect(q, "q", 3, DType::F32);
  expect(out, "out", 3, DType::F32);
  VLLM_CHECK(cache.ndim() == 4 && cache.size(2) == 1 && cache.size(3) == q.size(2) &&
                 v_dim > 0 && v_dim <= q.size(2) && seq >= 0 && seq < meta.num_seqs() &&
                 out.size(0) == q.size(0) && out.size(1) == q.size(1) && out.size(2) == v_dim &&
                 q.size(0) == meta.query_start_loc[seq + 1] - meta.query_start_loc[seq] &&
                 q.size(0) <= meta.seq_lens[seq],
             "mla_prefill_attention: q ", q.shape_str(), " cache ", cache.shape_str(), " out ",
             out.shape_str(), " sequence ", seq);
  VLLM_CHECK(q.is_contiguous() && out.is_contiguous(),
             "mla_prefill_attention: q and out must be packed");
  same_device(q, out);
  backend_for(out.device())
      .mla_prefill_attention(q, cache, meta, seq, v_dim, scale, sliding_window, out);
}

void moe_combine(const Tensor& y, const Tensor& ids, const Tensor& weights, const MoePlan& plan,
                 Tensor& out, const Tensor& extra, bool accumulate) {
  expect(y, "y", 2, DType::F32);
  expect(ids, "ids", 2, DType::I32);
  expect(weights, "weights", 2, DType::F32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(weights.shape() == ids.shape() && y.size(0) == ids.numel() &&
                 out.size(0) == ids.size(0) && out.size(1) == y.size(1) &&
                 plan.position.numel() == ids.numel(),
             "moe_combine: y ", y.shape_str(), " ids ", ids.shape_str(), " out ",
             out.shape_str());
  VLLM_CHECK(y.is_contiguous() && out.is_contiguous(), "moe_combine: y and out must be packed");
  same_device(y, out);
  if (extra.defined()) {
    expect(extra, "extra", 2, DType::F32);
    VLLM_CHECK(extra.shape() == out.shape() && extra.is_contiguous(), "moe_combine: extra ",
               extra.shape_str(), " for out ", out.shape_str());
    same_device(extra, out);
  }
  backend_for(out.device()).moe_combine(y, ids, weights, plan, extra, accumulate, out);
}

void softmax(const Tensor& x, Tensor& out) {
  expect(x, "x", 2, DType::F32);
  expect(out, "out", 2, DType::F32);
  VLLM_CHECK(x.shape() == out.shape(), "softmax shapes");
  backend_for(out.device()).softmax(x, out);
}

void reshape_and_cache(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                       const Tensor& slot_mapping) {
  check_cache_write(k, v, k_cache, v_cache, slot_mapping);
  backend_for(k_cache.device()).reshape_and_cache(k, v, k_cache, v_cache, slot_mapping);
}

void rope_and_cache(Tensor& qk, const Tensor& positions, const RopeParams& params,
                    const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                    const Tensor& slot_mapping) {
  check_rope(qk, positions, params);
  check_cache_write(k, v, k_cache, v_cache, slot_mapping);
  const int64_t kv_heads = k.size(1);
  const auto* last_heads =
      static_cast<const char*>(qk.raw()) + (qk.size(1) - kv_heads) * qk.stride_bytes(1);
  VLLM_CHECK(k.size(0) == qk.size(0) && kv_heads <= qk.size(1) && k.raw() == last_heads &&
                 k.stride_bytes(0) == qk.stride_bytes(0),
             "rope_and_cache: k must be the last heads of qk");
  run_rope_and_cache(backend_for(k_cache.device()), qk, positions, params, k, v, k_cache,
                     v_cache, slot_mapping);
}

void mla_rope_and_cache(Tensor& latent, const Tensor& norm_weight, float eps,
                        const Tensor& q_pe_in, Tensor& q_pe_out, Tensor& k_pe,
                        const Tensor& positions, const RopeParams& params, Tensor& c_cache,
                        Tensor& pe_cache, const Tensor& slot_mapping) {
  expect(latent, "latent", 2, DType::F32);
  check_rms_norm(latent, norm_weight, latent);
  check_rope(q_pe_out, positions, params);
  check_rope(k_pe, positions, params);
  expect(q_pe_in, "q_pe_in", 3, DType::F32);
  VLLM_CHECK(q_pe_in.shape() == q_pe_out.shape() && k_pe.size(1) == 1,
             "mla_rope_and_cache: q_pe ", q_pe_in.shape_str(), " into ", q_pe_out.shape_str(),
             ", k_pe ", k_pe.shape_str());
  inner_packed(q_pe_in, "q_pe_in");
  inner_packed(q_pe_out, "q_pe_out");
  const Tensor latent_heads = latent.split_last(1);
  check_cache_write(latent_heads, k_pe, c_cache, pe_cache, slot_mapping);
  Backend& b = backend_for(c_cache.device());
  if (b.mla_rope_and_cache(latent, norm_weight, eps, q_pe_in, q_pe_out, k_pe, positions, params,
                           c_cache, pe_cache, slot_mapping))
    return;
  b.rms_norm(latent, norm_weight, eps, latent);
  b.copy_strided(q_pe_in, q_pe_out);
  b.rope(q_pe_out, positions, params);
  b.rope(k_pe, positions, params);
  b.reshape_and_cache(latent_heads, k_pe, c_cache, pe_cache, slot_mapping);
}

void qk_norm_rope_and_cache(Tensor& qk, const HeadNorms& norms, const Tensor& positions,
                            const RopeParams& params, const Tensor& k, const Tensor& v,
                            Tensor& k_cache, Tensor& v_cache, const Tensor& slot_mapping) {
  VLLM_CHECK(norms.q_weight && norms.k_weight && norms.q_heads > 0 &&
                 norms.q_heads < qk.size(1),
             "qk_norm_rope_and_cache: ", norms.q_heads, " q heads of ", qk.shape_str());
  const Tensor q = qk.slice(1, 0, norms.q_heads);
  const Tensor kh = qk.slice(1, norms.q_heads, qk.size(1) - norms.q_heads);
  check_rms_norm(q, *norms.q_weight, q);
  check_rms_norm(kh, *norms.k_weight, kh);
  check_rope(qk, positions, params);
  check_cache_write(k, v, k_cache, v_cache, slot_mapping);
  VLLM_CHECK(k.raw() == kh.raw() && k.shape() == kh.shape() &&
                 k.stride_bytes(0) == qk.stride_bytes(0),
             "qk_norm_rope_and_cache: k must be the last heads of qk");
  run_rope_and_cache(backend_for(k_cache.device()), qk, positions, params, k, v, k_cache,
                     v_cache, slot_mapping, &norms);
}

QkvHeads split_qkv(const Tensor& qkv, int q_heads, int kv_heads, int head_dim) {
  expect(qkv, "qkv", 2, DType::F32);
  const int64_t q = int64_t(q_heads) * head_dim, kv = int64_t(kv_heads) * head_dim;
  VLLM_CHECK(qkv.size(1) == q + 2 * kv, "qkv rows of ", qkv.size(1), " for ", q_heads, "+2x",
             kv_heads, " heads of ", head_dim);
  return QkvHeads{qkv.slice(1, 0, q + kv).split_last(q_heads + kv_heads),
                  qkv.slice(1, q, kv).split_last(kv_heads),
                  qkv.slice(1, q + kv, kv).split_last(kv_heads)};
}

void rms_norm_matmul_rope_cache(const Tensor& x, const Tensor& norm_weight, float eps,
                                const Tensor& w, Tensor& normed, Tensor& qkv, int q_heads,
                                const Tensor& positions, const RopeParams& params,
                                Tensor& k_cache, Tensor& v_cache, const Tensor& slot_mapping) {
  check_matmul(x, w, qkv);
  check_rms_norm(x, norm_weight, normed);
  VLLM_CHECK(k_cache.ndim() == 4, "k_cache must be [blocks, block_size, Hkv, D]");
  QkvHeads heads = split_qkv(qkv, q_heads, int(k_cache.size(2)), int(k_cache.size(3)));
  check_rope(heads.qk, positions, params);
  check_cache_write(heads.k, heads.v, k_cache, v_cache, slot_mapping);
  RopeCacheFusion rc{&params, &positions, &slot_mapping, &k_cache, &v_cache, q_heads};
  MatmulFusion f;
  f.norm_weight = &norm_weight;
  f.eps = eps;
  f.rope_cache = &rc;
  Backend& b = backend_for(qkv.device());
  if (b.matmul_fused(x, w, qkv, f)) return;
  run_rms_norm_matmul(b, x, norm_weight, eps, w, normed, qkv);
  run_rope_and_cache(b, heads.qk, positions, params, heads.k, heads.v, k_cache, v_cache,
                     slot_mapping);
}

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionMeta& meta, float scale, int sliding_window, Tensor& out) {
  expect(q, "q", 3, DType::F32);
  expect(out, "out", 3, DType::F32);
  expect_cache(k_cache, v_cache);
  VLLM_CHECK(out.size(0) == q.size(0) && out.size(1) == q.size(1) &&
                 out.size(2) == v_cache.size(3),
             "attention out ", out.shape_str(), " for q ", q.shape_str(), " and values ",
             v_cache.shape_str());
  VLLM_CHECK(q.size(2) == k_cache.size(3) && q.size(1) % k_cache.size(2) == 0,
             "q ", q.shape_str(), " vs cache ", k_cache.shape_str());
  VLLM_CHECK(meta.skip_queries_from == 0 || q.device().kind != DeviceKind::Cpu,
             "paged_attention on the CPU computes every sequence (skip_queries_from)");
  const int n = meta.num_seqs();
  VLLM_CHECK(static_cast<int>(meta.query_start_loc.size()) == n + 1 &&
                 meta.query_start_loc[0] == 0 && meta.query_start_loc[n] == q.size(0),
             "query_start_loc does not cover the ", q.size(0), " query tokens");
  VLLM_CHECK(static_cast<int64_t>(meta.block_tables.size()) ==
                 int64_t(n) * meta.max_blocks_per_seq,
             "block_tables size");
  const int64_t block_size = k_cache.size(1);
  for (int b = 0; b < n; ++b) {
    const int32_t q_len = meta.query_start_loc[b + 1] - meta.query_start_loc[b];
    VLLM_CHECK(q_len >= 0 && q_len <= meta.seq_lens[b], "sequence ", b, " has ", q_len,
               " queries but ", meta.seq_lens[b], " tokens");
    VLLM_CHECK(meta.seq_lens[b] <= int64_t(meta.max_blocks_per_seq) * block_size,
               "sequence ", b, " longer than its block table");
    const int32_t used = static_cast<int32_t>((meta.seq_lens[b] + block_size - 1) / block_size);
    for (int32_t j = 0; j < used; ++j) {
      const int32_t blk = meta.block_tables[size_t(b) * meta.max_blocks_per_seq + j];
      VLLM_CHECK(blk >= 0 && blk < k_cache.size(0), "block id ", blk, " out of range");
    }
  }
  same_device(q, k_cache);
  same_device(q, out);
  if (q.device().kind != DeviceKind::Cpu) {
    for (const Tensor* t : {&meta.device_query_start_loc, &meta.device_seq_lens,
                            &meta.device_block_tables})
      VLLM_CHECK(t->defined() && t->device() == q.device() && t->dtype() == DType::I32,
                 "attention metadata must be copied to ", q.device().str());
    VLLM_CHECK(meta.device_block_tables.numel() == int64_t(meta.block_tables.size()) &&
                   meta.device_seq_lens.numel() == n,
               "device attention metadata disagrees with the host copy");
  }
  backend_for(out.device()).paged_attention(q, k_cache, v_cache, meta, scale, sliding_window,
                                            out);
}

void argmax_rows(const Tensor& x, Tensor& out) {
  expect(x, "x", 2, DType::F32);
  expect(out, "out", 1, DType::I32);
  VLLM_CHECK(out.size(0) == x.size(0) && x.size(1) > 0, "argmax_rows of ", x.shape_str(),
             " into ", out.shape_str());
  inner_packed(x, "x");
  VLLM_CHECK(out.is_contiguous(), "argmax_rows out must be contiguous");
  same_device(x, out);
  backend_for(out.device()).argmax_rows(x, out);
}

void sample_rows(const Tensor& logits, const Tensor& params, const Tensor& top_k, Tensor& out) {
  expect(logits, "logits", 2, DType::F32);
  expect(params, "params", 2, DType::F32);
  expect(top_k, "top_k", 1, DType::I32);
  expect(out, "out", 1, DType::I32);
  const int64_t rows = logits.size(0);
  VLLM_CHECK(params.size(0) == rows && params.size(1) == 4 && top_k.size(0) == rows &&
                 out.size(0) == rows && logits.size(1) > 0 && logits.size(1) <= INT32_MAX,
             "sample_rows of ", logits.shape_str(), " with params ", params.shape_str(),
             ", top_k ", top_k.shape_str(), " into ", out.shape_str());
  inner_packed(logits, "logits");
  VLLM_CHECK(params.is_contiguous() && top_k.is_contiguous() && out.is_contiguous(),
             "sample_rows params, top_k and out must be contiguous");
  same_device(logits, params);
  same_device(logits, top_k);
  same_device(logits, out);
  backend_for(out.device()).sample_rows(logits, params, top_k, out);
}

}  // namespace vllm
