// Paged MLA on tensor cores, for the steps the latent kernel (mla_attention.cu) would serve over
// a 16-bit cache at DeepSeek's widths: key rows of 576 lanes (latent 512 + rotary 64), values
// the latent's 512. As in FlashMLA, a block takes the 16 heads of one query token as the 16
// rows of its MMAs, so each key tile it loads serves all of them.
//
// Four warps and key tiles of 64 in a two-stage cp.async pipeline, each warp copying whole
// rows. In the scores each warp takes 16 keys of the tile over the whole row; in p @ v each
// takes 128 of the 512 value lanes over the whole tile, the softmax weights passing through
// shared memory. The warps exchange their row maxima every tile, so all hold the same running
// max and their partial sums add up at the end.
//
// Precision as flash_attention.cu: q and the softmax weights rounded to the cache's type,
// scores, softmax and output accumulated in f32. Split-KV as the latent kernel: each block of
// gridDim.z takes an equal share of the keys and leaves partials for attention.cu's merge.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "runtime/cuda/attention.cuh"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/mma.cuh"
#include "util/check.h"

namespace vllm::cuda {
namespace {

constexpr int kDk = 576;                     // key lanes: latent + rotary
constexpr int kDv = 512;                     // value lanes: the latent
constexpr int kHeads = 16;                   // query heads per block: the MMA's rows
constexpr int kKeys = 64;                    // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunks = kDk / 8;             // 16-byte chunks per key row
constexpr int kWarpKeys = kKeys / kWarps;    // a warp's keys in the scores
constexpr int kWarpLanes = kDv / kWarps;     // a warp's value lanes in p @ v
constexpr size_t kSmem = size_t(kHeads + 2 * kKeys) * kChunks * 16  // q, two key stages
                         + size_t(kHeads) * kKeys * 2                // p
                         + 2 * size_t(kWarps) * kHeads * sizeof(float);  // maxima, sums

template <typename C>
__global__ void __launch_bounds__(kThreads) mla_decode_kernel(const AttnArgs<C> a) {
  extern __shared__ uint4 smem[];
  uint4* s_q = smem;                       // [kHeads][kChunks], swizzled
  uint4* s_k = s_q + kHeads * kChunks;     // [2][kKeys][kChunks], swizzled
  uint4* s_p = s_k + 2 * kKeys * kChunks;  // [kHeads][kKeys / 8], swizzled
  float* s_max = reinterpret_cast<float*>(s_p + kHeads * kKeys / 8);  // [kWarps][kHeads]
  float* s_sum = s_max + kWarps * kHeads;                             // [kWarps][kHeads]

  // Before the wait: what depends only on the step's inputs (copied before its first kernel,
  // never written by one), the token's key range and the cache slots of its first tile, a
  // chain of dependent loads that now overlaps the previous kernel's end. The cache rows
  // themselves load after it: a prefix hit can share rows that this step writes.
  const int t = blockIdx.x, h0 = blockIdx.y * kHeads, split = blockIdx.z, splits = gridDim.z;
  const TokenKeys tk = token_keys(a, t, split, splits);
  const int b = tk.seq, begin = tk.begin, end = tk.end;
  const int num_tiles = end > begin ? (end - begin + kKeys - 1) / kKeys : 0;
  const int heads = min(kHeads, a.num_q_heads - h0);
  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;

  // Warp w copies rows w, w + kWarps, ... of a tile: one page-table lookup per row (the same
  // address in every lane), the lookups unrolled so that they are all in flight; keys from
  // `end` on get slot -1 and are zero-filled.
  constexpr int kWarpRows = kKeys / kWarps;
  const int bs = a.block_size;
  const bool bs_pow2 = (bs & (bs - 1)) == 0;
  const int bs_shift = __popc(bs - 1);
  auto find_slots = [&](int j0, int64_t (&slot)[kWarpRows]) {
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i) {
      const int j = j0 + warp + i * kWarps;
      const int page = bs_pow2 ? j >> bs_shift : j / bs;
      const int in_page = bs_pow2 ? j & (bs - 1) : j % bs;
      slot[i] = j < end ? int64_t(__ldg(table + page)) * bs + in_page : -1;
    }
  };
  // The rows of `slot` into stage s, lanes over each row's chunks.
  auto load_tile = [&](const int64_t (&slot)[kWarpRows], int s) {
    uint4* dst = s_k + s * kKeys * kChunks;
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i) {
      const int r = warp + i * kWarps;
      const bool valid = slot[i] >= 0;
      const C* src = a.k_cache + (valid ? slot[i] : 0) * a.k_slot;
#pragma unroll
      for (int q = 0; q < (kChunks + 31) / 32; ++q) {
        const int ch = lane + 32 * q;
        if (ch < kChunks) cp_async16(&dst[swizzle<kDk>(r, ch)], src + ch * 8, valid);
      }
    }
    cp_async_commit();
  };
  int64_t slot[kWarpRows];
  if (num_tiles > 0) find_slots(begin, slot);
  pdl_begin();
  if (a.skip_queries_from > 0 && tk.q_len >= a.skip_queries_from) return;
  if (num_tiles > 0) load_tile(slot, 0);

  // The heads' queries, rounded to C; rows past the last head are zero. Unrolled, so that all
  // of a thread's loads are in flight at once.
  static_assert(kHeads * kChunks % kThreads == 0 && kKeys % kWarps == 0);
#pragma unroll
  for (int c = tid; c < kHeads * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < heads) {
      const float* src = a.q + int64_t(t) * a.q_st + int64_t(h0 + r) * a.q_sh + ch * 8;
      const float4 x0 = *reinterpret_cast<const float4*>(src);
      const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
      v = make_uint4(pack2<C>(x0.x, x0.y), pack2<C>(x0.z, x0.w), pack2<C>(x1.x, x1.y),
                     pack2<C>(x1.z, x1.w));
    }
    s_q[swizzle<kDk>(r, ch)] = v;
  }

  // Each thread holds rows (heads) g and g + 8 of the block's 16.
  const float scale_log2 = a.scale * 1.4426950408889634f;  // scores in log2 units for exp2f
  float o[kWarpLanes / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int i = 0; i < num_tiles; ++i) {
    const int s = i % 2;
    if (i + 1 < num_tiles) {
      find_slots(begin + (i + 1) * kKeys, slot);
      load_tile(slot, 1 - s);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this tile (and, the first time, q) is in shared memory
    const uint4* k_tile = s_k + s * kKeys * kChunks;

    // Scores of the warp's 16 keys for all 16 heads, over the whole key row.
    float sc[2][4] = {};
#pragma unroll 4
    for (int kk = 0; kk < kDk / 16; ++kk) {
      uint32_t qf[4], kf[4];
      ldmatrix_x4(qf, &s_q[swizzle<kDk>((lane % 8) + 8 * ((lane / 8) % 2), 2 * kk + lane / 16)]);
      ldmatrix_x4(kf, &k_tile[swizzle<kDk>(warp * kWarpKeys + (lane % 8) + 8 * (lane / 16),
                                           2 * kk + (lane / 8) % 2)]);
      mma<C>(sc[0], qf, kf[0], kf[1]);
      mma<C>(sc[1], qf, kf[2], kf[3]);
    }
    const int j0 = begin + i * kKeys + warp * kWarpKeys;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = sc[nb][2 * h + e];
          v = j0 + nb * 8 + 2 * t4 + e < end ? v * scale_log2 : -INFINITY;
          mx = fmaxf(mx, v);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (t4 == 0) s_max[warp * kHeads + g + 8 * h] = mx;
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m_new = m[h];
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m_new = fmaxf(m_new, s_max[w * kHeads + g + 8 * h]);
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2f(m[h] - base);
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = sc[nb][2 * h + e];
          v = exp2f(v - base);
          sum += v;
        }
        // p into shared memory, two lanes of chunk (warp's keys / 8 + nb) per thread.
        reinterpret_cast<uint32_t*>(
            &s_p[swizzle<kKeys>(g + 8 * h, warp * (kWarpKeys / 8) + nb)])[t4] =
            pack2<C>(sc[nb][2 * h], sc[nb][2 * h + 1]);
      }
      l[h] = l[h] * corr + sum;  // this thread's share; threads and warps add up at the end
      m[h] = m_new;
#pragma unroll
      for (int nd = 0; nd < kWarpLanes / 8; ++nd) o[nd][2 * h] *= corr, o[nd][2 * h + 1] *= corr;
    }
    __syncthreads();  // all of p is written

    // o[:, warp's 128 lanes] += p @ v over the tile's 64 keys; v is the rows' leading lanes.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t pf[4];
      ldmatrix_x4(pf, &s_p[swizzle<kKeys>((lane % 8) + 8 * ((lane / 8) % 2), 2 * kk + lane / 16)]);
#pragma unroll
      for (int dp = 0; dp < kWarpLanes / 16; ++dp) {
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, &k_tile[swizzle<kDk>(kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2),
                                                   warp * (kWarpLanes / 8) + 2 * dp + lane / 16)]);
        mma<C>(o[2 * dp], pf, vf[0], vf[1]);
        mma<C>(o[2 * dp + 1], pf, vf[2], vf[3]);
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this stage, and p
  }

  // The row sums: over the four threads of a row, then over the warps.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (t4 == 0) s_sum[warp * kHeads + g + 8 * h] = sum;
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = g + 8 * h;
    if (row >= heads) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += s_sum[w * kHeads + row];
    const int head = h0 + row;
    float* dst;
    float inv = 1.0f;
    if (splits == 1) {
      dst = a.out + int64_t(t) * a.o_st + int64_t(head) * a.o_sh;
      inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    } else {
      const int64_t part = (int64_t(t) * a.num_q_heads + head) * splits + split;
      dst = a.part_o + part * kDv;
      if (warp == 0 && t4 == 0)
        a.part_ml[part * 2] = m[h] * 0.6931471805599453f, a.part_ml[part * 2 + 1] = sum;
    }
#pragma unroll
    for (int nd = 0; nd < kWarpLanes / 8; ++nd)
      *reinterpret_cast<float2*>(dst + warp * kWarpLanes + nd * 8 + 2 * t4) =
          make_float2(o[nd][2 * h] * inv, o[nd][2 * h + 1] * inv);
  }
}

}  // namespace

template <typename C>
bool mla_decode_supports(const AttnArgs<C>& a) {
  if constexpr (std::is_same_v<C, float>) {
    return false;
  } else {
    return a.num_kv_heads == 1 && a.head_dim == kDk && a.v_dim == kDv && a.v_cache == a.k_cache &&
           a.v_slot == a.k_slot && a.k_slot % 8 == 0 && aligned16(a.k_cache) &&
           a.q_st % 4 == 0 && a.q_sh % 4 == 0 && aligned16(a.q) && a.o_st % 2 == 0 &&
           a.o_sh % 2 == 0 && reinterpret_cast<uintptr_t>(a.out) % 8 == 0;
  }
}

template <typename C>
void launch_mla_decode(const AttnArgs<C>& a, int tokens, int splits, cudaStream_t stream) {
  if constexpr (std::is_same_v<C, float>) {
    throw Error("launch_mla_decode: needs a 16-bit cache");
  } else {
    VLLM_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<C>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmem)));
    const dim3 grid(static_cast<unsigned>(tokens),
                    static_cast<unsigned>((a.num_q_heads + kHeads - 1) / kHeads),
                    static_cast<unsigned>(splits));
    launch(mla_decode_kernel<C>, grid, kThreads, kSmem, stream, a);
  }
}

#define VLLM_MLA_DECODE_INSTANTIATE(C)                                                \
  template bool mla_decode_supports<C>(const AttnArgs<C>&);                           \
  template void launch_mla_decode<C>(const AttnArgs<C>&, int, int, cudaStream_t);
VLLM_MLA_DECODE_INSTANTIATE(float)
VLLM_MLA_DECODE_INSTANTIATE(__half)
VLLM_MLA_DECODE_INSTANTIATE(__nv_bfloat16)
#undef VLLM_MLA_DECODE_INSTANTIATE

}  // namespace vllm::cuda
