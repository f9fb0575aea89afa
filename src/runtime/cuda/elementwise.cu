// CUDA row-wise kernels: embedding, norms, residual adds, rotary embedding, activations,
// softmax, KV-cache writes and argmax. Activations are f32; tables and caches any float type
// (caches also e4m3).
#include <algorithm>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops.h"

namespace vllm::cuda {
namespace {

constexpr int kMaxRotaryPairs = 256;

// Rows of ids outside [first_id, first_id + rows) are zeros (a vocab-parallel shard's part).
template <typename T>
__global__ void embedding_kernel(const int32_t* __restrict__ ids, const T* __restrict__ table,
                                 int64_t table_stride, int64_t first_id, int64_t rows,
                                 float* __restrict__ out, int64_t out_stride, int64_t dim) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t r = int64_t(ids[t]) - first_id;
  float* o = out + t * out_stride;
  if (r < 0 || r >= rows) {
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = 0.0f;
    return;
  }
  const T* row = table + r * table_stride;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = to_float(row[i]);
}

// Rows r = t * heads + h of x[T, H, D] (heads = 1 for [T, D]); strides in floats.
struct RowAddr {
  int64_t stride_t, stride_h;
  int heads;
  __device__ int64_t operator()(int64_t r) const {
    return (r / heads) * stride_t + (r % heads) * stride_h;
  }
};

__global__ void rms_norm_kernel(const float* __restrict__ x, RowAddr xa,
                                const float* __restrict__ w, float eps, float* __restrict__ out,
                                RowAddr oa, int64_t n) {
  pdl_begin();
  const float* xr = x + xa(blockIdx.x);
  float* orow = out + oa(blockIdx.x);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  const float scale = rsqrtf(block_sum(ss) / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) orow[i] = xr[i] * scale * w[i];
}

__global__ void add_kernel(const float* a, int64_t as, const float* b, int64_t bs, float* out,
                           int64_t os, int64_t n) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    out[r * os + i] = a[r * as + i] + b[r * bs + i];
}

__global__ void scale_kernel(float* x, int64_t xs, float s, int64_t n) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[r * xs + i] *= s;
}

__global__ void fill_kernel(float* x, int64_t xs, float value, int64_t n) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[r * xs + i] = value;
}

// One block per source row; the rows are distinct, so no two blocks touch one output row. The
// product is rounded before the add (no fused multiply-add), as on the CPU.
__global__ void index_add_scaled_kernel(const float* __restrict__ src, int64_t ss,
                                        const int32_t* __restrict__ rows,
                                        const float* __restrict__ weights, float* out,
                                        int64_t os, int64_t n) {
  pdl_begin();
  const int64_t j = blockIdx.x;
  const float w = weights[j];
  float* o = out + rows[j] * os;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    o[i] = __fadd_rn(o[i], __fmul_rn(src[j * ss + i], w));
}

__global__ void add_bias_kernel(float* x, int64_t xs, const float* __restrict__ bias, int64_t n) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[r * xs + i] += bias[i];
}

struct RopeArgs {
  float inv_freq[kMaxRotaryPairs];
  float freq_factors[kMaxRotaryPairs];
  int half, heads;
  int64_t stride_t, stride_h;  // floats
  bool neox, ggml_theta, has_freq_factors;
  float mscale, theta_scale, freq_scale;
};

// The cos and sin (times mscale) of position pos for every rotary pair, into shared tables, by
// the block (ggml's repeated-product chain needs them in order: one thread then). The caller
// synchronises before reading them.
__device__ void rope_angles(int32_t pos, const RopeArgs& a, float* cos_s, float* sin_s) {
  if (a.ggml_theta) {
    if (threadIdx.x == 0) {
      float chain = float(pos);
      for (int i = 0; i < a.half; ++i) {
        const float ff = a.has_freq_factors ? a.freq_factors[i] : 1.0f;
        const float theta = a.freq_scale * (chain / ff);
        chain *= a.theta_scale;
        float s, c;
        sincosf(theta, &s, &c);
        cos_s[i] = c * a.mscale;
        sin_s[i] = s * a.mscale;
      }
    }
  } else {
    for (int i = threadIdx.x; i < a.half; i += blockDim.x) {
      float s, c;
      sincosf(float(pos) * a.inv_freq[i], &s, &c);
      cos_s[i] = c * a.mscale;
      sin_s[i] = s * a.mscale;
    }
  }
}

// Pair i of a rotated row: where its two lanes are, and the rotation itself.
__device__ __forceinline__ int rope_lane0(const RopeArgs& a, int i) { return a.neox ? i : 2 * i; }
__device__ __forceinline__ int rope_lane1(const RopeArgs& a, int i) {
  return a.neox ? i + a.half : 2 * i + 1;
}
__device__ __forceinline__ void rope_pair(float p, float q, float c, float s, float& out0,
                                          float& out1) {
  out0 = p * c - q * s;
  out1 = q * c + p * s;
}

// Token t's rotation, by one block: the angles first, then every (head, pair) rotated.
__device__ void rotate_token(float* x, int64_t t, int32_t pos, const RopeArgs& a) {
  __shared__ float cos_s[kMaxRotaryPairs], sin_s[kMaxRotaryPairs];
  rope_angles(pos, a, cos_s, sin_s);
  __syncthreads();
  for (int j = threadIdx.x; j < a.heads * a.half; j += blockDim.x) {
    const int h = j / a.half, i = j % a.half;
    float* v = x + t * a.stride_t + h * a.stride_h;
    const int i0 = rope_lane0(a, i), i1 = rope_lane1(a, i);
    rope_pair(v[i0], v[i1], cos_s[i], sin_s[i], v[i0], v[i1]);
  }
}

// One block per token.
__global__ void rope_kernel(float* x, const int32_t* __restrict__ positions, const RopeArgs a) {
  pdl_begin();
  rotate_token(x, blockIdx.x, positions[blockIdx.x], a);
}

// Where a token's k and v rows go: each cache holds a slot's row at slot * stride elements
// (stride = the row's width, or wider where the cache is a view of some lanes of a row).
template <typename C>
struct CacheRows {
  C* k;
  C* v;
  int64_t k_width, v_width, k_stride, v_stride;
};

template <typename C>
CacheRows<C> cache_rows(Tensor& k_cache, Tensor& v_cache) {
  return {k_cache.data<C>(), v_cache.data<C>(), k_cache.size(2) * k_cache.size(3),
          v_cache.size(2) * v_cache.size(3), row_stride(k_cache, 1), row_stride(v_cache, 1)};
}

// Token t's k and v rows (packed) into the caches at its slot (none when < 0).
template <typename C>
__device__ void cache_token(const float* k, int64_t ks, const float* v, int64_t vs,
                            const CacheRows<C>& c, int64_t t, int64_t slot) {
  if (slot < 0) return;
  for (int64_t i = threadIdx.x; i < c.k_width; i += blockDim.x)
    c.k[slot * c.k_stride + i] = from_float<C>(k[t * ks + i]);
  for (int64_t i = threadIdx.x; i < c.v_width; i += blockDim.x)
    c.v[slot * c.v_stride + i] = from_float<C>(v[t * vs + i]);
}

// The per-head RMS norms of HeadNorms, as arguments.
struct HeadNormArgs {
  const float* q_weight = nullptr;  // nullptr: no norms
  const float* k_weight = nullptr;
  float eps = 0.0f;
  int q_heads = 0;
};

// Heads of up to 32 x kRopeMaxPerLane lanes take the fused kernel; a block has at most
// kRopeWarps warps, one head each.
constexpr int kRopeMaxPerLane = 8;
constexpr int kRopeWarps = 8;

// Block (t, y) rotates token t's heads y * warps .. + warps, one warp a head, and writes its
// share of the token's v row to the cache. A warp reads its head's row into registers at once
// (the one dependent load of the kernel), RMS-norms it where norms are given (each lane sums
// the squares of its lanes in order and the warp reduces them as rms_norm_kernel does with its
// 32 threads, so heads of up to 128 lanes get rms_norm's bits), rotates it in the warp's shared
// row (rope_kernel's arithmetic), then writes it back to x and, for the k heads (the last kv
// heads of x), to the cache. The angles and the norm weights depend only on the step's inputs
// and the model, so they are read before the wait.
template <typename C>
__global__ void rope_cache_kernel(float* x, const int32_t* __restrict__ positions,
                                  const RopeArgs a, int head_dim, const float* __restrict__ v,
                                  int64_t vs, const CacheRows<C> c,
                                  const int32_t* __restrict__ slots, const HeadNormArgs norms) {
  constexpr int P = kRopeMaxPerLane;
  __shared__ float cos_s[kMaxRotaryPairs], sin_s[kMaxRotaryPairs];
  __shared__ float head_rows[kRopeWarps][32 * P];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int h = int(blockIdx.y) * int(blockDim.x / 32) + warp;
  const bool mine = h < a.heads;
  rope_angles(positions[t], a, cos_s, sin_s);
  const int64_t slot = slots[t];
  float w[P];
  if (norms.q_weight && mine) {
    const float* nw = h < norms.q_heads ? norms.q_weight : norms.k_weight;
#pragma unroll
    for (int j = 0; j < P; ++j) w[j] = lane + 32 * j < head_dim ? nw[lane + 32 * j] : 0.0f;
  }
  pdl_begin();
  float* xh = x + t * a.stride_t + int64_t(h) * a.stride_h;
  float y[P];
#pragma unroll
  for (int j = 0; j < P; ++j) y[j] = mine && lane + 32 * j < head_dim ? xh[lane + 32 * j] : 0.0f;
  if (slot >= 0)
    for (int64_t i = blockIdx.y * blockDim.x + threadIdx.x; i < c.v_width;
         i += int64_t(gridDim.y) * blockDim.x)
      c.v[slot * c.v_stride + i] = from_float<C>(v[t * vs + i]);
  __syncthreads();  // the angles
  if (!mine) return;
  if (norms.q_weight) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < P; ++j) ss += y[j] * y[j];  // lanes past the head hold zeros
    const float scale = rsqrtf(warp_sum(ss) / float(head_dim) + norms.eps);
#pragma unroll
    for (int j = 0; j < P; ++j) y[j] = y[j] * scale * w[j];
  }
  float* row = head_rows[warp];
#pragma unroll
  for (int j = 0; j < P; ++j) row[lane + 32 * j] = y[j];
  __syncwarp();
  for (int i = lane; i < a.half; i += 32) {
    const int i0 = rope_lane0(a, i), i1 = rope_lane1(a, i);
    rope_pair(row[i0], row[i1], cos_s[i], sin_s[i], row[i0], row[i1]);
  }
  __syncwarp();
  const int first_k = a.heads - int(c.k_width / head_dim);
  const bool cached = h >= first_k && slot >= 0;
  C* k_row = c.k + slot * c.k_stride + int64_t(h - first_k) * head_dim;
  for (int i = lane; i < head_dim; i += 32) {
    xh[i] = row[i];
    if (cached) k_row[i] = from_float<C>(row[i]);
  }
}

// MLA's per-token work between the projection and attention (mla_rope_and_cache), one block per
// token: the latent row RMS-normed in place, in rms_norm_kernel's order (its first norm_threads
// threads sum as rms_norm's block of that size does; the others add zeros), the query's
// rotary lanes rotated from q_in into q_out, the key's rotary lanes rotated in place (one
// angle table: both rows rotate by the same position and parameters), each value written to
// the cache row from the register that holds it. The bits of the plain ops (rope_kernel's
// arithmetic); one pass of loads and stores after the norm's sum.
template <typename C>
__global__ void mla_rope_cache_kernel(float* latent, int64_t ls, const float* __restrict__ norm_w,
                                      float eps, int lat, int norm_threads,
                                      const float* __restrict__ q_in, int64_t q_in_t,
                                      int64_t q_in_h, float* q_out, const RopeArgs aq,
                                      float* k_pe, const RopeArgs ak,
                                      const int32_t* __restrict__ positions,
                                      const CacheRows<C> c, const int32_t* __restrict__ slots) {
  __shared__ float cos_s[kMaxRotaryPairs], sin_s[kMaxRotaryPairs];
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  rope_angles(positions[t], aq, cos_s, sin_s);  // read after block_sum's barriers
  float* xr = latent + t * ls;
  const bool norm_thread = int(threadIdx.x) < norm_threads;
  float ss = 0.0f;
  if (norm_thread)
    for (int i = threadIdx.x; i < lat; i += norm_threads) ss += xr[i] * xr[i];
  const float scale = rsqrtf(block_sum(ss) / float(lat) + eps);
  if (norm_thread)
    for (int i = threadIdx.x; i < lat; i += norm_threads) {
      const float y = xr[i] * scale * norm_w[i];
      xr[i] = y;
      if (slot >= 0) c.k[slot * c.k_stride + i] = from_float<C>(y);
    }
  for (int j = threadIdx.x; j < aq.heads * aq.half; j += blockDim.x) {
    const int h = j / aq.half, i = j % aq.half;
    const float* in = q_in + t * q_in_t + h * q_in_h;
    float* out = q_out + t * aq.stride_t + h * aq.stride_h;
    const int i0 = rope_lane0(aq, i), i1 = rope_lane1(aq, i);
    rope_pair(in[i0], in[i1], cos_s[i], sin_s[i], out[i0], out[i1]);
  }
  for (int i = threadIdx.x; i < ak.half; i += blockDim.x) {  // one key head (host-checked)
    float* v = k_pe + t * ak.stride_t;
    const int i0 = rope_lane0(ak, i), i1 = rope_lane1(ak, i);
    float y0, y1;
    rope_pair(v[i0], v[i1], cos_s[i], sin_s[i], y0, y1);
    v[i0] = y0;
    v[i1] = y1;
    if (slot >= 0) {
      c.v[slot * c.v_stride + i0] = from_float<C>(y0);
      c.v[slot * c.v_stride + i1] = from_float<C>(y1);
    }
  }
}

// The gate activations of the gated MLPs.
struct Silu {
  __device__ static float apply(float x) { return silu(x); }
};
struct GeluTanh {  // PyTorch's gelu(x, approximate="tanh")
  __device__ static float apply(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  }
};

// ggml's CPU GELU: in and out through f16 (its table of f16 values), with ggml_gelu_f32's
// formula as GCC fuses it on x86; only tanhf's last bit can differ from the CPU's table.
struct GeluTanhF16 {
  __device__ static float apply(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float h = __half2float(__float2half_rn(x));
    const float v = 0.5f * h *
                    (1.0f + tanhf(0.79788456080286535587989211986876f * h *
                                  fmaf(0.044715f * h, h, 1.0f)));
    return __half2float(__float2half_rn(v));
  }
};

// out[r, i] = act(g) * u for g = gate_up[r, i], u = gate_up[r, f + i]; gate_up f32 or 16-bit.
// Row r = blockIdx.y; four elements per thread step where the rows are aligned for it.
template <typename Act, typename G>
__global__ void act_and_mul_kernel(const G* __restrict__ gu, int64_t gs,
                                   float* __restrict__ out, int64_t os, int64_t rows, int64_t f,
                                   bool vec4) {
  pdl_begin();
  const int64_t start = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const auto act_mul = [](float gv, float uv) { return Act::apply(gv) * uv; };
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {  // a grid holds 65,535 rows
    const G* g = gu + r * gs;
    const G* u = g + f;
    float* o = out + r * os;
    if (vec4) {
      for (int64_t i = 4 * start; i < f; i += 4 * step) {
        const float4 a = load4(g + i), b = load4(u + i);
        store4(o + i, make_float4(act_mul(a.x, b.x), act_mul(a.y, b.y), act_mul(a.z, b.z),
                                  act_mul(a.w, b.w)));
      }
    } else {
      for (int64_t i = start; i < f; i += step) o[i] = act_mul(to_float(g[i]), to_float(u[i]));
    }
  }
}

__global__ void softmax_kernel(const float* __restrict__ x, int64_t xs, float* __restrict__ out,
                               int64_t os, int64_t n) {
  pdl_begin();
  const float* in = x + blockIdx.x * xs;
  float* o = out + blockIdx.x * os;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, in[i]);
  mx = block_max(mx);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += (o[i] = expf(in[i] - mx));
  const float inv = 1.0f / block_sum(sum);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] *= inv;
}

template <typename C>
__global__ void reshape_and_cache_kernel(const float* __restrict__ k, int64_t ks,
                                         const float* __restrict__ v, int64_t vs,
                                         const CacheRows<C> c, const int32_t* __restrict__ slots) {
  pdl_begin();
  cache_token(k, ks, v, vs, c, blockIdx.x, slots[blockIdx.x]);
}

__global__ void copy_strided_kernel(const float* __restrict__ src, RowAddr sa,
                                    float* __restrict__ dst, RowAddr da, int64_t n) {
  pdl_begin();
  const float* s = src + sa(blockIdx.x);
  float* d = dst + da(blockIdx.x);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

// Argmax over column chunks: block (c, r) scans columns [c * len, (c + 1) * len) of row r and
// leaves its best (value, index) in pv/pi, or the index in out when there is one chunk.
constexpr int kArgmaxThreads = 256;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* __restrict__ x, int64_t xs, int64_t n, int64_t len,
                  float* __restrict__ pv, int32_t* __restrict__ pi, int32_t* __restrict__ out) {
  pdl_begin();
  const int64_t r = blockIdx.y, begin = blockIdx.x * len, end = min(n, begin + len);
  const float* row = x + r * xs;
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
#pragma unroll 8
  for (int64_t i = begin + threadIdx.x; i < end; i += kArgmaxThreads)
    argmax_pick(bv, bi, row[i], static_cast<int32_t>(i));
  block_argmax(bv, bi);
  if (threadIdx.x != 0) return;
  if (gridDim.x == 1) {
    out[r] = bi == INT32_MAX ? 0 : bi;  // a row of NaNs gives 0
  } else {
    pv[r * gridDim.x + blockIdx.x] = bv;
    pi[r * gridDim.x + blockIdx.x] = bi;
  }
}

__global__ void __launch_bounds__(32)
    argmax_merge_kernel(const float* __restrict__ pv, const int32_t* __restrict__ pi, int chunks,
                        int32_t* __restrict__ out) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  for (int c = threadIdx.x; c < chunks; c += 32)
    argmax_pick(bv, bi, pv[r * chunks + c], pi[r * chunks + c]);
  for (int o = 16; o > 0; o >>= 1)
    argmax_pick(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o));
  if (threadIdx.x == 0) out[r] = bi == INT32_MAX ? 0 : bi;
}

unsigned rows_grid(int64_t rows) {
  VLLM_CHECK(rows <= int64_t(INT32_MAX), "too many rows for one launch: ", rows);
  return static_cast<unsigned>(rows);
}

}  // namespace

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, int64_t first_id,
                            Tensor& out) {
  const int64_t t = ids.size(0), d = table.size(1);
  if (t == 0) return;
  VLLM_CHECK(ids.is_contiguous(), "embedding ids must be contiguous");
  dispatch_float_type(table.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch(embedding_kernel<T>, rows_grid(t), row_threads(d / 4), 0, stream_,
        ids.data<int32_t>(), table.data<T>(), row_stride(table), first_id, table.size(0),
        out.data<float>(), row_stride(out), d);
  });
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const int heads = x.ndim() == 3 ? static_cast<int>(x.size(1)) : 1;
  const int64_t rows = x.size(0) * heads, n = x.size(-1);
  if (rows == 0) return;
  const RowAddr xa{row_stride(x), x.ndim() == 3 ? row_stride(x, 1) : 0, heads};
  const RowAddr oa{row_stride(out), out.ndim() == 3 ? row_stride(out, 1) : 0, heads};
  launch(rms_norm_kernel, rows_grid(rows), row_threads(n / 4), 0, stream_,
      x.data<float>(), xa, weight.data<float>(), eps, out.data<float>(), oa, n);
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t rows = a.size(0), n = a.size(1);
  if (rows == 0) return;
  launch(add_kernel, rows_grid(rows), row_threads(n / 4), 0, stream_,
      a.data<float>(), row_stride(a), b.data<float>(), row_stride(b), out.data<float>(),
      row_stride(out), n);
}

void CudaBackend::add_bias(Tensor& x, const Tensor& bias) {
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0) return;
  launch(add_bias_kernel, rows_grid(rows), row_threads(n / 4), 0, stream_,
      x.data<float>(), row_stride(x), bias.data<float>(), n);
}

namespace {
RopeArgs rope_args(const Tensor& x, const RopeParams& params) {
  RopeArgs a{};
  a.half = params.rotary_dim / 2;
  VLLM_CHECK(a.half <= kMaxRotaryPairs, "rotary_dim ", params.rotary_dim, " beyond the CUDA limit");
  std::copy(params.inv_freq.begin(), params.inv_freq.end(), a.inv_freq);
  std::copy(params.freq_factors.begin(), params.freq_factors.end(), a.freq_factors);
  a.has_freq_factors = !params.freq_factors.empty();
  a.heads = static_cast<int>(x.size(1));
  a.stride_t = row_stride(x);
  a.stride_h = row_stride(x, 1);
  a.neox = params.neox;
  a.ggml_theta = params.ggml_theta;
  a.mscale = params.mscale;
  a.theta_scale = params.theta_scale;
  a.freq_scale = params.freq_scale;
  return a;
}
}  // namespace

void CudaBackend::rope(Tensor& x, const Tensor& positions, const RopeParams& params) {
  const int64_t t = x.size(0);
  if (t == 0) return;
  const RopeArgs a = rope_args(x, params);
  launch(rope_kernel, rows_grid(t), row_threads(a.heads * a.half), 0, stream_,
      x.data<float>(), positions.data<int32_t>(), a);
}

bool CudaBackend::rope_and_cache(Tensor& qk, const Tensor& positions, const RopeParams& params,
                                 const Tensor& /*k*/, const Tensor& v, Tensor& k_cache,
                                 Tensor& v_cache, const Tensor& slot_mapping,
                                 const HeadNorms* norms) {
  // Lane views of a wider cache row (MLA) take the plain ops. k is the last heads of qk
  // (checked by the front-ends), so the kernel writes it to the cache from its own rows.
  if (!fusion_enabled() || !k_cache.is_contiguous() || !v_cache.is_contiguous()) return false;
  const int64_t t = qk.size(0);
  if (t == 0) return true;
  const RopeArgs a = rope_args(qk, params);
  const int head_dim = static_cast<int>(qk.size(2));
  HeadNormArgs n;
  if (norms) {
    n.q_weight = norms->q_weight->data<float>();
    n.k_weight = norms->k_weight->data<float>();
    n.eps = norms->eps;
    n.q_heads = norms->q_heads;
  }
  // Longer heads take the plain ops.
  if (head_dim > 32 * kRopeMaxPerLane) return false;
  const int warps = std::min(a.heads, kRopeWarps);
  const dim3 grid(rows_grid(t), unsigned((a.heads + warps - 1) / warps));
  dispatch_cache_type(k_cache.dtype(), [&](auto* tag) {
    using C = std::remove_pointer_t<decltype(tag)>;
    launch(rope_cache_kernel<C>, grid, dim3(unsigned(32 * warps)), 0, stream_, qk.data<float>(),
           positions.data<int32_t>(), a, head_dim, v.data<float>(), row_stride(v),
           cache_rows<C>(k_cache, v_cache), slot_mapping.data<int32_t>(), n);
  });
  return true;
}

bool CudaBackend::mla_rope_and_cache(Tensor& latent, const Tensor& norm_weight, float eps,
                                     const Tensor& q_pe_in, Tensor& q_pe_out, Tensor& k_pe,
                                     const Tensor& positions, const RopeParams& params,
                                     Tensor& c_cache, Tensor& pe_cache,
                                     const Tensor& slot_mapping) {
  if (!fusion_enabled()) return false;
  const int64_t t = latent.size(0);
  if (t == 0) return true;
  const RopeArgs aq = rope_args(q_pe_out, params), ak = rope_args(k_pe, params);
  const int lat = static_cast<int>(latent.size(1));
  // The kernel writes the cache rows from the values it computes: the latent's lanes and one
  // key head's rotary lanes, exactly the rows' widths.
  if (c_cache.size(2) * c_cache.size(3) != lat || ak.heads != 1 ||
      pe_cache.size(2) * pe_cache.size(3) != 2 * ak.half)
    return false;
  const int norm_threads = row_threads(lat / 4);  // rms_norm's block for such a row
  const int threads = std::max(norm_threads, row_threads(int64_t(aq.heads) * aq.half));
  dispatch_float_type(c_cache.dtype(), [&](auto* tag) {
    using C = std::remove_pointer_t<decltype(tag)>;
    launch(mla_rope_cache_kernel<C>, rows_grid(t), threads, 0, stream_, latent.data<float>(),
        row_stride(latent), norm_weight.data<float>(), eps, lat, norm_threads,
        q_pe_in.data<float>(), row_stride(q_pe_in), row_stride(q_pe_in, 1),
        q_pe_out.data<float>(), aq, k_pe.data<float>(), ak, positions.data<int32_t>(),
        cache_rows<C>(c_cache, pe_cache), slot_mapping.data<int32_t>());
  });
  return true;
}

void CudaBackend::scale(Tensor& x, float s) {
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0) return;
  launch(scale_kernel, rows_grid(rows), row_threads(n / 4), 0, stream_, x.data<float>(),
      row_stride(x), s, n);
}

void CudaBackend::fill(Tensor& x, float value) {
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0) return;
  launch(fill_kernel, rows_grid(rows), row_threads(n / 4), 0, stream_, x.data<float>(),
      row_stride(x), value, n);
}

void CudaBackend::index_add_scaled(const Tensor& src, const Tensor& rows, const Tensor& weights,
                                   Tensor& out) {
  const int64_t n = src.size(0), cols = src.size(1);
  if (n == 0) return;
  launch(index_add_scaled_kernel, rows_grid(n), row_threads(cols / 4), 0, stream_,
      src.data<float>(), row_stride(src), rows.data<int32_t>(), weights.data<float>(),
      out.data<float>(), row_stride(out), cols);
}

void CudaBackend::silu_and_mul(const Tensor& gate_up, Tensor& out) {
  act_and_mul<Silu>(gate_up, out);
}

void CudaBackend::gelu_tanh_and_mul(const Tensor& gate_up, Tensor& out) {
  act_and_mul<GeluTanh>(gate_up, out);
}

void CudaBackend::gelu_tanh_f16_and_mul(const Tensor& gate_up, Tensor& out) {
  act_and_mul<GeluTanhF16>(gate_up, out);
}

template <typename Act>
void CudaBackend::act_and_mul(const Tensor& gate_up, Tensor& out) {
  const int64_t rows = out.size(0), f = out.size(1);
  if (rows == 0) return;
  const int64_t gs = row_stride(gate_up), os = row_stride(out);
  const bool vec4 =
      f % 4 == 0 && gs % 4 == 0 && os % 4 == 0 && aligned16(gate_up) && aligned16(out);
  const int64_t per_block = 256 * (vec4 ? 4 : 1);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((f + per_block - 1) / per_block, 64)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  dispatch_float_type(gate_up.dtype(), [&](auto* tag) {
    using G = std::remove_pointer_t<decltype(tag)>;
    launch(act_and_mul_kernel<Act, G>, grid, 256, 0, stream_, gate_up.data<G>(), gs,
        out.data<float>(), os, rows, f, vec4);
  });
}

void CudaBackend::softmax(const Tensor& x, Tensor& out) {
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0) return;
  launch(softmax_kernel, rows_grid(rows), row_threads(n / 4), 0, stream_,
      x.data<float>(), row_stride(x), out.data<float>(), row_stride(out), n);
}

void CudaBackend::reshape_and_cache(const Tensor& k, const Tensor& v, Tensor& k_cache,
                                    Tensor& v_cache, const Tensor& slot_mapping) {
  const int64_t t = k.size(0), row = std::max(k.size(1) * k.size(2), v.size(1) * v.size(2));
  if (t == 0) return;
  dispatch_cache_type(k_cache.dtype(), [&](auto* tag) {
    using C = std::remove_pointer_t<decltype(tag)>;
    launch(reshape_and_cache_kernel<C>, rows_grid(t), row_threads(row / 2), 0, stream_,
        k.data<float>(), row_stride(k), v.data<float>(), row_stride(v),
        cache_rows<C>(k_cache, v_cache), slot_mapping.data<int32_t>());
  });
}

void CudaBackend::copy_strided(const Tensor& src, Tensor& dst) {
  const int heads = src.ndim() == 3 ? static_cast<int>(src.size(1)) : 1;
  const int64_t rows = src.size(0) * heads, n = src.size(-1);
  if (rows == 0) return;
  const RowAddr sa{row_stride(src), src.ndim() == 3 ? row_stride(src, 1) : 0, heads};
  const RowAddr da{row_stride(dst), dst.ndim() == 3 ? row_stride(dst, 1) : 0, heads};
  launch(copy_strided_kernel, rows_grid(rows), row_threads(n), 0, stream_, src.data<float>(),
      sa, dst.data<float>(), da, n);
}

void CudaBackend::argmax_rows(const Tensor& x, Tensor& out) {
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0) return;
  VLLM_CHECK(n <= int64_t(INT32_MAX) && rows <= 65535, "argmax of ", rows, " x ", n);
  // Few rows (decode at small batch): spread each over blocks of >= 2,048 columns.
  const int64_t chunks =
      rows >= multiprocessors_
          ? 1
          : std::clamp<int64_t>(std::min((n + 2047) / 2048, 2 * multiprocessors_ / rows), 1, 1024);
  const int64_t len = (n + chunks - 1) / chunks;
  Tensor pv, pi;
  if (chunks > 1) {
    pv = Tensor::empty({rows * chunks}, DType::F32, device());
    pi = Tensor::empty({rows * chunks}, DType::I32, device());
  }
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(rows));
  launch(argmax_kernel, grid, kArgmaxThreads, 0, stream_,
      x.data<float>(), row_stride(x), n, len, chunks > 1 ? pv.data<float>() : nullptr,
      chunks > 1 ? pi.data<int32_t>() : nullptr, out.data<int32_t>());
  if (chunks > 1) {
    launch(argmax_merge_kernel, rows_grid(rows), 32, 0, stream_, pv.data<float>(),
        pi.data<int32_t>(), static_cast<int>(chunks), out.data<int32_t>());
  }
}

}  // namespace vllm::cuda
