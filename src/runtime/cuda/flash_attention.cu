// Paged attention on tensor cores, in the manner of FlashAttention-2: a block of four warps
// takes a tile of 64 query rows for one KV head and streams the sequence's keys and values
// through shared memory in tiles of 64, with an online softmax kept in registers. A block
// with at most 16 rows (decode) splits each key tile over its warps instead (see `narrow`).
//
// GQA: the rows of a tile are (token, query head) pairs of one sequence and one KV head,
// token-major, so the query heads sharing a KV head share every key/value load.
//
// Precision: q and the softmax weights are rounded to the cache's 16-bit type for the
// m16n8k16 MMAs; scores, the softmax and the output accumulate in f32. An e4m3 cache
// (--kv-cache-dtype fp8, scale 1) is copied raw into shared memory and widened there to f16
// (exact) before each tile's products, which then run as over an f16 cache holding the same
// values: the same bits.
//
// Split-KV: with gridDim.z > 1, each block takes an equal share of the key tiles and leaves
// unnormalised partial results (and its running max in natural-log units and sum) for
// attention.cu's merge kernel, as the per-token kernel does.
//
// Tiles: sequence b owns the grid slots [start(b), start(b + 1)) with
// start(b) = floor(query_start_loc[b] * G / 64) + b, which leaves it at least
// ceil(q_len * G / 64) of them for any lengths; a block whose slot has no rows returns.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "runtime/cuda/attention.cuh"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/mma.cuh"

namespace vllm::cuda {
namespace {

constexpr int kRows = 64;  // query rows per block (16 per warp)
constexpr int kKeys = 64;  // keys per shared-memory tile
constexpr int kThreads = 128;

__device__ __forceinline__ int tile_start(const int32_t* query_start_loc, int b, int group) {
  return static_cast<int>(int64_t(query_start_loc[b]) * group / kRows) + b;
}

// One warp's part of a key tile for its 16 query rows: NB groups of 8 keys from tile row
// `first` (the whole tile: NB = 8; a warp's quarter in narrow blocks: NB = 2), whose first key
// is at position j0; their scores, the online-softmax update of m, l and o, and o += p v.
template <typename C, int D, int NB>
__device__ __forceinline__ void attend(const uint4* k_tile, const uint4* v_tile, int first,
                                       const uint32_t (&qf)[D / 16][4], int j0, bool edge,
                                       const int (&row_pos)[2], int window, float scale_log2,
                                       float (&o)[D / 8][4], float (&m)[2], float (&l)[2]) {
  const int lane = threadIdx.x % 32, t4 = lane % 4;
  float sc[NB][4] = {};
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < NB / 2; ++np) {
      uint32_t kf[4];
      ldmatrix_x4(kf, &k_tile[swizzle<D>(first + np * 16 + (lane % 8) + 8 * (lane / 16),
                                         2 * kk + (lane / 8) % 2)]);
      mma<C>(sc[2 * np], qf[kk], kf[0], kf[1]);
      mma<C>(sc[2 * np + 1], qf[kk], kf[2], kf[3]);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = sc[nb][2 * h + e];
        v *= scale_log2;
        if (edge) {
          const int j = j0 + nb * 8 + 2 * t4 + e;
          if (j > row_pos[h] || (window > 0 && row_pos[h] - j >= window)) v = -INFINITY;
        }
        mx = fmaxf(mx, v);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[h], mx);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet
    const float corr = exp2f(m[h] - base);
    float sum = 0.0f;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = sc[nb][2 * h + e];
        v = exp2f(v - base);
        sum += v;
      }
    }
    l[h] = l[h] * corr + sum;  // this thread's share; the row's four threads add up at the end
    m[h] = m_new;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) o[nd][2 * h] *= corr, o[nd][2 * h + 1] *= corr;
  }
  // o += p @ v: the score accumulators of two adjacent key groups form one A fragment.
#pragma unroll
  for (int kk = 0; kk < NB / 2; ++kk) {
    const uint32_t pf[4] = {pack2<C>(sc[2 * kk][0], sc[2 * kk][1]),
                            pack2<C>(sc[2 * kk][2], sc[2 * kk][3]),
                            pack2<C>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                            pack2<C>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vf[4];
      ldmatrix_x4_trans(vf, &v_tile[swizzle<D>(first + kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2),
                                               2 * dp + lane / 16)]);
      mma<C>(o[2 * dp], pf, vf[0], vf[1]);
      mma<C>(o[2 * dp + 1], pf, vf[2], vf[3]);
    }
  }
}

// Four e4m3 values (low byte first) as two f16 pairs, packed.
__device__ __forceinline__ uint2 widen_e4m3x4(uint32_t v) {
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v & 0xffffu), __NV_E4M3);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v >> 16), __NV_E4M3);
  return make_uint2(uint32_t(lo.x) | uint32_t(lo.y) << 16, uint32_t(hi.x) | uint32_t(hi.y) << 16);
}

// Shared memory of a block, in 16-byte chunks (kChunks = D / 8 a row of 16-bit elements):
// 16-bit caches: q [kRows][kChunks], then two stages of k and of v [2][kKeys][kChunks].
// e4m3 caches: q, one stage of widened k and of v [kKeys][kChunks], then two stages of the raw
// e4m3 k and v tiles [2][2][kKeys][D / 16]. The same bytes (640 D) either way.
template <int D>
constexpr int smem_bytes() {
  return (kRows + 4 * kKeys) * D * 2;
}

template <typename C, int D>
__global__ void __launch_bounds__(kThreads) flash_attention_kernel(const AttnArgs<C> a) {
  constexpr bool kFp8 = std::is_same_v<C, __nv_fp8_e4m3>;
  using T = std::conditional_t<kFp8, __half, C>;  // the MMAs' 16-bit type
  constexpr int kChunks = D / 8;   // 16-byte chunks per row of 16-bit elements
  constexpr int kPieces = D / 16;  // 16-byte pieces per row of e4m3 elements
  extern __shared__ uint4 smem[];
  uint4* s_q = smem;                   // [kRows][kChunks]
  uint4* s_k = s_q + kRows * kChunks;  // 16-bit: [2][kKeys][kChunks]; e4m3: [kKeys][kChunks]
  uint4* s_v = s_k + (kFp8 ? 1 : 2) * kKeys * kChunks;
  uint4* s_raw = s_v + kKeys * kChunks;  // e4m3: [2 stages][k, v][kKeys][kPieces]

  const int group = a.num_q_heads / a.num_kv_heads;
  const int kvh = blockIdx.y;
  // Largest slots first: they hold a sequence's last rows, which see the most keys.
  const int slot = gridDim.x - 1 - blockIdx.x;
  int b = 0, hi = a.num_seqs - 1;
  while (b < hi) {
    const int mid = (b + hi + 1) / 2;
    if (tile_start(a.query_start_loc, mid, group) <= slot) b = mid; else hi = mid - 1;
  }
  const int q0 = a.query_start_loc[b];
  const int q_len = a.query_start_loc[b + 1] - q0;
  const int rows = q_len * group;
  const int row0 = (slot - tile_start(a.query_start_loc, b, group)) * kRows;
  const int pos0 = a.seq_lens[b] - q_len;  // position of the sequence's first query token
  const int pos_lo = pos0 + row0 / group;
  const int pos_hi = pos0 + (min(rows, row0 + kRows) - 1) / group;
  const int kv_begin = a.window > 0 ? max(0, pos_lo - a.window + 1) : 0;
  const int kv_end = pos_hi + 1;
  const int num_tiles = (kv_end - kv_begin + kKeys - 1) / kKeys;

  const int splits = gridDim.z, per_split = (num_tiles + splits - 1) / splits;
  const int tile_begin = blockIdx.z * per_split;
  const int tile_end = min(num_tiles, tile_begin + per_split);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks;
  const int64_t slot_elems = int64_t(a.num_kv_heads) * D;

  // Cache element offset of the KV head's row of key j (slot 0's for keys past kv_end, whose
  // copies are zero-filled and read nothing).
  auto key_offset = [&](int j) -> int64_t {
    const int64_t kv_slot =
        j < kv_end ? int64_t(table[j / a.block_size]) * a.block_size + j % a.block_size : 0;
    return kv_slot * slot_elems + int64_t(kvh) * D;
  };
  // Keys and values of tile i into stage s, the rows of keys j in [from, to); rows past kv_end
  // are zero-filled.
  auto load_kv = [&](int i, int s, int from = INT_MIN, int to = INT_MAX) {
    const int j0 = kv_begin + i * kKeys;
    if constexpr (kFp8) {
      for (int c = tid; c < kKeys * kPieces; c += kThreads) {
        const int r = c / kPieces, pc = c % kPieces, j = j0 + r;
        if (j < from || j >= to) continue;
        const int64_t off = key_offset(j) + pc * 16;
        cp_async16(&s_raw[(2 * s) * kKeys * kPieces + c], a.k_cache + off, j < kv_end);
        cp_async16(&s_raw[(2 * s + 1) * kKeys * kPieces + c], a.v_cache + off, j < kv_end);
      }
    } else {
      for (int c = tid; c < kKeys * kChunks; c += kThreads) {
        const int r = c / kChunks, ch = c % kChunks, j = j0 + r;
        if (j < from || j >= to) continue;
        const int64_t off = key_offset(j) + ch * 8;
        cp_async16(&s_k[s * kKeys * kChunks + swizzle<D>(r, ch)], a.k_cache + off, j < kv_end);
        cp_async16(&s_v[s * kKeys * kChunks + swizzle<D>(r, ch)], a.v_cache + off, j < kv_end);
      }
    }
    cp_async_commit();
  };
  // Up to the wait the block reads only the step's inputs (copied before its first kernel,
  // never written by one) and the keys before pos0, which earlier steps wrote: the first tile's
  // older keys load while the previous kernel ends. The keys from pos0 on (this step's, written
  // by the kernel just before) and q load after it.
  const bool work = row0 < rows && tile_begin < tile_end;
  if (work) load_kv(tile_begin, 0, INT_MIN, pos0);
  pdl_begin();
  if (row0 >= rows) return;
  if (work) load_kv(tile_begin, 0, pos0, INT_MAX);

  // The query rows, rounded to C; rows past the sequence's end are zero.
  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks, p = row0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (p < rows) {
      const float* src = a.q + int64_t(q0 + p / group) * a.q_st +
                         int64_t(kvh * group + p % group) * a.q_sh + ch * 8;
      const float4 x0 = *reinterpret_cast<const float4*>(src);
      const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
      v = make_uint4(pack2<T>(x0.x, x0.y), pack2<T>(x0.z, x0.w), pack2<T>(x1.x, x1.y),
                     pack2<T>(x1.z, x1.w));
    }
    s_q[swizzle<D>(r, ch)] = v;
  }
  __syncthreads();

  // A narrow block (at most 16 rows: decode, or a short chunk's last rows) gives all four
  // warps the same 16 rows and a quarter of each key tile each, merging them at the end;
  // otherwise each warp takes 16 rows and whole tiles.
  const bool narrow = rows - row0 <= 16;
  const int wrow = narrow ? 0 : warp * 16;  // the warp's first row in the tile

  // The warp's 16 rows of q as MMA A fragments, one per 16 columns of the head.
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(qf[kk], &s_q[swizzle<D>(wrow + (lane % 8) + 8 * ((lane / 8) % 2),
                                        2 * kk + lane / 16)]);

  // Each thread holds two rows of the warp's 16: g and g + 8, where g = lane / 4.
  const int g = lane / 4, t4 = lane % 4;
  int row_pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) row_pos[h] = pos0 + (row0 + wrow + g + 8 * h) / group;
  const float scale_log2 = a.scale * 1.4426950408889634f;  // scores in log2 units for exp2f

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // In wide blocks, warps past the last row only help load.
  const bool active = narrow || row0 + warp * 16 < rows;
  for (int i = tile_begin; i < tile_end; ++i) {
    const int s = (i - tile_begin) % 2;
    if (i + 1 < tile_end) {
      load_kv(i + 1, 1 - s);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kFp8) {
      // Stage s's raw tiles widened into the f16 tiles (their previous tile's products are
      // done: the loop's last barrier).
      for (int c = tid; c < 2 * kKeys * kPieces; c += kThreads) {
        const int kv = c / (kKeys * kPieces), rc = c % (kKeys * kPieces);
        const int r = rc / kPieces, pc = rc % kPieces;
        const uint4 raw = s_raw[(2 * s + kv) * kKeys * kPieces + rc];
        const uint2 w0 = widen_e4m3x4(raw.x), w1 = widen_e4m3x4(raw.y);
        const uint2 w2 = widen_e4m3x4(raw.z), w3 = widen_e4m3x4(raw.w);
        uint4* dst = kv ? s_v : s_k;
        dst[swizzle<D>(r, 2 * pc)] = make_uint4(w0.x, w0.y, w1.x, w1.y);
        dst[swizzle<D>(r, 2 * pc + 1)] = make_uint4(w2.x, w2.y, w3.x, w3.y);
      }
      __syncthreads();
    }
    const uint4* k_tile = s_k + (kFp8 ? 0 : s) * kKeys * kChunks;
    const uint4* v_tile = s_v + (kFp8 ? 0 : s) * kKeys * kChunks;
    const int first = narrow ? warp * 16 : 0, keys = narrow ? 16 : kKeys;
    const int j0 = kv_begin + i * kKeys + first;
    // Masks are needed where a key may lie past a row's position, before its window, or
    // past the keys loaded.
    const bool edge = j0 + keys - 1 > pos_lo || a.window > 0 || j0 + keys > kv_end;
    if (narrow)
      attend<T, D, 2>(k_tile, v_tile, first, qf, j0, edge, row_pos, a.window, scale_log2, o, m, l);
    else if (active)
      attend<T, D, 8>(k_tile, v_tile, first, qf, j0, edge, row_pos, a.window, scale_log2, o, m, l);
    __syncthreads();  // the next iteration's loads overwrite this stage
  }

  if (narrow) {
    // Merge the four warps' partial results into warp 0, through the (now idle) K/V tiles:
    // o as [warp][row][D] floats (the 16-bit cache's two K stages, the e4m3 cache's widened K
    // and V), then m and l per thread.
    float* s_o = reinterpret_cast<float*>(s_k);
    float* s_ml = s_o + (kThreads / 32) * 16 * D;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd)
        *reinterpret_cast<float2*>(&s_o[(warp * 16 + g + 8 * h) * D + nd * 8 + 2 * t4]) =
            make_float2(o[nd][2 * h], o[nd][2 * h + 1]);
    *reinterpret_cast<float4*>(&s_ml[(warp * 32 + lane) * 4]) = make_float4(m[0], m[1], l[0], l[1]);
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kThreads / 32; ++w) mx = fmaxf(mx, s_ml[(w * 32 + lane) * 4 + h]);
      float f[kThreads / 32];
      l[h] = 0.0f;
#pragma unroll
      for (int w = 0; w < kThreads / 32; ++w) {
        const float mw = s_ml[(w * 32 + lane) * 4 + h];
        f[w] = mw == -INFINITY ? 0.0f : exp2f(mw - mx);
        l[h] += f[w] * s_ml[(w * 32 + lane) * 4 + 2 + h];
      }
      m[h] = mx;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int w = 0; w < kThreads / 32; ++w) {
          const float2 v = *reinterpret_cast<const float2*>(
              &s_o[(w * 16 + g + 8 * h) * D + nd * 8 + 2 * t4]);
          acc.x += f[w] * v.x, acc.y += f[w] * v.y;
        }
        o[nd][2 * h] = acc.x, o[nd][2 * h + 1] = acc.y;
      }
    }
  }

  if (!active) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int p = row0 + wrow + g + 8 * h;
    if (p >= rows) continue;
    const int token = q0 + p / group, head = kvh * group + p % group;
    float* dst;
    float inv = 1.0f;
    if (splits == 1) {
      dst = a.out + int64_t(token) * a.o_st + int64_t(head) * a.o_sh;
      inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    } else {
      const int64_t part = (int64_t(token) * a.num_q_heads + head) * splits + blockIdx.z;
      dst = a.part_o + part * D;
      if (t4 == 0) a.part_ml[part * 2] = m[h] * 0.6931471805599453f, a.part_ml[part * 2 + 1] = sum;
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd)
      *reinterpret_cast<float2*>(dst + nd * 8 + 2 * t4) =
          make_float2(o[nd][2 * h] * inv, o[nd][2 * h + 1] * inv);
  }
}

}  // namespace

template <typename C>
int flash_attention_slots(const AttnArgs<C>& a, int tokens, int seqs);

namespace {

// Above the 48 KiB default; set per call, as the limit is per device.
template <typename C, int D>
void allow_smem() {
  VLLM_CUDA_CHECK(cudaFuncSetAttribute(flash_attention_kernel<C, D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       smem_bytes<D>()));
}

// Asked once a process (every layer of every step chooses its splits from it): a property of
// the kernel and the GPU architecture, the same for every GPU of one kind.
template <typename C, int D>
int blocks_per_sm() {
  static const int n = [] {
    allow_smem<C, D>();
    int blocks = 0;
    VLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, flash_attention_kernel<C, D>, kThreads, smem_bytes<D>()));
    return std::max(blocks, 1);
  }();
  return n;
}

template <typename C, int D>
void launch_for_dim(const AttnArgs<C>& a, int tokens, int splits, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D>();
  allow_smem<C, D>();
  const dim3 grid(static_cast<unsigned>(flash_attention_slots(a, tokens, a.num_seqs)),
                  static_cast<unsigned>(a.num_kv_heads), static_cast<unsigned>(splits));
  launch(flash_attention_kernel<C, D>, grid, kThreads, kSmem, stream, a);
}

}  // namespace

template <typename C>
bool flash_attention_supports(const AttnArgs<C>& a) {
  if constexpr (std::is_same_v<C, float>) {
    return false;
  } else {
    return (a.head_dim == 64 || a.head_dim == 128) && a.q_st % 4 == 0 && a.q_sh % 4 == 0 &&
           a.o_st % 2 == 0 && a.o_sh % 2 == 0 && aligned16(a.q) && aligned16(a.out) &&
           aligned16(a.k_cache) && aligned16(a.v_cache);
  }
}

template <typename C>
int flash_attention_slots(const AttnArgs<C>& a, int tokens, int seqs) {
  const int group = a.num_q_heads / a.num_kv_heads;
  return static_cast<int>(int64_t(tokens) * group / kRows) + seqs;
}

int flash_attention_key_tile() { return kKeys; }

template <typename C>
int flash_attention_blocks_per_sm(const AttnArgs<C>& a) {
  if constexpr (std::is_same_v<C, float>) {
    return 1;
  } else {
    return a.head_dim == 64 ? blocks_per_sm<C, 64>() : blocks_per_sm<C, 128>();
  }
}

template <typename C>
void launch_flash_attention(const AttnArgs<C>& a, int tokens, int splits, cudaStream_t stream) {
  if constexpr (!std::is_same_v<C, float>) {
    if (a.head_dim == 64) launch_for_dim<C, 64>(a, tokens, splits, stream);
    else launch_for_dim<C, 128>(a, tokens, splits, stream);
  }
}

template bool flash_attention_supports(const AttnArgs<float>&);
template bool flash_attention_supports(const AttnArgs<__half>&);
template bool flash_attention_supports(const AttnArgs<__nv_bfloat16>&);
template int flash_attention_slots(const AttnArgs<float>&, int, int);
template int flash_attention_blocks_per_sm(const AttnArgs<float>&);
template int flash_attention_slots(const AttnArgs<__half>&, int, int);
template int flash_attention_blocks_per_sm(const AttnArgs<__half>&);
template int flash_attention_slots(const AttnArgs<__nv_bfloat16>&, int, int);
template int flash_attention_blocks_per_sm(const AttnArgs<__nv_bfloat16>&);
template void launch_flash_attention(const AttnArgs<float>&, int, int, cudaStream_t);
template void launch_flash_attention(const AttnArgs<__half>&, int, int, cudaStream_t);
template void launch_flash_attention(const AttnArgs<__nv_bfloat16>&, int, int, cudaStream_t);
template bool flash_attention_supports(const AttnArgs<__nv_fp8_e4m3>&);
template int flash_attention_slots(const AttnArgs<__nv_fp8_e4m3>&, int, int);
template int flash_attention_blocks_per_sm(const AttnArgs<__nv_fp8_e4m3>&);
template void launch_flash_attention(const AttnArgs<__nv_fp8_e4m3>&, int, int, cudaStream_t);

}  // namespace vllm::cuda
