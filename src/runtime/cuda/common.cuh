// Shared CUDA helpers: checked calls, element loads/stores by dtype, warp and block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "runtime/tensor.h"
#include "util/check.h"

#define VLLM_CUDA_CHECK(expr)                                                        \
  do {                                                                               \
    const cudaError_t vllm_err_ = (expr);                                            \
    VLLM_CHECK(vllm_err_ == cudaSuccess, "CUDA error: ", cudaGetErrorString(vllm_err_)); \
  } while (0)

namespace vllm::cuda {

// Programmatic dependent launch (sm_90 and later). Every kernel of this backend is launched
// with launch() below and starts with pdl_wait(), which returns once the kernels before it
// on the stream have finished and their writes are visible; then pdl_launch_dependents()
// lets the next kernel's blocks be scheduled while this one runs, so that the gap between
// kernels is spent on the next kernel's set-up (and, for the GEMV, its first weight loads,
// which depend on nothing). Every kernel must call pdl_wait() in every block before it ends:
// a kernel that skipped it could finish before its predecessor, and its successor would then
// read unfinished data.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Both, for kernels with nothing to do before their inputs are ready.
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_launch_dependents();
}

// 16 bytes of weights streamed once: read-only, and given no L1 line (x, read through L1 by
// some GEMV modes, keeps its lines). Against __ldg in one H200 call (docs/benchmarks.md):
// batch-1 decode 1.020x (1B shape), 1.031x (Qwen3-MoE layers), 1.008x (8B), 1.019x (8B FP8).
__device__ __forceinline__ uint4 load_streamed(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Two e4m3 values as floats, through f16 (exact: every e4m3 value is an f16 value).
__device__ __forceinline__ float2 e4m3x2_to_float2(__nv_fp8x2_storage_t v) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(v, __NV_E4M3)));
}

// Whether launches ask for programmatic serialization: devices of compute capability 9.0 and
// up, unless --no-cuda-pdl (KernelOptions::cuda_pdl, for A/B timing).
bool pdl_enabled();
// Whether matmul_fused and rope_and_cache use their fused kernels: unless --no-cuda-fusion
// (for A/B timing; the front-ends then run the plain ops).
bool fusion_enabled();
// Whether launch() runs `kernel` twice: those whose name contains --cuda-repeat-kernel (unset:
// none). A measuring aid with no profiler that sees inside graph replay: a step's time grows by
// what the kernel costs there. Outputs are then wrong wherever a kernel accumulates.
bool repeat_launch(const void* kernel);

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            const Args&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  // A bad configuration shows here, not at the next synchronisation.
  VLLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
  if (repeat_launch(reinterpret_cast<const void*>(kernel)))
    VLLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
// An e4m3 KV-cache element (--kv-cache-dtype fp8, scale 1): exact in f32.
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

// 16 bytes of weights as floats (8 of a 16-bit type, 4 of f32, 16 of e4m3: exact).
template <typename W>
__device__ __forceinline__ void unpack_piece(const uint4& u, float (&f)[16 / sizeof(W)]) {
  if constexpr (std::is_same_v<W, float>) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z),
    f[3] = __uint_as_float(u.w);
  } else if constexpr (std::is_same_v<W, __nv_fp8_e4m3>) {
    const auto* b = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 v = e4m3x2_to_float2(b[j]);
      f[2 * j] = v.x, f[2 * j + 1] = v.y;
    }
  } else {
    const W* h = reinterpret_cast<const W*>(&u);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = to_float(h[j]);
  }
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
// Saturating (beyond +-448: +-448) and rounded to nearest even, as vLLM's cache writes and the
// CPU backend's f32_to_fp8_e4m3 of the clamped value.
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);
}

// SiLU (x * sigmoid(x)) in the one order every kernel uses, so that a fused activation gives
// the bits of silu_and_mul.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// Four consecutive elements as f32 (16-byte aligned for f32, 8-byte for 16-bit types).
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
template <typename T>
__device__ __forceinline__ float4 load4(const T* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const T* h = reinterpret_cast<const T*>(&u);
  return make_float4(to_float(h[0]), to_float(h[1]), to_float(h[2]), to_float(h[3]));
}
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
template <typename T>
__device__ __forceinline__ void store4(T* p, float4 v) {
  uint2 u;
  T* h = reinterpret_cast<T*>(&u);
  h[0] = from_float<T>(v.x), h[1] = from_float<T>(v.y), h[2] = from_float<T>(v.z),
  h[3] = from_float<T>(v.w);
  *reinterpret_cast<uint2*>(p) = u;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x / 32;
  v = lane < nwarps ? partial[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x / 32;
  v = lane < nwarps ? partial[lane] : -INFINITY;
  return warp_max(v);
}

// Per-token FP8 quantization of one row x[0, k) held in registers: v = x (kNorm: rms_norm's
// x * rsqrt(mean x^2 + eps) * g), s = amax |v| / 448 (1 for an all-zero row), q[i] =
// e4m3(v[i] / s), saturating and rounded to nearest even; returns s to every thread. By one
// warp (kWarp) or the whole block, which must call it together (it synchronises); each thread
// reads kVecs float4s of x, so k <= 4 * kVecs * threads, k % 4 == 0, x and g 16-byte aligned,
// q 4-byte aligned (rows_fit_registers).
template <int kVecs, bool kNorm, bool kWarp>
__device__ __forceinline__ float quantize_row_fp8_cached(const float* __restrict__ x, int64_t k,
                                                         const float* __restrict__ g, float eps,
                                                         __nv_fp8_e4m3* __restrict__ q) {
  const int tid = kWarp ? int(threadIdx.x % 32) : int(threadIdx.x);
  const int threads = kWarp ? 32 : int(blockDim.x);
  const int n4 = int(k / 4);
  float4 v[kVecs];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int p = tid + j * threads;
    v[j] = p < n4 ? reinterpret_cast<const float4*>(x)[p] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kNorm)
      ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  }
  float amax = 0.0f;
  float norm = 1.0f;
  if constexpr (kNorm) norm = rsqrtf((kWarp ? warp_sum(ss) : block_sum(ss)) / float(k) + eps);
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int p = tid + j * threads;
    if (p >= n4) break;
    if constexpr (kNorm) {
      const float4 w = reinterpret_cast<const float4*>(g)[p];
      v[j] = make_float4(v[j].x * norm * w.x, v[j].y * norm * w.y, v[j].z * norm * w.z,
                         v[j].w * norm * w.w);
    }
    amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)),
                             fmaxf(fabsf(v[j].z), fabsf(v[j].w))));
  }
  amax = kWarp ? warp_max(amax) : block_max(amax);
  const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int p = tid + j * threads;
    if (p >= n4) break;
    const uint32_t b0 = __nv_fp8_e4m3(v[j].x / scale).__x;
    const uint32_t b1 = __nv_fp8_e4m3(v[j].y / scale).__x;
    const uint32_t b2 = __nv_fp8_e4m3(v[j].z / scale).__x;
    const uint32_t b3 = __nv_fp8_e4m3(v[j].w / scale).__x;
    reinterpret_cast<uint32_t*>(q)[p] = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
  }
  return scale;
}

// Whether rows of k values at x (row stride ldx), with norm weight g (or none) and e4m3 rows
// at q, meet quantize_row_fp8_cached's layout for kVecs float4s a thread of `threads`.
__host__ __device__ inline bool rows_fit_registers(const void* x, int64_t ldx, const void* g,
                                                   const void* q, int64_t k, int kVecs,
                                                   int threads) {
  return k % 4 == 0 && ldx % 4 == 0 && k <= int64_t(4) * kVecs * threads &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(g) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(q) % 4 == 0;
}

// quantize_row_fp8_cached's arithmetic by the whole block for any row: rows that fit 16
// float4s a thread take it; others are read twice (three times with the norm), a value a
// thread.
template <bool kNorm>
__device__ __forceinline__ float quantize_row_fp8(const float* __restrict__ x, int64_t k,
                                                  const float* __restrict__ g, float eps,
                                                  __nv_fp8_e4m3* __restrict__ q) {
  constexpr int kVecs = 16;
  if (rows_fit_registers(x, k, g, q, k, kVecs, int(blockDim.x)))  // one row: k its stride
    return quantize_row_fp8_cached<kVecs, kNorm, false>(x, k, g, eps, q);
  float norm = 1.0f;
  if constexpr (kNorm) {
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) ss += x[i] * x[i];
    norm = rsqrtf(block_sum(ss) / float(k) + eps);
  }
  const auto value = [&](int64_t i) { return kNorm ? x[i] * norm * g[i] : x[i]; };
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(value(i)));
  amax = block_max(amax);
  const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) q[i] = __nv_fp8_e4m3(value(i) / scale);
  return scale;
}

// Per-token FP8 quantization of `count` rows, one block a row: q[r, :] = e4m3 of row
// rows[r] of x (rows null: row r), or of rms_norm(that row) * g with kNorm; its scale in s[r]
// (quantize_row_fp8).
template <bool kNorm>
__global__ void quantize_rows_fp8_kernel(const float* __restrict__ x, int64_t ldx,
                                         const int32_t* __restrict__ rows,
                                         const float* __restrict__ g, float eps,
                                         __nv_fp8_e4m3* __restrict__ q, float* __restrict__ s,
                                         int64_t count, int64_t k) {
  pdl_begin();
  for (int64_t r = blockIdx.x; r < count; r += gridDim.x) {
    const float* src = x + int64_t(rows ? rows[r] : r) * ldx;
    const float scale = quantize_row_fp8<kNorm>(src, k, g, eps, q + r * k);
    if (threadIdx.x == 0) s[r] = scale;
  }
}

// Argmax reductions: ties go to the lower index, as in a left-to-right scan; NaN never wins.
__device__ __forceinline__ void argmax_pick(float& bv, int32_t& bi, float v, int32_t i) {
  if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

// The block's best (value, index) pair, in thread 0 (blockDim.x a multiple of 32).
__device__ __forceinline__ void block_argmax(float& bv, int32_t& bi) {
  __shared__ float sv[32];
  __shared__ int32_t si[32];
  for (int o = 16; o > 0; o >>= 1)
    argmax_pick(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sv[warp] = bv, si[warp] = bi;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < int(blockDim.x / 32); ++w) argmax_pick(bv, bi, sv[w], si[w]);
}

// Row stride of a tensor in elements of its dtype (rows of dim 0).
inline int64_t row_stride(const Tensor& t, int dim = 0) {
  const int64_t bytes = dtype_info(t.dtype()).block_bytes;
  VLLM_CHECK(t.stride_bytes(dim) % bytes == 0, "stride not a multiple of the element size");
  return t.stride_bytes(dim) / bytes;
}

// Whether a pointer, or a tensor's data, sits on a 16-byte boundary (vector loads need it).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
inline bool aligned16(const Tensor& t) { return aligned16(t.raw()); }

// Threads for a row kernel over n elements: a multiple of 32 up to 1024.
inline int row_threads(int64_t n) {
  int t = 32;
  while (t < 1024 && t < n) t *= 2;
  return t;
}

// Calls fn with a typed null pointer naming the element type of a plain dtype.
template <typename Fn>
void dispatch_float_type(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::F32: fn(static_cast<float*>(nullptr)); return;
    case DType::F16: fn(static_cast<__half*>(nullptr)); return;
    case DType::BF16: fn(static_cast<__nv_bfloat16*>(nullptr)); return;
    default: throw Error("dtype " + std::string(dtype_name(dt)) + " is not supported on CUDA");
  }
}

// The KV-cache element types: dispatch_float_type's, and e4m3 (--kv-cache-dtype fp8).
template <typename Fn>
void dispatch_cache_type(DType dt, Fn&& fn) {
  if (dt == DType::F8_E4M3) fn(static_cast<__nv_fp8_e4m3*>(nullptr));
  else dispatch_float_type(dt, fn);
}

}  // namespace vllm::cuda
