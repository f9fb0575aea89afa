// The decode GEMV. A launch fills the GPU once (a few blocks per multiprocessor) and each warp
// then walks its share of the output columns, one column at a time over all of K (or over
// one slice of K, with the other slices of the column on sibling warps: kSplit), keeping
// kDepth 16-byte weight loads per lane in flight across column boundaries: the weights stream
// without the gaps that short-lived blocks leave at their start and end. x is staged once per
// block in shared memory (times the norm weight, for kNorm, with the block's sum of squares
// giving the scale applied to each finished column); rows too long to stage read x through
// the cache instead, without the norm and silu fusions. FP8 weights (FP8_E4M3 in the device
// layout: e4m3 bytes, then one f32 scale per row) take 16 weights a load, each column's sum
// multiplied by its row's scale at the end; with --fp8-gemv-tensor-cores, where x staged as f16
// terms fits in shared memory, they go through the tensor cores instead (gemv_fp8_mma_kernel).
#include <cuda_fp8.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <type_traits>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/gemv.cuh"
#include "runtime/cuda/mma.cuh"
#include "runtime/kernel_options.h"

namespace vllm::cuda {
namespace {

constexpr int kMaxRows = 8;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Weight loads in flight per lane. Fewer than the 8 this kernel started with, for registers:
// at 6 (4 when sliced) the M = 1 kernels the decoder runs do not spill and fit 4 blocks per
// multiprocessor. Both steps down were faster on the H200 (docs/benchmarks.md).
constexpr int kDepth = 6;
constexpr size_t kMaxStagedBytes = 96 * 1024;

enum GemvMode : int {
  kPlain = 0, kNorm = 1, kAccumulate = 2, kSilu = 4, kStaged = 8, kRope = 16, kSplit = 32
};
// kSplit: `slices` warps of a block share each unit, one slice of K each; their column sums
// meet in shared memory and the block's first warp of the group finishes the column. Outputs
// with fewer columns than the GPU holds warps keep as many loads in flight as the long ones.
constexpr int kMaxSlices = kWarps;
constexpr int kSplitDepth = 4;  // weight loads in flight per lane of a sliced warp

constexpr int kMaxRopePairs = 64;  // head_dim <= 128

using Fp8 = __nv_fp8_e4m3;
template <typename W>
constexpr bool kIsFp8 = std::is_same_v<W, Fp8>;
// Weights in a 16-byte piece.
template <typename W>
constexpr int kPer = 16 / int(sizeof(W));
// The 16-bit KV cache the rope fusion writes: the weights' type, bf16 beside FP8 weights; or
// an e4m3 cache (GemvArgs::cache_e4m3) beside any weights.
template <typename W>
using CacheOf = std::conditional_t<kIsFp8<W>, __nv_bfloat16, W>;

template <typename W>
struct GemvArgs {
  const float* x;
  int64_t ldx;
  const W* w;
  int64_t k, n;  // w is [n, k]
  const float* row_scale;  // FP8: n f32 scales after the n * k bytes
  float* out;
  int64_t ldo;
  const float* norm_weight;  // kNorm
  float eps;
  float* normed_out;  // kNorm: block 0 also writes x * scale * norm_weight here (or null)
  int64_t ld_normed;
  int64_t units;  // output columns; for kSilu, (gate, up) column pairs (j, j + n / 2)
  int64_t stride;  // between a warp's units: warp group g takes units g, g + stride, ...
  int slices;      // kSplit: warps per unit (a power of 2), each over `slice_pieces` of K
  int slice_pieces;
  // kRope: out is qkv; units are the column pairs (i, i + D/2) of each q, k and v head; q and
  // k pairs are rotated as rope_kernel does, k and v pairs also written to the caches.
  const int32_t* positions;
  const int32_t* slots;
  void* k_cache;  // CacheOf<W>, or __nv_fp8_e4m3 where cache_e4m3
  void* v_cache;
  bool cache_e4m3;
  int q_heads, kv_heads, head_dim;
  float mscale;
  float inv_freq[kMaxRopePairs];
};

__device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ float2 to_float2(__half2 v) { return __half22float2(v); }

// The weights of a 16-byte piece as floats (e4m3 through f16, exactly). Measured on the H200
// (docs/benchmarks.md): these conversions beat unpacking by integer ops (shifts and masks into
// a 2^-120-scaled f32), 318 against 255 tok/s for the 8B shape's decode.
template <typename W>
__device__ __forceinline__ void unpack(const uint4& u, float (&f)[kPer<W>]) {
  if constexpr (kIsFp8<W>) {
    const auto* b = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 v = e4m3x2_to_float2(b[i]);
      f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
  } else {
    using W2 = std::conditional_t<std::is_same_v<W, __half>, __half2, __nv_bfloat162>;
    const auto* h = reinterpret_cast<const W2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = to_float2(h[i]);
      f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
  }
}

__device__ __forceinline__ float4 mul4(float4 a, float4 b) {
  return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
}
__device__ __forceinline__ float dot8(const float (&w)[8], float4 a, float4 b) {
  return w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y +
         w[6] * b.z + w[7] * b.w;
}
// FP8: a piece of 16, left to right.
__device__ __forceinline__ float dot16(const float (&w)[16], const float4 (&x)[4]) {
  float s = w[0] * x[0].x;
#pragma unroll
  for (int i = 1; i < 16; ++i) s += w[i] * reinterpret_cast<const float*>(x)[i];
  return s;
}

// kRope epilogue for row m of pair `unit` (head h, pair i) with values (x0, x1): q and k heads
// rotated by position with rope_kernel's arithmetic, k and v heads also written to the caches
// at the row's slot (none when < 0).
template <typename W>
__device__ void rotate_and_cache(const GemvArgs<W>& a, int m, int unit, float x0, float x1) {
  const int half = a.head_dim / 2, h = unit / half, i = unit % half;
  if (h < a.q_heads + a.kv_heads) {
    float s, c;
    sincosf(float(a.positions[m]) * a.inv_freq[i], &s, &c);
    c *= a.mscale, s *= a.mscale;
    const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
    x0 = r0, x1 = r1;
  }
  float* o = a.out + m * a.ldo + int64_t(h) * a.head_dim + i;
  o[0] = x0, o[half] = x1;
  const int64_t slot = a.slots[m];
  if (h < a.q_heads || slot < 0) return;
  const bool is_k = h < a.q_heads + a.kv_heads;
  const int kv_head = h - a.q_heads - (is_k ? 0 : a.kv_heads);
  const int64_t at = (slot * a.kv_heads + kv_head) * a.head_dim + i;
  const auto write = [&](auto* cache) {
    using C = std::remove_pointer_t<decltype(cache)>;
    cache[at] = from_float<C>(x0);
    cache[at + half] = from_float<C>(x1);
  };
  void* cache = is_k ? a.k_cache : a.v_cache;
  if (a.cache_e4m3) write(static_cast<__nv_fp8_e4m3*>(cache));
  else write(static_cast<CacheOf<W>*>(cache));
}

// kNorm: block 0 also writes x's normed rows (x * scale * norm weight, rms_norm's product
// order) where asked.
template <typename W, int M>
__device__ void write_normed_rows(const GemvArgs<W>& a, const float* scale) {
  if (!a.normed_out || blockIdx.x != 0) return;
#pragma unroll
  for (int m = 0; m < M; ++m)
    for (int i = threadIdx.x; i < int(a.k); i += kThreads)
      a.normed_out[m * a.ld_normed + i] = a.x[m * a.ldx + i] * scale[m] * a.norm_weight[i];
}

// A lane reads piece (16 bytes, kPer weights) step * 32 + lane of each column: a column takes
// `steps` steps, a unit 1 or 2 columns (silu: gate then up; rope: a rotated pair), and the
// warp's units follow each other.
template <typename W, int M, int Mode>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const GemvArgs<W> a) {
  constexpr bool kNormed = Mode & kNorm, kStage = Mode & kStaged, kRotate = Mode & kRope;
  constexpr bool kPairs = (Mode & kSilu) || kRotate, kSliced = Mode & kSplit;
  constexpr int kColumns = kPairs ? 2 : 1;
  constexpr int kLoads = kSliced ? kSplitDepth : kDepth;
  constexpr int kP = kPer<W>, kQuads = kP / 4;
  // Staged x of row m: staged[2m][p] and staged[2m + 1][p] hold x[8p..8p+3] and x[8p+4..8p+7],
  // so that consecutive lanes read consecutive 16-byte words. FP8 (16 weights a piece):
  // staged[4m + q][p] holds x[16p + 4q .. + 3].
  extern __shared__ float4 staged[];
  __shared__ float scale[M];
  __shared__ float slice_sums[kSliced ? 2 : 1][kSliced ? kWarps : 1][M];  // by column parity
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Counters fit 32 bits (gemv_applies checks the sizes); fewer registers, more warps.
  const int slices = kSliced ? a.slices : 1, slice = warp % slices;
  const int groups = kWarps / slices;  // of the block
  const int first = blockIdx.x * groups + warp / slices;
  const int all_pieces = int(a.k / kP);
  const int begin = kSliced ? slice * a.slice_pieces : 0;
  const int pieces = kSliced ? min(begin + a.slice_pieces, all_pieces) : all_pieces;  // end
  const int steps = ((kSliced ? a.slice_pieces : all_pieces) + 31) / 32;
  const int half = kRotate ? a.head_dim / 2 : int(a.n / 2);  // between a pair's columns
  const int stride = int(a.stride), all_units = int(a.units);
  // Sliced warps meet at every column end, so all warps of a block walk as many units as its
  // first group does; those past the last unit load nothing and write nothing.
  const int lead = kSliced ? blockIdx.x * groups : first;
  const int units = lead < all_units ? (all_units - 1 - lead) / stride + 1 : 0;
  const int total = units * kColumns * steps;
  const auto column_of = [&](int unit, int column) {
    if constexpr (kRotate) return (unit / half) * a.head_dim + unit % half + column * half;
    return unit + (kPairs ? column * half : 0);
  };
  const auto row = [&](int unit, int column) {
    const int64_t c = column_of(unit < all_units ? unit : 0, column);
    return reinterpret_cast<const uint4*>(a.w + c * a.k);  // FP8: bytes, a.k a row
  };

  // The load cursor runs kDepth pieces ahead of the compute cursor below.
  int l_item = 0, l_step = 0, l_unit = first, l_column = 0;
  const uint4* l_row = row(l_unit, 0);
  const auto load_next = [&](uint4& dst) {
    const int p = begin + l_step * 32 + lane;
    const bool valid = l_item < total && p < pieces && (!kSliced || l_unit < all_units);
    dst = valid ? load_streamed(l_row + p) : make_uint4(0, 0, 0, 0);
    ++l_item;
    if (++l_step == steps) {
      l_step = 0;
      if (++l_column == kColumns) l_column = 0, l_unit += stride;
      l_row = row(l_unit, l_column);
    }
  };
  uint4 buf[kLoads];
#pragma unroll
  for (int u = 0; u < kLoads; ++u) load_next(buf[u]);
  pdl_begin();  // the weights depend on no earlier kernel; x does

  if constexpr (kStage) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float ss = 0.0f;
      for (int p = threadIdx.x; p < all_pieces; p += kThreads) {
        if constexpr (kIsFp8<W>) {
          const float4* xp = reinterpret_cast<const float4*>(a.x + m * a.ldx + p * kP);
          float4 v[kQuads];
#pragma unroll
          for (int q = 0; q < kQuads; ++q) v[q] = xp[q];
          if constexpr (kNormed) {
#pragma unroll
            for (int q = 0; q < kQuads; q += 2)  // the sum in the 16-bit kernels' order
              ss += v[q].x * v[q].x + v[q].y * v[q].y + v[q].z * v[q].z + v[q].w * v[q].w +
                    v[q + 1].x * v[q + 1].x + v[q + 1].y * v[q + 1].y +
                    v[q + 1].z * v[q + 1].z + v[q + 1].w * v[q + 1].w;
            const float4* g = reinterpret_cast<const float4*>(a.norm_weight + p * kP);
#pragma unroll
            for (int q = 0; q < kQuads; ++q) v[q] = mul4(v[q], g[q]);
          }
#pragma unroll
          for (int q = 0; q < kQuads; ++q) staged[(kQuads * m + q) * all_pieces + p] = v[q];
        } else {  // the 16-bit kernels' own code, unchanged
          const float4* xp = reinterpret_cast<const float4*>(a.x + m * a.ldx + p * 8);
          float4 lo = xp[0], hi = xp[1];
          if constexpr (kNormed) {
            ss += lo.x * lo.x + lo.y * lo.y + lo.z * lo.z + lo.w * lo.w + hi.x * hi.x +
                  hi.y * hi.y + hi.z * hi.z + hi.w * hi.w;
            const float4* g = reinterpret_cast<const float4*>(a.norm_weight + p * 8);
            lo = mul4(lo, g[0]), hi = mul4(hi, g[1]);
          }
          staged[2 * m * all_pieces + p] = lo;
          staged[(2 * m + 1) * all_pieces + p] = hi;
        }
      }
      if constexpr (kNormed) {
        ss = block_sum(ss);
        if (threadIdx.x == 0) scale[m] = rsqrtf(ss / float(a.k) + a.eps);
      }
    }
    __syncthreads();
    if constexpr (kNormed) write_normed_rows<W, M>(a, scale);
  }

  float acc[M] = {}, first_of_pair[M] = {};  // kPairs: the gate, or x0
  int c_step = 0, c_unit = first, c_column = 0, parity = 0;
  for (int it = 0; it < total; it += kLoads) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (it + u < total) {
        const int p = begin + c_step * 32 + lane;
        if (p < pieces) {
          float wf[kP];
          unpack<W>(buf[u], wf);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            if constexpr (kIsFp8<W>) {
              float4 xq[kQuads];
              const float4* xp = reinterpret_cast<const float4*>(a.x + m * a.ldx + p * kP);
#pragma unroll
              for (int q = 0; q < kQuads; ++q)
                xq[q] = kStage ? staged[(kQuads * m + q) * all_pieces + p] : __ldg(xp + q);
              acc[m] += dot16(wf, xq);
            } else if constexpr (kStage) {
              acc[m] += dot8(wf, staged[2 * m * all_pieces + p],
                             staged[(2 * m + 1) * all_pieces + p]);
            } else {
              const float4* xp = reinterpret_cast<const float4*>(a.x + m * a.ldx + p * 8);
              acc[m] += dot8(wf, __ldg(xp), __ldg(xp + 1));
            }
          }
        }
        if (++c_step == steps) {  // column finished: lane m writes row m
          c_step = 0;
          bool finish = true;
          if constexpr (kSliced) {  // the group's first warp adds the slices in order
#pragma unroll
            for (int m = 0; m < M; ++m) {
              const float v = warp_sum(acc[m]);
              if (lane == m) slice_sums[parity][warp][m] = v;
            }
            __syncthreads();
            finish = slice == 0 && c_unit < all_units;
          }
#pragma unroll
          for (int m = 0; m < M; ++m) {
            float v = 0.0f;
            if constexpr (kSliced) {
              if (finish)
                for (int s = 0; s < slices; ++s) v += slice_sums[parity][warp + s][m];
            } else {
              v = warp_sum(acc[m]);
            }
            acc[m] = 0.0f;
            if (!finish) continue;
            if constexpr (kIsFp8<W>) v *= a.row_scale[column_of(c_unit, c_column)];
            if constexpr (kNormed) v *= scale[m];
            if constexpr (kRotate) {
              if (c_column == 0) first_of_pair[m] = v;
              else if (lane == m) rotate_and_cache(a, m, c_unit, first_of_pair[m], v);
            } else if constexpr (kPairs) {
              if (c_column == 0) first_of_pair[m] = v;
              else if (lane == m) a.out[m * a.ldo + c_unit] = silu(first_of_pair[m]) * v;
            } else if (lane == m) {
              if constexpr (Mode & kAccumulate) a.out[m * a.ldo + c_unit] += v;
              else a.out[m * a.ldo + c_unit] = v;
            }
          }
          if (++c_column == kColumns) c_column = 0, c_unit += stride;
          parity ^= 1;
        }
      }
      load_next(buf[u]);
    }
  }
}

// FP8 weights through the tensor cores (--fp8-gemv-tensor-cores; not the default: slower than
// the CUDA-core kernel so far, docs/benchmarks.md). The CUDA-core kernel above widens every
// e4m3 byte to f32 (two conversions a weight), and conversions run at an eighth of the FMA
// rate, which may be what holds the 8B shape's FP8 decode to 60% of its roofline on the H200.
// Here a warp takes a tile of 16 weight rows, converts e4m3 pairs to f16 pairs (one conversion
// for two weights) and multiplies them with the m16n8k16 MMA: the 16 x 16 weight block of a
// step against x's rows as the 8 columns (row m of x is column m; M <= 8). A lane holds 16
// consecutive bytes of its two rows, so K is visited in a permuted order, the same for both
// operands: in step j of a 64-wide chunk, lane quad t's slots (2t, 2t+1) and (2t+8, 2t+9) are
// k = 16t + 4j + (0, 1) and (2, 3). x is staged once per block, in one pass, as two f16 terms
// (hi + lo, 22 of f32's 24 bits) of x times a power of two per row and chunk of 64 that puts
// the chunk's largest |x| in [2^14, 2^15), so neither range nor subnormals lose what f32 would
// keep; each step's two MMAs start from zero, and a chunk's sum is scaled back and added to
// f32 accumulators, so sums longer than one step round as f32 does.
constexpr int kChunk = 64;          // K of a warp's step over a tile: 4 lanes x 16 bytes
constexpr int kChunkDepth = 4;      // chunks in flight per lane (two 16-byte loads each)
constexpr int kStagePad = 4;        // 16-byte words after each staged row: rows 64 B apart
constexpr int kTargetWarpsPerSm = 16;

__device__ __forceinline__ uint32_t e4m3x2_to_half2_bits(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Staged x: for each 4 values of a row, {hi(0,1), hi(2,3), lo(0,1), lo(2,3)} as f16 pairs
// (one 16-byte word: the two B registers of both MMAs of a step), word (chunk c, lane quad t,
// step j) at c * 16 + j * 4 + t, so that a step's four lanes read 64 consecutive bytes.
__host__ __device__ inline int64_t fp8_mma_row_words(int64_t k) {
  return (k + kChunk - 1) / kChunk * (kChunk / 4) + kStagePad;
}
// The terms, then one f32 a row and chunk: the power of two that undoes the chunk's scale.
size_t fp8_mma_staged_bytes(int64_t m, int64_t k) {
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  return size_t(m * fp8_mma_row_words(k)) * 16 + size_t(m * chunks) * sizeof(float);
}

template <int M, int Mode>
__global__ void __launch_bounds__(kThreads) gemv_fp8_mma_kernel(const GemvArgs<Fp8> a) {
  constexpr bool kNormed = Mode & kNorm, kRotate = Mode & kRope;
  constexpr bool kPairs = (Mode & kSilu) || kRotate;
  constexpr int kUnitsPerTile = kPairs ? 8 : 16;
  extern __shared__ uint4 xs[];
  __shared__ float norm_scale[M];
  __shared__ float4 partial[kWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int slices = a.slices, slice = warp % slices, per_block = kWarps / slices;
  const int k = int(a.k), row_words = int(fp8_mma_row_words(a.k));
  const int chunks = (k + kChunk - 1) / kChunk, pieces = k / 16;
  float* const unscale = reinterpret_cast<float*>(xs + M * row_words);  // [M][chunks]
  const int c_begin = min(chunks, slice * a.slice_pieces);
  const int c_end = min(chunks, c_begin + a.slice_pieces);
  const int units = int(a.units), half = kRotate ? a.head_dim / 2 : int(a.n / 2);
  const int tiles = (units + kUnitsPerTile - 1) / kUnitsPerTile;
  const auto column_of = [&](int unit, int column) {
    if constexpr (kRotate) return (unit / half) * a.head_dim + unit % half + column * half;
    return unit + (kPairs ? column * half : 0);
  };
  // The weight rows of tile row g and g + 8: two units' rows, or a pair unit's two columns.
  const auto rows_of = [&](int tile, const uint4*& ra, const uint4*& rb) {
    int ca, cb;
    if constexpr (kPairs) {
      const int unit = min(tile * kUnitsPerTile + g, units - 1);
      ca = column_of(unit, 0), cb = column_of(unit, 1);
    } else {
      ca = min(tile * kUnitsPerTile + g, units - 1);
      cb = min(tile * kUnitsPerTile + g + 8, units - 1);
    }
    const auto* w = reinterpret_cast<const uint8_t*>(a.w);
    ra = reinterpret_cast<const uint4*>(w + int64_t(ca) * k);
    rb = reinterpret_cast<const uint4*>(w + int64_t(cb) * k);
  };
  const auto load = [&](const uint4* ra, const uint4* rb, int c, uint4& da, uint4& db) {
    const int p = c * 4 + t;
    const bool valid = c < c_end && p < pieces;
    da = valid ? load_streamed(ra + p) : make_uint4(0, 0, 0, 0);
    db = valid ? load_streamed(rb + p) : make_uint4(0, 0, 0, 0);
  };

  // The first tile's first weights depend on no earlier kernel: in flight before x is ready.
  int tile = blockIdx.x * per_block + warp / slices;
  const uint4 *ra, *rb;
  rows_of(min(tile, tiles - 1), ra, rb);
  uint4 wa[kChunkDepth], wb[kChunkDepth];
#pragma unroll
  for (int d = 0; d < kChunkDepth; ++d) load(ra, rb, c_begin + d, wa[d], wb[d]);
  pdl_begin();

  // Stage x (times the norm weight), a 16-byte word (4 values) a thread: a chunk's 16 words
  // fall to a half warp, whose largest |x| sets the chunk's scale.
  const unsigned half_warp = 0xffffu << (lane & 16);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float* xr = a.x + m * a.ldx;
    float ss = 0.0f;
    for (int q = threadIdx.x; q < chunks * (kChunk / 4); q += kThreads) {
      const int i = q * 4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < k) {
        v = *reinterpret_cast<const float4*>(xr + i);
        if constexpr (kNormed) {
          ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
          v = mul4(v, *reinterpret_cast<const float4*>(a.norm_weight + i));
        }
      }
      float mx = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
      for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(half_warp, mx, o));
      int e = 0;  // mx < 2^e; 0 for zeros, infinities or NaN (they stay what they are)
      if (mx > 0.0f && mx <= 3.4e38f) frexpf(mx, &e);
      e = max(e, -100);  // 2^(15 - e) stays finite
      const float up = ldexpf(1.0f, 15 - e);
      const float f[4] = {v.x * up, v.y * up, v.z * up, v.w * up};
      __half hi[4], lo[4];
#pragma unroll
      for (int i4 = 0; i4 < 4; ++i4) {
        hi[i4] = __float2half_rn(f[i4]);
        lo[i4] = __float2half_rn(f[i4] - __half2float(hi[i4]));
      }
      const auto pair = [](__half x0, __half x1) {
        return uint32_t(__half_as_ushort(x0)) | (uint32_t(__half_as_ushort(x1)) << 16);
      };
      const int c = q / 16, within = q % 16;  // within = 4t + j
      xs[m * row_words + c * 16 + (within % 4) * 4 + within / 4] =
          make_uint4(pair(hi[0], hi[1]), pair(hi[2], hi[3]), pair(lo[0], lo[1]),
                     pair(lo[2], lo[3]));
      if (within == 0) unscale[m * chunks + c] = ldexpf(1.0f, e - 15);
    }
    if constexpr (kNormed) {
      ss = block_sum(ss);
      if (threadIdx.x == 0) norm_scale[m] = rsqrtf(ss / float(a.k) + a.eps);
    }
  }
  __syncthreads();
  if constexpr (kNormed) write_normed_rows<Fp8, M>(a, norm_scale);

  const int tile_step = gridDim.x * per_block;
  const int rounds = (tiles - blockIdx.x * per_block + tile_step - 1) / tile_step;  // per block
  for (int round = 0; round < rounds; ++round, tile += tile_step) {
    if (round > 0) {
      rows_of(min(tile, tiles - 1), ra, rb);
#pragma unroll
      for (int d = 0; d < kChunkDepth; ++d) load(ra, rb, c_begin + d, wa[d], wb[d]);
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int m0 = min(2 * t, M - 1), m1 = min(2 * t + 1, M - 1);  // this lane's x rows
    for (int c = c_begin; c < c_end; c += kChunkDepth) {
#pragma unroll
      for (int d = 0; d < kChunkDepth; ++d) {
        if (c + d < c_end) {
          float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          uint32_t fa[8], fb[8];  // f16 pairs of rows g and g + 8, bytes (2i, 2i + 1)
          const uint32_t* ua = reinterpret_cast<const uint32_t*>(&wa[d]);
          const uint32_t* ub = reinterpret_cast<const uint32_t*>(&wb[d]);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            fa[i] = e4m3x2_to_half2_bits(ua[i / 2] >> (16 * (i % 2)));
            fb[i] = e4m3x2_to_half2_bits(ub[i / 2] >> (16 * (i % 2)));
          }
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint4 xv = g < M ? xs[g * row_words + (c + d) * 16 + j * 4 + t]
                                   : make_uint4(0, 0, 0, 0);
            const uint32_t frag[4] = {fa[2 * j], fb[2 * j], fa[2 * j + 1], fb[2 * j + 1]};
            float step[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma<__half>(step, frag, xv.x, xv.y);
            mma<__half>(step, frag, xv.z, xv.w);
#pragma unroll
            for (int r = 0; r < 4; ++r) sum[r] += step[r];
          }
          const float u0 = unscale[m0 * chunks + c + d], u1 = unscale[m1 * chunks + c + d];
          acc[0] = fmaf(sum[0], u0, acc[0]), acc[1] = fmaf(sum[1], u1, acc[1]);
          acc[2] = fmaf(sum[2], u0, acc[2]), acc[3] = fmaf(sum[3], u1, acc[3]);
        }
        load(ra, rb, c + d + kChunkDepth, wa[d], wb[d]);
      }
    }
    if (slices > 1) {  // the tile's first warp adds the slices in order
      partial[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      __syncthreads();
      if (slice == 0) {
        float4 sum = partial[warp][lane];
        for (int s = 1; s < slices; ++s) {
          const float4 v = partial[warp + s][lane];
          sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
        }
        acc[0] = sum.x, acc[1] = sum.y, acc[2] = sum.z, acc[3] = sum.w;
      }
      __syncthreads();  // partial[] is written again by the next round
    }
    if (slice != 0 || tile >= tiles) continue;
    // Lane (g, t) holds rows g and g + 8 of the tile for x rows 2t and 2t + 1.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = 2 * t + h;
      if (m >= M) continue;
      float v0 = acc[h], v1 = acc[2 + h];
      if constexpr (kPairs) {
        const int unit = tile * kUnitsPerTile + g;
        if (unit >= units) continue;
        v0 *= a.row_scale[column_of(unit, 0)], v1 *= a.row_scale[column_of(unit, 1)];
        if constexpr (kNormed) v0 *= norm_scale[m], v1 *= norm_scale[m];
        if constexpr (kRotate) rotate_and_cache(a, m, unit, v0, v1);
        else a.out[m * a.ldo + unit] = silu(v0) * v1;
      } else {
        const int units2[2] = {tile * kUnitsPerTile + g, tile * kUnitsPerTile + g + 8};
        const float vs[2] = {v0, v1};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (units2[r] >= units) continue;
          float v = vs[r] * a.row_scale[units2[r]];
          if constexpr (kNormed) v *= norm_scale[m];
          if constexpr (Mode & kAccumulate) a.out[m * a.ldo + units2[r]] += v;
          else a.out[m * a.ldo + units2[r]] = v;
        }
      }
    }
  }
}

// Blocks of `kernel` resident at once on one multiprocessor with `smem` bytes staged.
template <typename Kernel>
int resident_blocks(Kernel kernel, size_t smem, bool staged) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, size_t>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), smem);
  auto it = known.find(key);
  if (it == known.end()) {
    if (staged)
      VLLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(kMaxStagedBytes)));
    int n = 0;
    VLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem));
    it = known.emplace(key, std::max(n, 1)).first;
  }
  return it->second;
}

// Warps per unit: 2 for columns of 4,096 weights or more, then doubled while the units still
// fill no more than the resident warps and each slice keeps at least a warp-wide step of K.
// Measured on the H200 (docs/benchmarks.md): the second rule took the 1B shape's decode from
// 955 to 1,003 tok/s; 2 slices everywhere took the 8B's from 222 to 226 but cost the 1B 1%
// on its 2,048-wide columns, hence the first rule's bound.
int choose_slices(int64_t units, int64_t resident_warps, int64_t pieces) {
  const int forced = kernel_options().gemv_slices;  // --gemv-slices, for A/B runs and tests
  const auto more = [&](int slices) {
    if (slices >= kMaxSlices || pieces < int64_t(slices) * 2 * 32) return false;
    if (forced) return slices < forced;
    return (slices == 1 && pieces >= 512) || units * slices * 2 <= resident_warps;
  };
  int slices = 1;
  while (more(slices)) slices *= 2;
  return slices;
}

// As many blocks as fit at once (`per_sm` on each multiprocessor), but none without a unit
// for each of its warp groups: the most weight loads in flight, and no second wave.
template <typename W, int M, int Mode>
void launch_kernel(GemvArgs<W> args, int slices, int per_sm, size_t smem, int multiprocessors,
                   cudaStream_t stream) {
  const int64_t groups = kWarps / slices;
  const int64_t blocks = std::min<int64_t>(int64_t(per_sm) * multiprocessors,
                                           (args.units + groups - 1) / groups);
  args.stride = blocks * groups;
  args.slices = slices;
  const int64_t pieces = args.k / kPer<W>, per_slice = (pieces + slices - 1) / slices;
  args.slice_pieces = static_cast<int>((per_slice + 31) / 32 * 32);
  launch(gemv_kernel<W, M, Mode>, static_cast<unsigned>(blocks), kThreads, smem, stream, args);
}

template <typename W, int M, int Mode>
void launch_rows(const GemvArgs<W>& args, size_t smem, int multiprocessors,
                 cudaStream_t stream) {
  constexpr bool kStage = Mode & kStaged;
  const int split_per_sm = resident_blocks(gemv_kernel<W, M, Mode | kSplit>, smem, kStage);
  const int slices =
      choose_slices(args.units, int64_t(split_per_sm) * multiprocessors * kWarps,
                    args.k / kPer<W>);
  if (slices > 1) {
    launch_kernel<W, M, Mode | kSplit>(args, slices, split_per_sm, smem, multiprocessors, stream);
  } else {
    const int per_sm = resident_blocks(gemv_kernel<W, M, Mode>, smem, kStage);
    launch_kernel<W, M, Mode>(args, 1, per_sm, smem, multiprocessors, stream);
  }
}

// FP8 through the tensor cores: slices of K (as the CUDA-core kernel's kSplit) while the tiles
// leave the GPU short of kTargetWarpsPerSm warps a multiprocessor and each slice keeps two
// chunks; the count depends on the shape only, not on the rows of x.
template <int M, int Mode>
void launch_fp8_mma_rows(GemvArgs<Fp8> a, int multiprocessors, cudaStream_t stream) {
  const auto kernel = gemv_fp8_mma_kernel<M, Mode>;
  const size_t smem = fp8_mma_staged_bytes(M, a.k);
  const int per_sm = resident_blocks(kernel, smem, true);
  constexpr int64_t kPerTile = (Mode & (kSilu | kRope)) ? 8 : 16;
  const int64_t tiles = (a.units + kPerTile - 1) / kPerTile;
  const int64_t chunks = (a.k + kChunk - 1) / kChunk;
  const int forced = kernel_options().gemv_slices;
  int slices = 1;
  while (slices < kMaxSlices && chunks >= 4 * slices &&
         (forced ? slices < forced : tiles * slices < kTargetWarpsPerSm * multiprocessors))
    slices *= 2;
  a.slices = slices;
  a.slice_pieces = static_cast<int>((chunks + slices - 1) / slices);  // chunks here
  const int64_t per_block = kWarps / slices;
  const int64_t blocks =
      std::min<int64_t>(int64_t(per_sm) * multiprocessors, (tiles + per_block - 1) / per_block);
  launch(kernel, static_cast<unsigned>(blocks), kThreads, smem, stream, a);
}

template <int Mode>
void launch_fp8_mma(const GemvArgs<Fp8>& a, int64_t m, int multiprocessors,
                    cudaStream_t stream) {
  switch (m) {
#define VLLM_GEMV_CASE(M)                                           \
  case M:                                                           \
    launch_fp8_mma_rows<M, Mode>(a, multiprocessors, stream);       \
    break;
    VLLM_GEMV_CASE(1) VLLM_GEMV_CASE(2) VLLM_GEMV_CASE(3) VLLM_GEMV_CASE(4)
    VLLM_GEMV_CASE(5) VLLM_GEMV_CASE(6) VLLM_GEMV_CASE(7) VLLM_GEMV_CASE(8)
#undef VLLM_GEMV_CASE
    default: VLLM_CHECK(false, "gemv rows ", m);
  }
}

template <typename W, int Mode>
void launch_mode(const GemvArgs<W>& args, int64_t m, size_t smem, int multiprocessors,
                 cudaStream_t stream) {
  switch (m) {
#define VLLM_GEMV_CASE(M)                                                   \
  case M:                                                                   \
    launch_rows<W, M, Mode>(args, smem, multiprocessors, stream);           \
    break;
    VLLM_GEMV_CASE(1) VLLM_GEMV_CASE(2) VLLM_GEMV_CASE(3) VLLM_GEMV_CASE(4)
    VLLM_GEMV_CASE(5) VLLM_GEMV_CASE(6) VLLM_GEMV_CASE(7) VLLM_GEMV_CASE(8)
#undef VLLM_GEMV_CASE
    default: VLLM_CHECK(false, "gemv rows ", m);
  }
}

size_t staged_bytes(const Tensor& x) { return size_t(x.size(0) * x.size(1)) * sizeof(float); }

template <typename W>
void launch_typed(const Tensor& x, const Tensor& w, Tensor& out, const MatmulFusion& f,
                  int multiprocessors, cudaStream_t stream) {
  GemvArgs<W> a{};
  a.x = x.data<float>(), a.ldx = row_stride(x);
  a.w = w.data<W>(), a.k = w.size(1), a.n = w.size(0);
  if constexpr (kIsFp8<W>)
    a.row_scale = reinterpret_cast<const float*>(w.data<uint8_t>() + a.n * a.k);
  a.out = out.data<float>(), a.ldo = row_stride(out);
  if (f.norm_weight) a.norm_weight = f.norm_weight->data<float>(), a.eps = f.eps;
  if (f.normed_out)
    a.normed_out = f.normed_out->data<float>(), a.ld_normed = row_stride(*f.normed_out);
  a.units = f.silu_and_mul || f.rope_cache ? w.size(0) / 2 : w.size(0);
  const int64_t m = x.size(0);
  const size_t smem = staged_bytes(x);
  const int sms = multiprocessors;
  if (const RopeCacheFusion* rc = f.rope_cache) {
    const RopeParams& p = *rc->params;
    a.positions = rc->positions->data<int32_t>();
    a.slots = rc->slot_mapping->data<int32_t>();
    a.k_cache = rc->k_cache->raw(), a.v_cache = rc->v_cache->raw();
    a.cache_e4m3 = rc->k_cache->dtype() == DType::F8_E4M3;
    a.q_heads = rc->q_heads;
    a.kv_heads = static_cast<int>(rc->k_cache->size(2));
    a.head_dim = p.head_dim;
    a.mscale = p.mscale;
    std::copy(p.inv_freq.begin(), p.inv_freq.end(), a.inv_freq);
  }
  if constexpr (kIsFp8<W>) {
    if (kernel_options().fp8_gemv_tensor_cores &&
        fp8_mma_staged_bytes(m, a.k) <= kMaxStagedBytes) {
      if (f.rope_cache) launch_fp8_mma<kNorm | kRope>(a, m, sms, stream);
      else if (f.silu_and_mul && f.norm_weight) launch_fp8_mma<kNorm | kSilu>(a, m, sms, stream);
      else if (f.silu_and_mul) launch_fp8_mma<kSilu>(a, m, sms, stream);
      else if (f.norm_weight) launch_fp8_mma<kNorm>(a, m, sms, stream);
      else if (f.accumulate) launch_fp8_mma<kAccumulate>(a, m, sms, stream);
      else launch_fp8_mma<kPlain>(a, m, sms, stream);
      return;
    }
  }
  if (f.rope_cache) {
    launch_mode<W, kNorm | kRope | kStaged>(a, m, smem, sms, stream);
  } else if (f.silu_and_mul && f.norm_weight) launch_mode<W, kNorm | kSilu | kStaged>(a, m, smem, sms, stream);
  else if (f.silu_and_mul) launch_mode<W, kSilu | kStaged>(a, m, smem, sms, stream);
  else if (f.norm_weight) launch_mode<W, kNorm | kStaged>(a, m, smem, sms, stream);
  else if (smem > kMaxStagedBytes && f.accumulate) launch_mode<W, kAccumulate>(a, m, 0, sms, stream);
  else if (smem > kMaxStagedBytes) launch_mode<W, kPlain>(a, m, 0, sms, stream);
  else if (f.accumulate) launch_mode<W, kAccumulate | kStaged>(a, m, smem, sms, stream);
  else launch_mode<W, kStaged>(a, m, smem, sms, stream);
}

}  // namespace

bool gemv_applies(const Tensor& x, const Tensor& w, const MatmulFusion& f) {
  const DType dt = w.dtype();
  const bool fp8 = dt == DType::FP8_E4M3;
  if (x.size(0) > kMaxRows || (dt != DType::BF16 && dt != DType::F16 && !fp8) ||
      x.size(1) % (fp8 ? 16 : 8) != 0 ||
      row_stride(x) % 4 != 0 || !aligned16(x) || !aligned16(w) || !w.is_contiguous() ||
      w.size(0) > INT32_MAX / 2 || x.size(1) > INT32_MAX / 2)
    return false;
  if (f.silu_and_mul && w.size(0) % 2 != 0) return false;
  if (const RopeCacheFusion* rc = f.rope_cache) {  // HF rotary over whole heads
    const RopeParams& p = *rc->params;
    const DType cache_dt = rc->k_cache->dtype();
    if (!f.norm_weight || !p.neox || p.ggml_theta || p.rotary_dim != p.head_dim ||
        p.head_dim / 2 > kMaxRopePairs || !p.freq_factors.empty() ||
        (cache_dt != (fp8 ? DType::BF16 : dt) && cache_dt != DType::F8_E4M3) ||
        rc->v_cache->dtype() != cache_dt)
      return false;
  }
  if (f.norm_weight && (!f.norm_weight->is_contiguous() || !aligned16(*f.norm_weight)))
    return false;
  if (f.normed_out && (!f.norm_weight || f.silu_and_mul || f.rope_cache || f.accumulate))
    return false;  // written by the plain normed GEMV only
  return (!f.norm_weight && !f.silu_and_mul) || staged_bytes(x) <= kMaxStagedBytes;
}

void launch_gemv(const Tensor& x, const Tensor& w, Tensor& out, const MatmulFusion& f,
                 int multiprocessors, cudaStream_t stream) {
  if (x.size(0) == 0 || w.size(0) == 0) return;
  switch (w.dtype()) {
    case DType::BF16: launch_typed<__nv_bfloat16>(x, w, out, f, multiprocessors, stream); break;
    case DType::F16: launch_typed<__half>(x, w, out, f, multiprocessors, stream); break;
    default: launch_typed<Fp8>(x, w, out, f, multiprocessors, stream);
  }
}

}  // namespace vllm::cuda
