// Mixture-of-experts ops on the device (runtime/ops.h): routing (one warp per token), the
// grouping of routed rows by expert (one block), the experts' projections over their grouped
// rows, and the weighted sum back into tokens. The projections are a grouped GEMV (weights
// read once per 8 rows of an expert, x kept in f32) while experts have few rows on average
// (decode; FP8 experts: steps of up to 4 tokens), else a grouped GEMM on tensor cores (x
// rounded to the weights' 16-bit type, as the dense matmul does on cuBLASLt; with FP8
// experts, x quantized to e4m3 per token and the e4m3 MMA, as the dense W8A8 path). Nothing
// goes to the host, so any step of a MoE model can be captured as a graph.
#include <climits>
#include <type_traits>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/mma.cuh"
#include "runtime/ops.h"

namespace vllm::cuda {
namespace {

constexpr int kMaxGroups = 32;   // router groups, one per lane
constexpr int kMaxTopK = 32;
constexpr int kMaxRoutedExperts = 512;  // top_k's widest case
constexpr int kAlignThreads = 1024;

struct RouteArgs {
  const float* scores;
  const float* bias;  // or null
  int experts, top_k, groups, topk_groups;
  int shared;  // experts E .. E + shared - 1 taken by every token with weight 1 (after top_k)
  bool sigmoid, group_top2, normalize;
  float scaling;
  int32_t* ids;
  float* weights;
  float* margins;  // or null
};

// Selection order for the top-k: by value, NaN as -inf, -0 as +0 (they compare equal), as an
// unsigned key that grows with the value.
__device__ __forceinline__ uint32_t topk_key(float x) {
  x = x != x ? -INFINITY : (x == 0.0f ? 0.0f : x);
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The best of the entries of lane (key, index) pairs not taken: the largest key, ties to the
// lower index; every lane gets it. An index of INT_MAX: none.
__device__ __forceinline__ void warp_best(uint32_t& key, int& index) {
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t k2 = __shfl_xor_sync(0xffffffffu, key, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, index, o);
    if (k2 > key || (k2 == key && i2 < index)) key = k2, index = i2;
  }
}

// The k best of key[0 .. n) (0 < k <= min(n, 32), n <= 32 * PER), by one warp, each lane
// holding entries lane, lane + 32, ...: order[r] (shared) = the entry of rank r for r < k,
// ranks by value, ties to the lower index, as k rounds of "the best not yet taken" would give;
// NaN ranks below every number. With next: kth[0] = the value of rank k - 1, kth[1] = that of
// rank k (-inf when k == n), in every lane. `scratch`: 2 x 32 words of shared memory.
//
// Up to 64 entries each lane counts the entries ranked above its own (independent compares).
// Beyond, whose count grows as n^2, the k-th largest key is found bit by bit from the top (a
// ballot per bit and register), stopping once exactly k keys lie at or above the prefix; the
// chosen k are then gathered and ranked among themselves.
template <int PER>
__device__ void warp_top_k(const float* key, int n, int k, bool next, int* order, float kth[2],
                           uint32_t* scratch) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x % 32;
  uint32_t u[PER];
  bool valid[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    valid[i] = lane + 32 * i < n;
    u[i] = valid[i] ? topk_key(key[lane + 32 * i]) : 0u;
  }
  bool chosen[PER];
  if constexpr (PER <= 2) {
    int rank[PER] = {};
    for (int j = 0; j < n; ++j) {
      const uint32_t y = topk_key(key[j]);
#pragma unroll
      for (int i = 0; i < PER; ++i)  // bitwise: a short-circuit is a branch per key
        rank[i] += int(y > u[i]) | (int(y == u[i]) & int(j < lane + 32 * i));
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      chosen[i] = valid[i] && rank[i] < k;
      if (chosen[i]) order[rank[i]] = lane + 32 * i;
    }
  } else {
    uint32_t t = 0;  // the largest prefix with at least k keys at or above it
    bool exact = false;
    for (int b = 31; b >= 0 && !exact; --b) {
      const uint32_t c = t | (1u << b);
      int count = 0;
#pragma unroll
      for (int i = 0; i < PER; ++i) count += __popc(__ballot_sync(kAll, valid[i] && u[i] >= c));
      if (count >= k) t = c, exact = count == k;
    }
    // Not exact: t is the k-th largest key; its equals are taken lowest index first.
    int need = k, equal_before = 0;
    if (!exact) {
#pragma unroll
      for (int i = 0; i < PER; ++i) need -= __popc(__ballot_sync(kAll, valid[i] && u[i] > t));
    }
    uint32_t* chosen_key = scratch;
    int* chosen_id = reinterpret_cast<int*>(scratch + 32);
    int gathered = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const unsigned below = (1u << lane) - 1;
      const bool eq = !exact && valid[i] && u[i] == t;
      const unsigned equals = __ballot_sync(kAll, eq);
      const bool early_equal = eq && equal_before + __popc(equals & below) < need;
      chosen[i] = valid[i] && (exact ? u[i] >= t : u[i] > t || early_equal);
      equal_before += __popc(equals);
      const unsigned m = __ballot_sync(kAll, chosen[i]);
      if (chosen[i]) {
        const int at = gathered + __popc(m & below);
        chosen_key[at] = u[i];
        chosen_id[at] = lane + 32 * i;
      }
      gathered += __popc(m);
    }
    __syncwarp();
    if (lane < k) {
      const uint32_t x = chosen_key[lane];
      const int e = chosen_id[lane];
      int rank = 0;
      for (int j = 0; j < k; ++j)
        rank += int(chosen_key[j] > x) | (int(chosen_key[j] == x) & int(chosen_id[j] < e));
      order[rank] = e;
    }
  }
  __syncwarp();  // order[] is read next
  if (!next) return;
  kth[0] = key[order[k - 1]];
  uint32_t best = 0;
  int best_index = INT_MAX;
#pragma unroll
  for (int i = 0; i < PER; ++i)
    if (valid[i] && !chosen[i] && (best_index == INT_MAX || u[i] > best))
      best = u[i], best_index = lane + 32 * i;
  warp_best(best, best_index);
  kth[1] = best_index == INT_MAX ? -INFINITY : key[best_index];
}

// The entries per lane that warp_top_k takes for n of them (n <= kMaxRoutedExperts). The
// routing kernels are instantiated for each, so that a launch runs one compact path.
constexpr int top_k_per_lane(int n) {
  return n <= 32 ? 1 : n <= 64 ? 2 : n <= 128 ? 4 : n <= 256 ? 8 : 16;
}

// Calls fn(std::integral_constant<int, top_k_per_lane(n)>).
template <typename Fn>
void dispatch_per_lane(int n, Fn&& fn) {
  switch (top_k_per_lane(n)) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 4: fn(std::integral_constant<int, 4>{}); break;
    case 8: fn(std::integral_constant<int, 8>{}); break;
    default: fn(std::integral_constant<int, 16>{}); break;
  }
}

// A routing warp's shared scratch: scores and choice keys per expert, the group scores and
// flags, and the chosen order. route_scratch_bytes: its size, a multiple of 16.
struct RouteScratch {
  float* p;       // [E] scores
  float* choice;  // [E] scores + bias, -inf outside the kept groups
  float* group;   // [kMaxGroups]
  int* order;     // [kMaxTopK]
  uint32_t* selection;  // [2 * 32]: warp_top_k's
  bool* group_taken;  // [kMaxGroups]
};

__host__ __device__ constexpr size_t route_scratch_bytes(int experts) {
  return (size_t(2 * experts + kMaxGroups + kMaxTopK + 64) * 4 + kMaxGroups + 15) / 16 * 16;
}

__device__ __forceinline__ RouteScratch route_scratch(char* base, int experts) {
  RouteScratch s;
  s.p = reinterpret_cast<float*>(base);
  s.choice = s.p + experts;
  s.group = s.choice + experts;
  s.order = reinterpret_cast<int*>(s.group + kMaxGroups);
  s.selection = reinterpret_cast<uint32_t*>(s.order + kMaxTopK);
  s.group_taken = reinterpret_cast<bool*>(s.selection + 64);
  return s;
}

// Token t's routing by one warp, the host routing's arithmetic (model/decoder.cpp route()),
// for a.experts <= 32 * PER.
template <int PER>
__device__ void route_token(const RouteArgs& a, int64_t t, const RouteScratch& s) {
  float* p = s.p;
  float* choice = s.choice;
  float* group = s.group;
  bool* group_taken = s.group_taken;
  int* order = s.order;
  const int E = a.experts, lane = threadIdx.x % 32;
  const float* z = a.scores + t * E;
  if (a.sigmoid) {
    for (int e = lane; e < E; e += 32) p[e] = 1.0f / (1.0f + expf(-z[e]));
  } else {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, z[e]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += (p[e] = expf(z[e] - mx));
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) p[e] /= sum;
  }
  for (int e = lane; e < E; e += 32) choice[e] = a.bias ? p[e] + a.bias[e] : p[e];
  __syncwarp();
  const bool margins = a.margins != nullptr;
  float margin = INFINITY;
  float kth[2];
  if (a.groups > 1) {
    const int per_group = E / a.groups;
    if (lane < a.groups) {
      const float* c = choice + lane * per_group;
      float best = -INFINITY, second = -INFINITY;
      for (int j = 0; j < per_group; ++j) {
        if (c[j] > best) second = best, best = c[j];
        else if (c[j] > second) second = c[j];
      }
      group[lane] = a.group_top2 ? best + second : best;
      group_taken[lane] = false;
    }
    __syncwarp();
    warp_top_k<1>(group, a.groups, a.topk_groups, margins, order, kth, s.selection);
    if (lane < a.topk_groups) group_taken[order[lane]] = true;
    __syncwarp();
    if (margins && a.topk_groups < a.groups)
      margin = fminf(margin, (kth[0] - kth[1]) / fabsf(kth[0]));
    for (int e = lane; e < E; e += 32)
      if (!group_taken[e / per_group]) choice[e] = -INFINITY;
    __syncwarp();  // order[] is rewritten next
  }
  warp_top_k<PER>(choice, E, a.top_k, margins, order, kth, s.selection);
  float sum = 0.0f;
  for (int r = 0; r < a.top_k; ++r) sum += p[order[r]];  // the rounds' order
  if (margins && a.top_k < E) margin = fminf(margin, (kth[0] - kth[1]) / fabsf(kth[0]));
  const float norm = a.normalize ? 1.0f / sum : 1.0f;
  const int width = a.top_k + a.shared;
  for (int r = lane; r < a.top_k; r += 32) {
    a.ids[t * width + r] = order[r];
    a.weights[t * width + r] = p[order[r]] * norm * a.scaling;
  }
  for (int r = lane; r < a.shared; r += 32) {
    a.ids[t * width + a.top_k + r] = E + r;
    a.weights[t * width + a.top_k + r] = 1.0f;
  }
  if (margins && lane == 0) a.margins[t] = margin;
}

// One warp per token.
template <int PER>
__global__ void moe_route_kernel(const RouteArgs a) {
  pdl_begin();
  extern __shared__ __align__(16) char route_smem[];
  route_token<PER>(a, blockIdx.x, route_scratch(route_smem, a.experts));
}

struct AlignArgs {
  const int32_t* ids;
  int64_t slots;
  int top_k, experts;
  int32_t *token, *position, *offsets, *active;
};

constexpr int kAlignWarps = kAlignThreads / 32;

__host__ __device__ constexpr size_t align_smem_bytes(int experts) {
  return size_t(2 + kAlignWarps) * experts * sizeof(int32_t);
}

// The inclusive sums of v over the block's threads (kAlignThreads), in every thread; `sums`
// [kAlignWarps] of shared scratch. Ends with the block synchronised.
__device__ __forceinline__ int block_inclusive_sum(int v, int* sums) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  if (lane == 31) sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = sums[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += u;
    }
    sums[lane] = w;
  }
  __syncthreads();
  const int before = warp > 0 ? sums[warp - 1] : 0;
  __syncthreads();  // sums may be written again
  return v + before;
}

// The grouping by one block of kAlignThreads. Counts per expert (shared atomics), then the
// offsets and the list of experts with rows (block-wide prefix sums), then the placement, a
// chunk of kAlignThreads slots at a time: a slot's row is its expert's offset, plus that
// expert's slots in earlier chunks, in earlier warps of this chunk (per-warp counts in shared
// memory), and in earlier lanes of its warp (__match_any_sync). So each expert's rows keep
// their slots' (tokens') order.
__device__ void align_block(const AlignArgs& a, int32_t* smem) {
  __shared__ int sums[kAlignWarps];
  __shared__ int carried[2];  // rows and active experts before this chunk of experts
  const int experts = a.experts;
  int32_t* count = smem;                     // [experts]: all slots, then earlier chunks'
  int32_t* start = smem + experts;           // [experts]: offsets
  int32_t* warp_count = smem + 2 * experts;  // [kAlignWarps][experts]: this chunk's
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  for (int i = threadIdx.x; i < kAlignWarps * experts; i += blockDim.x) warp_count[i] = 0;
  if (threadIdx.x < 2) carried[threadIdx.x] = 0;
  __syncthreads();
  for (int64_t j = threadIdx.x; j < a.slots; j += blockDim.x) atomicAdd(&count[a.ids[j]], 1);
  __syncthreads();
  for (int base = 0; base < experts; base += blockDim.x) {
    const int e = base + threadIdx.x;
    const int c = e < experts ? count[e] : 0;
    const int rows_before = carried[0], active_before = carried[1];
    // Packed: rows in the low 20 bits (slots < 2^20), active experts above.
    const int both = block_inclusive_sum(c | (c > 0 ? 1 << 20 : 0), sums);
    const int rows = (both & ((1 << 20) - 1)) - c, n = (both >> 20) - (c > 0);
    if (e < experts) {
      start[e] = a.offsets[e] = rows_before + rows;
      if (c > 0) a.active[1 + active_before + n] = e;
      count[e] = 0;
    }
    if (threadIdx.x == blockDim.x - 1)
      carried[0] = rows_before + rows + c, carried[1] = active_before + n + (c > 0);
    __syncthreads();
  }
  if (threadIdx.x == 0) a.offsets[experts] = carried[0], a.active[0] = carried[1];
  for (int64_t base = 0; base < a.slots; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    const int32_t id = j < a.slots ? a.ids[j] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, id);
    const int below = __popc(peers & ((1u << lane) - 1));
    if (id >= 0 && below == 0) warp_count[warp * experts + id] = __popc(peers);
    __syncthreads();
    if (id >= 0) {
      int32_t row = start[id] + count[id] + below;
      for (int w = 0; w < warp; ++w) row += warp_count[w * experts + id];
      a.token[row] = int32_t(j / a.top_k);
      a.position[j] = row;
    }
    if (base + blockDim.x >= a.slots) break;  // the last chunk carries nothing
    __syncthreads();
    // Carry this chunk's counts and clear its per-warp entries for the next chunk.
    for (int e = threadIdx.x; e < experts; e += blockDim.x)
      for (int w = 0; w < kAlignWarps; ++w) {
        count[e] += warp_count[w * experts + e];
        warp_count[w * experts + e] = 0;
      }
    __syncthreads();
  }
}

// The grouping of at most 32 slots by one warp, each lane holding one slot's expert: a slot's
// row is the number of slots before it in (expert, slot) order, an expert's offset the number
// of slots of lower experts, its place in the list of experts with rows the number of such
// experts below it. The results of align_block, with no barrier and no shared memory.
__device__ void align_warp(const AlignArgs& a) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x % 32;
  const bool mine = lane < a.slots;
  const int32_t id = mine ? a.ids[lane] : INT_MAX;  // past every expert
  const unsigned peers = __match_any_sync(kAll, id);
  const unsigned first = __ballot_sync(kAll, mine && (peers & ((1u << lane) - 1)) == 0);
  int32_t all[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) all[j] = __shfl_sync(kAll, id, j);
  int row = 0, below = 0;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    row += all[j] < id || (all[j] == id && j < lane);
    below += ((first >> j) & 1) && all[j] < id;
  }
  if (mine) {
    a.token[row] = int32_t(lane / a.top_k);
    a.position[lane] = row;
    if ((first >> lane) & 1) a.active[1 + below] = id;
  }
  if (lane == 0) a.active[0] = __popc(first);
  for (int e = lane; e <= a.experts; e += 32) {
    int n = 0;
#pragma unroll
    for (int j = 0; j < 32; ++j) n += all[j] < e;
    a.offsets[e] = n;
  }
}

__global__ void __launch_bounds__(kAlignThreads) moe_align_kernel(const AlignArgs a) {
  extern __shared__ __align__(16) int32_t align_smem[];
  pdl_begin();
  align_block(a, align_smem);
}

// Routing and grouping in one block, for steps of at most kAlignWarps tokens (decode): warp t
// routes token t, then the block groups the slots it wrote (visible to the block after the
// barrier): warp 0 alone when there are at most 32 slots (the block is then one warp a token),
// else all kAlignThreads, whose scratch reuses the routing's.
template <int PER>
__global__ void __launch_bounds__(kAlignThreads)
moe_route_align_kernel(const RouteArgs r, const AlignArgs a, int64_t tokens) {
  extern __shared__ __align__(16) char fused_smem[];
  pdl_begin();
  const int warp = threadIdx.x / 32;
  if (warp < tokens)
    route_token<PER>(r, warp, route_scratch(fused_smem + warp * route_scratch_bytes(r.experts),
                                       r.experts));
  __syncthreads();
  if (a.slots <= 32) {
    if (warp == 0) align_warp(a);
  } else {
    align_block(a, reinterpret_cast<int32_t*>(fused_smem));
  }
}

constexpr int kGemvMaxRows = 8;
constexpr int kGemvWarps = 8;
constexpr int kGemvColumnsPerWarp = 4;
constexpr int kGemvColumns = kGemvWarps * kGemvColumnsPerWarp;  // per block

// Block (x, y): kGemvColumns weight rows of the y-th expert that has rows, over all its rows,
// kRows at a time (as many as an expert can have, up to 8: fewer registers, more blocks in
// flight for decode's one row per expert; each row's sums are the same at any kRows). Each
// warp takes 4 weight rows together, each lane 16 bytes of each row per step (4 loads in
// flight per step, 2 steps unrolled: decode's short columns are latency-bound otherwise), the
// rows' dot products kept in registers. kSilu: w is [E, 2F, K] gate then up
// rows, each warp takes 2 gate rows and their up rows, and out[r, :F] = silu(gate) * up (the
// same sums, so the same bits as silu_and_mul over the plain product). Expert e's weights
// start expert_bytes * e bytes into w; e4m3 weights (W = __nv_fp8_e4m3, dtype.h's GPU layout
// of FP8_E4M3) have their N row scales after the N x K bytes, applied to each row's sum.
template <typename W, bool kSilu, int kRows>
__global__ void __launch_bounds__(kGemvWarps * 32)
moe_gemv_kernel(const float* __restrict__ x, int64_t ldx, const int32_t* __restrict__ rows,
                const uint8_t* __restrict__ w, int64_t expert_bytes, int64_t n, int64_t k,
                const int32_t* __restrict__ offsets, const int32_t* __restrict__ active,
                float* __restrict__ out) {
  pdl_begin();
  constexpr bool kFp8 = std::is_same_v<W, __nv_fp8_e4m3>;
  constexpr int kPer = 16 / sizeof(W);
  constexpr int C = kGemvColumnsPerWarp;
  constexpr int U = kSilu ? C / 2 : C;  // output columns per warp
  if (int(blockIdx.y) >= active[0]) return;
  const int e = active[1 + blockIdx.y];
  const int r0 = offsets[e], r1 = offsets[e + 1];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t outs = kSilu ? n / 2 : n;
  const int64_t first = int64_t(blockIdx.x) * (kGemvWarps * U) + warp * U;
  if (first >= outs) return;
  const int units = int(min(int64_t(U), outs - first));
  const uint8_t* we = w + int64_t(e) * expert_bytes;
  // Columns past the end read the last one again and are not written.
  const uint4* wc[C];
  float scale[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t row = (c >= U ? outs : 0) + first + min(c % U, units - 1);
    wc[c] = reinterpret_cast<const uint4*>(we + row * k * int64_t(sizeof(W)));
    scale[c] = kFp8 ? reinterpret_cast<const float*>(we + n * k)[row] : 1.0f;
  }
  const int pieces = int(k / kPer);
  for (int m0 = r0; m0 < r1; m0 += kRows) {
    const int m = min(kRows, r1 - m0);
    const float* xr[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i)
      xr[i] = x + int64_t(rows ? rows[m0 + min(i, m - 1)] : m0 + min(i, m - 1)) * ldx;
    float acc[C][kRows] = {};
#pragma unroll 2
    for (int p = lane; p < pieces; p += 32) {
      uint4 u[C];
#pragma unroll
      for (int c = 0; c < C; ++c) u[c] = load_streamed(wc[c] + p);
      // e4m3 pieces are widened once for all the rows (24 conversions a piece); 16-bit ones,
      // one shift or mask a weight, per row (fewer registers).
      float wide[kFp8 ? C : 1][kPer];
      if constexpr (kFp8) {
#pragma unroll
        for (int c = 0; c < C; ++c) unpack_piece<W>(u[c], wide[c]);
      }
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        if (i >= m) break;
        const float* xp = xr[i] + int64_t(p) * kPer;
        float xv[kPer];
#pragma unroll
        for (int j = 0; j < kPer; j += 4) {
          const float4 v = __ldg(reinterpret_cast<const float4*>(xp + j));
          xv[j] = v.x, xv[j + 1] = v.y, xv[j + 2] = v.z, xv[j + 3] = v.w;
        }
#pragma unroll
        for (int c = 0; c < C; ++c) {
          float f[kPer];
          if constexpr (kFp8) {
#pragma unroll
            for (int j = 0; j < kPer; ++j) f[j] = wide[c][j];
          } else {
            unpack_piece<W>(u[c], f);
          }
          float d = 0.0f;
#pragma unroll
          for (int j = 0; j < kPer; ++j) d += f[j] * xv[j];
          acc[c][i] += d;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (i >= m) break;
      float sum[C];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        sum[c] = warp_sum(acc[c][i]);
        if constexpr (kFp8) sum[c] *= scale[c];
      }
      if (lane != 0) continue;
      float* o = out + int64_t(m0 + i) * outs + first;
#pragma unroll
      for (int c = 0; c < U; ++c) {
        if (c >= units) break;
        if constexpr (kSilu) o[c] = silu(sum[c]) * sum[c + U];
        else o[c] = sum[c];
      }
    }
  }
}

// The grouped GEMM: block (x, y) computes a kGemmM x kGemmN tile of out, columns from x, rows
// from the y-th tile of the expert-sorted rows (each expert's rows cut into tiles of kGemmM;
// blocks past the last tile return). Four warps, each 32 x 64 of the tile; K in steps of
// kGemmRowBytes (64 16-bit or 128 e4m3 elements) through a kGemmStages-deep cp.async
// pipeline; A (the rows, in the weights' type) and B (the expert's weight rows) in shared
// memory as 128-byte rows of swizzled 16-byte chunks.
constexpr int kGemmM = 64;
constexpr int kGemmN = 128;
constexpr int kGemmRowBytes = 128;
constexpr int kGemmStages = 3;
constexpr int kGemmThreads = 128;
constexpr int kGemmChunks = kGemmRowBytes / 16;  // 16-byte chunks per shared row
constexpr int kGemmSwizzle = kGemmChunks * 8;    // swizzle<D>'s row length in 16-bit units
constexpr size_t kGemmStageBytes = size_t(kGemmM + kGemmN) * kGemmRowBytes;
constexpr size_t kGemmSmem = kGemmStages * kGemmStageBytes;
// Elements of C in one K step of the GEMM.
template <typename C>
constexpr int kGemmK = kGemmRowBytes / int(sizeof(C));
// The GEMV while the experts average at most this many rows (it reads an expert's weights
// once per 8 rows, in f32 against x in f32), the GEMM beyond.
constexpr int kGemvMaxMeanRows = 8;
// FP8 experts: the GEMV while no expert can have more rows than this (the step's token count,
// MoePlan::max_rows_per_expert), the W8A8 GEMM beyond. Widened e4m3 pieces take 150-176
// registers over 4-8 rows, and each weight byte meets 4 bytes of x a row read through L1:
// measured on an H100 (Qwen3-30B-A3B shape, docs/benchmarks.md), steps of 2 tokens ran 1.46x
// faster on the GEMV than on the GEMM, of 4 tokens 1.06x, while 128-token prefills ran 7.6x
// faster on the GEMM than on the 8-row GEMV (two calls).
constexpr int kFp8GemvMaxRows = 4;

// xb[r, :] = x[rows[r], :] (rows undefined: x[r, :]) rounded to C, one block per row.
template <typename C>
__global__ void moe_gather_rows_kernel(const float* __restrict__ x, int64_t ldx,
                                       const int32_t* __restrict__ rows, int64_t count, int64_t k,
                                       C* __restrict__ xb) {
  pdl_begin();
  for (int64_t r = blockIdx.x; r < count; r += gridDim.x) {
    const float* src = x + int64_t(rows ? rows[r] : r) * ldx;
    C* dst = xb + r * k;
    for (int64_t i = 4 * threadIdx.x; i < k; i += 4 * blockDim.x) store4(dst + i, load4(src + i));
  }
}

// xq[r, :] = x[rows[r], :] (rows undefined: x[r, :]) quantized to e4m3 per token, its scale
// in xs[r], one warp a row with the row in registers (kGatherVecs float4s a lane): many short
// rows, no block-wide barrier. Longer rows take quantize_rows_fp8_kernel, a block a row.
constexpr int kGatherVecs = 16;
constexpr int kGatherThreads = 256;
__global__ void moe_gather_rows_fp8_kernel(const float* __restrict__ x, int64_t ldx,
                                           const int32_t* __restrict__ rows, int64_t count,
                                           int64_t k, __nv_fp8_e4m3* __restrict__ xq,
                                           float* __restrict__ xs) {
  pdl_begin();
  constexpr int kPerBlock = kGatherThreads / 32;
  for (int64_t r = int64_t(blockIdx.x) * kPerBlock + threadIdx.x / 32; r < count;
       r += int64_t(gridDim.x) * kPerBlock) {
    const float* src = x + int64_t(rows ? rows[r] : r) * ldx;
    const float s =
        quantize_row_fp8_cached<kGatherVecs, false, true>(src, k, nullptr, 0.0f, xq + r * k);
    if (threadIdx.x % 32 == 0) xs[r] = s;
  }
}

// C = __nv_fp8_e4m3: W8A8, xb the e4m3 rows with their scales xs, w in dtype.h's GPU layout
// (each expert's N x K bytes, then its N row scales); both scales multiply the f32 sums.
template <typename C>
__global__ void __launch_bounds__(kGemmThreads)
moe_gemm_kernel(const C* __restrict__ xb, const float* __restrict__ xs,
                const uint8_t* __restrict__ w, int64_t expert_bytes, int64_t n, int64_t k,
                const int32_t* __restrict__ offsets, int experts, float* __restrict__ out) {
  constexpr bool kFp8 = std::is_same_v<C, __nv_fp8_e4m3>;
  constexpr int kStep = kGemmK<C>, kChunk = 16 / int(sizeof(C));  // elements
  extern __shared__ uint4 smem4[];
  __shared__ int tile[3];  // expert, first row, end of the expert's rows
  pdl_begin();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) tile[0] = -1;
  __syncthreads();
  if (warp == 0) {
    // Find the expert whose tiles hold tile y: a running prefix sum of ceil(rows / kGemmM).
    const int y = int(blockIdx.y);
    int base = 0;
    for (int e0 = 0; e0 < experts && base <= y; e0 += 32) {
      const int e = e0 + lane;
      const int r0 = e < experts ? offsets[e] : 0, r1 = e < experts ? offsets[e + 1] : 0;
      const int tiles = (r1 - r0 + kGemmM - 1) / kGemmM;
      int inc = tiles;
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += v;
      }
      const int first = base + inc - tiles;
      if (y >= first && y < first + tiles) {
        tile[0] = e;
        tile[1] = r0 + (y - first) * kGemmM;
        tile[2] = r1;
      }
      base += __shfl_sync(0xffffffffu, inc, 31);
    }
  }
  __syncthreads();
  const int e = tile[0];
  if (e < 0) return;
  const int m0 = tile[1], m1 = tile[2];
  const int64_t n0 = int64_t(blockIdx.x) * kGemmN;
  const uint8_t* expert = w + int64_t(e) * expert_bytes;
  const C* we = reinterpret_cast<const C*>(expert);
  uint4* sa = smem4;                                       // [stages][kGemmM][kGemmChunks]
  uint4* sb = smem4 + kGemmStages * kGemmM * kGemmChunks;  // [stages][kGemmN][kGemmChunks]

  const int ktiles = int(k / kStep);
  const auto load = [&](int stage, int kt) {
    const int64_t k0 = int64_t(kt) * kStep;
    for (int i = threadIdx.x; i < kGemmM * kGemmChunks; i += kGemmThreads) {
      const int r = i / kGemmChunks, c = i % kGemmChunks;
      const bool ok = m0 + r < m1;
      const C* src = xb + int64_t(ok ? m0 + r : m0) * k + k0 + c * kChunk;
      cp_async16(&sa[stage * kGemmM * kGemmChunks + swizzle<kGemmSwizzle>(r, c)], src, ok);
    }
    for (int i = threadIdx.x; i < kGemmN * kGemmChunks; i += kGemmThreads) {
      const int r = i / kGemmChunks, c = i % kGemmChunks;
      const bool ok = n0 + r < n;
      const C* src = we + (ok ? n0 + r : n0) * k + k0 + c * kChunk;
      cp_async16(&sb[stage * kGemmN * kGemmChunks + swizzle<kGemmSwizzle>(r, c)], src, ok);
    }
  };

  const int wm = (warp / 2) * 32, wn = (warp % 2) * 64;  // the warp's corner in the tile
  float acc[2][8][4] = {};
#pragma unroll
  for (int s = 0; s < kGemmStages - 1; ++s) {
    if (s < ktiles) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<kGemmStages - 2>();
    __syncthreads();  // tile kt is in; every warp is done with the stage refilled below
    const int next = kt + kGemmStages - 1;
    if (next < ktiles) load(next % kGemmStages, next);
    cp_async_commit();
    const uint4* a = sa + (kt % kGemmStages) * kGemmM * kGemmChunks;
    const uint4* b = sb + (kt % kGemmStages) * kGemmN * kGemmChunks;
#pragma unroll
    for (int kk = 0; kk < kGemmChunks / 2; ++kk) {  // one MMA step: 32 bytes of each row
      uint32_t af[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        ldmatrix_x4(af[i], &a[swizzle<kGemmSwizzle>(wm + i * 16 + lane % 16, kk * 2 + lane / 16)]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t bf[4];
        ldmatrix_x4(bf, &b[swizzle<kGemmSwizzle>(wn + j * 16 + lane % 8 + 8 * (lane / 16),
                                                 kk * 2 + (lane / 8) % 2)]);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma<C>(acc[i][2 * j], af[i], bf[0], bf[1]);
          mma<C>(acc[i][2 * j + 1], af[i], bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  const float* wscale = reinterpret_cast<const float*>(expert + n * k);  // kFp8 only
  // Accumulator (i, j): rows wm + 16 i + lane / 4 (+ 8), columns wn + 8 j + 2 (lane % 4) + {0, 1}.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wm + i * 16 + lane / 4 + 8 * h;
      if (row >= m1) continue;
      float* o = out + int64_t(row) * n;
      const float rs = kFp8 ? xs[row] : 1.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t col = n0 + wn + j * 8 + 2 * (lane % 4);
        if (col >= n) continue;
        float2 v = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        if constexpr (kFp8) v = make_float2(v.x * rs * wscale[col], v.y * rs * wscale[col + 1]);
        *reinterpret_cast<float2*>(o + col) = v;
      }
    }
  }
}

// Block (t, y): 256 columns of token t (one per thread, so that the loads of a token's rows
// are in flight together): its experts' rows, weighted, summed in ascending expert order, then
// extra's row added, then (accumulate) that sum added to out's own value.
__global__ void moe_combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ ids,
                                   const float* __restrict__ weights,
                                   const int32_t* __restrict__ position, int top_k, int64_t h,
                                   const float* __restrict__ extra, bool accumulate,
                                   float* __restrict__ out) {
  pdl_begin();
  __shared__ int32_t row[kMaxTopK];
  __shared__ float wt[kMaxTopK];
  const int64_t t = blockIdx.x;
  // Thread j < top_k places choice j at its rank among the token's experts (ids distinct).
  if (threadIdx.x < top_k) {
    const int j = threadIdx.x;
    const int32_t id = ids[t * top_k + j];
    int rank = 0;
    for (int i = 0; i < top_k; ++i) rank += ids[t * top_k + i] < id;
    row[rank] = position[t * top_k + j];
    wt[rank] = weights[t * top_k + j];
  }
  __syncthreads();
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= h) return;
  float acc = 0.0f;
  for (int j = 0; j < top_k; ++j) acc += wt[j] * y[int64_t(row[j]) * h + c];
  if (extra) acc += extra[t * h + c];
  out[t * h + c] = accumulate ? out[t * h + c] + acc : acc;
}

}  // namespace

namespace {

RouteArgs route_args(const Tensor& scores, const Tensor& bias, const MoeRouting& r, Tensor& ids,
                     Tensor& weights, Tensor& margins) {
  VLLM_CHECK(r.num_groups <= kMaxGroups && r.top_k + r.shared <= kMaxTopK &&
                 scores.size(1) <= kMaxRoutedExperts,
             "moe_route on CUDA: at most ", kMaxGroups, " groups, ", kMaxRoutedExperts,
             " routed experts and ", kMaxTopK, " experts a token (shared ones included)");
  return RouteArgs{scores.data<float>(), bias.defined() ? bias.data<float>() : nullptr,
                   int(scores.size(1)), r.top_k, r.num_groups, r.topk_groups, r.shared,
                   r.sigmoid, r.group_top2, r.normalize, r.scaling, ids.data<int32_t>(),
                   weights.data<float>(), margins.defined() ? margins.data<float>() : nullptr};
}

AlignArgs align_args(const Tensor& ids, int num_experts, MoePlan& plan) {
  VLLM_CHECK(align_smem_bytes(num_experts) <= 200 * 1024 && ids.numel() < (1 << 20),
             "moe_align on CUDA: ", num_experts, " experts or ", ids.numel(),
             " routed rows is too many");
  return AlignArgs{ids.data<int32_t>(),          ids.numel(),
                   int(ids.size(1)),             num_experts,
                   plan.token.data<int32_t>(),   plan.position.data<int32_t>(),
                   plan.offsets.data<int32_t>(), plan.active.data<int32_t>()};
}

// The expert weights' element types: dispatch_float_type's, and e4m3 (FP8_E4M3 in dtype.h's
// GPU layout).
template <typename Fn>
void dispatch_weight_type(DType dt, Fn&& fn) {
  if (dt == DType::FP8_E4M3) fn(static_cast<__nv_fp8_e4m3*>(nullptr));
  else dispatch_float_type(dt, fn);
}

// Whether the current device has the e4m3 MMA (compute capability 8.9 and up). Asked once a
// process, as pdl_enabled is: one process drives one kind of card.
bool has_fp8_mma() {
  static const bool supported = [] {
    int device = 0, major = 0, minor = 0;
    VLLM_CUDA_CHECK(cudaGetDevice(&device));
    VLLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    VLLM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return major * 10 + minor >= 89;
  }();
  return supported;
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    VLLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(bytes)));
}

}  // namespace

void CudaBackend::moe_route(const Tensor& scores, const Tensor& bias, const MoeRouting& r,
                            Tensor& ids, Tensor& weights, Tensor& margins) {
  const int64_t T = scores.size(0);
  const RouteArgs a = route_args(scores, bias, r, ids, weights, margins);
  if (T == 0) return;
  const size_t smem = route_scratch_bytes(a.experts);
  VLLM_CHECK(smem <= 200 * 1024, "moe_route on CUDA: ", a.experts, " experts is too many");
  dispatch_per_lane(a.experts, [&](auto per) {
    const auto kernel = moe_route_kernel<decltype(per)::value>;
    allow_smem(kernel, smem);
    launch(kernel, dim3(unsigned(T)), dim3(32), smem, stream_, a);
  });
}

void CudaBackend::moe_align(const Tensor& ids, int num_experts, MoePlan& plan) {
  const AlignArgs a = align_args(ids, num_experts, plan);
  const size_t smem = align_smem_bytes(num_experts);
  allow_smem(moe_align_kernel, smem);
  launch(moe_align_kernel, dim3(1), dim3(kAlignThreads), smem, stream_, a);
}

void CudaBackend::moe_route_align(const Tensor& scores, const Tensor& bias, const MoeRouting& r,
                                  Tensor& ids, Tensor& weights, Tensor& margins,
                                  int num_experts, MoePlan& plan) {
  const int64_t T = scores.size(0);
  const size_t route = route_scratch_bytes(int(scores.size(1)));
  const size_t smem = std::max(size_t(T) * route, align_smem_bytes(num_experts));
  if (T == 0 || T > kAlignWarps || smem > 200 * 1024) {
    Backend::moe_route_align(scores, bias, r, ids, weights, margins, num_experts, plan);
    return;
  }
  const RouteArgs ra = route_args(scores, bias, r, ids, weights, margins);
  const AlignArgs aa = align_args(ids, num_experts, plan);
  const bool one_warp_aligns = aa.slots <= 32;  // a warp a token, the kernel's small path
  const size_t bytes = one_warp_aligns ? size_t(T) * route : smem;
  dispatch_per_lane(ra.experts, [&](auto per) {
    const auto kernel = moe_route_align_kernel<decltype(per)::value>;
    allow_smem(kernel, bytes);
    launch(kernel, dim3(1), dim3(one_warp_aligns ? unsigned(32 * T) : kAlignThreads), bytes,
           stream_, ra, aa, T);
  });
}

void CudaBackend::moe_matmul(const Tensor& x, const Tensor& rows, const Tensor& w,
                             const MoePlan& plan, bool silu_output, Tensor& out) {
  const int64_t S = out.size(0), n = w.size(1), k = w.size(2);
  const int E = int(w.size(0));
  if (S == 0) return;
  const bool fp8 = w.dtype() == DType::FP8_E4M3;
  const int64_t per = fp8 ? 16 : 16 / dtype_info(w.dtype()).block_bytes;
  VLLM_CHECK(k % per == 0 && x.stride_bytes(0) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(x.data<float>()) % 16 == 0,
             "moe_matmul on CUDA: rows of ", k, " must be whole 16-byte pieces, aligned");
  const int32_t* r = rows.defined() ? rows.data<int32_t>() : nullptr;
  const int64_t ldx = x.stride_bytes(0) / int64_t(sizeof(float));
  const int64_t expert_bytes = n * row_bytes(w.dtype(), k);
  const auto* wb = static_cast<const uint8_t*>(w.raw());
  const int64_t most_experts = std::min<int64_t>(S, E);  // at most S experts have rows
  const int64_t step = fp8 ? kGemmK<__nv_fp8_e4m3> : kGemmK<__half>;
  const bool gemm = w.dtype() != DType::F32 && k % step == 0 && n % 2 == 0 &&
                    (fp8 ? plan.max_rows_per_expert > kFp8GemvMaxRows && has_fp8_mma()
                         : S > kGemvMaxMeanRows * most_experts);
  if (!gemm) {
    // Blocks beyond the active count return at once.
    const int64_t per_block = silu_output ? kGemvColumns / 2 : kGemvColumns;
    const dim3 grid(unsigned((out.size(1) + per_block - 1) / per_block), unsigned(most_experts));
    const int64_t most_rows = std::min<int64_t>(plan.max_rows_per_expert, kGemvMaxRows);
    dispatch_weight_type(w.dtype(), [&](auto* tag) {
      using W = std::remove_pointer_t<decltype(tag)>;
      const auto run = [&](auto rows_tag) {
        constexpr int R = decltype(rows_tag)::value;
        const auto kernel =
            silu_output ? moe_gemv_kernel<W, true, R> : moe_gemv_kernel<W, false, R>;
        launch(kernel, grid, dim3(kGemvWarps * 32), 0, stream_, x.data<float>(), ldx, r, wb,
               expert_bytes, n, k, plan.offsets.data<int32_t>(), plan.active.data<int32_t>(),
               out.data<float>());
      };
      if (most_rows <= 1) run(std::integral_constant<int, 1>{});
      else if (most_rows <= 2) run(std::integral_constant<int, 2>{});
      else if (most_rows <= 4) run(std::integral_constant<int, 4>{});
      else run(std::integral_constant<int, kGemvMaxRows>{});
    });
    return;
  }
  if (silu_output) {  // the GEMM's product, then the activation (prefill: not launch-bound)
    Tensor product = Tensor::empty({S, n}, DType::F32, out.device());
    moe_matmul(x, rows, w, plan, false, product);
    silu_and_mul(product, out);
    return;
  }
  // Each expert's rows end in at most one partial tile.
  const int64_t tiles = (S + kGemmM - 1) / kGemmM + most_experts;
  VLLM_CHECK(tiles <= 65535, "moe_matmul on CUDA: ", S, " rows is too many for one step");
  const unsigned gather_blocks = unsigned(std::min<int64_t>(S, 65535));
  const auto run = [&](auto* tag, const Tensor& xb, const float* xs) {
    using C = std::remove_pointer_t<decltype(tag)>;
    VLLM_CUDA_CHECK(cudaFuncSetAttribute(moe_gemm_kernel<C>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(kGemmSmem)));
    launch(moe_gemm_kernel<C>, dim3(unsigned((n + kGemmN - 1) / kGemmN), unsigned(tiles)),
           dim3(kGemmThreads), kGemmSmem, stream_, static_cast<const C*>(xb.raw()), xs, wb,
           expert_bytes, n, k, plan.offsets.data<int32_t>(), E, out.data<float>());
  };
  if (fp8) {  // W8A8: the rows quantized per token
    Tensor xq = Tensor::empty({S, k}, DType::F8_E4M3, x.device());
    Tensor xs = Tensor::empty({S}, DType::F32, x.device());
    auto* q = static_cast<__nv_fp8_e4m3*>(xq.raw());
    if (rows_fit_registers(x.raw(), ldx, nullptr, q, k, kGatherVecs, 32)) {
      constexpr int64_t kRowsPerBlock = kGatherThreads / 32;
      const auto blocks = unsigned(std::min<int64_t>((S + kRowsPerBlock - 1) / kRowsPerBlock,
                                                     65535));
      launch(moe_gather_rows_fp8_kernel, dim3(blocks), dim3(kGatherThreads), 0, stream_,
             x.data<float>(), ldx, r, S, k, q, xs.data<float>());
    } else {
      launch(quantize_rows_fp8_kernel<false>, dim3(gather_blocks), dim3(256), 0, stream_,
             x.data<float>(), ldx, r, static_cast<const float*>(nullptr), 0.0f, q,
             xs.data<float>(), S, k);
    }
    run(static_cast<__nv_fp8_e4m3*>(nullptr), xq, xs.data<float>());
    return;
  }
  // 16-bit weights: the rows rounded to their type (ops.cpp admits f32, f16, bf16 and
  // FP8_E4M3; f32 took the GEMV).
  Tensor xb = Tensor::empty({S, k}, w.dtype(), x.device());
  const auto gather = [&](auto* tag) {
    using C = std::remove_pointer_t<decltype(tag)>;
    launch(moe_gather_rows_kernel<C>, dim3(gather_blocks), dim3(128), 0, stream_,
           x.data<float>(), ldx, r, S, k, static_cast<C*>(xb.raw()));
    run(tag, xb, nullptr);
  };
  if (w.dtype() == DType::BF16) gather(static_cast<__nv_bfloat16*>(nullptr));
  else gather(static_cast<__half*>(nullptr));
}

void CudaBackend::moe_combine(const Tensor& y, const Tensor& ids, const Tensor& weights,
                              const MoePlan& plan, const Tensor& extra, bool accumulate,
                              Tensor& out) {
  const int64_t T = out.size(0), h = out.size(1);
  const int top_k = int(ids.size(1));
  VLLM_CHECK(top_k <= kMaxTopK, "moe_combine on CUDA: top_k ", top_k);
  if (T == 0) return;
  launch(moe_combine_kernel, dim3(unsigned(T), unsigned((h + 255) / 256)), dim3(256), 0, stream_,
         y.data<float>(), ids.data<int32_t>(), weights.data<float>(),
         plan.position.data<int32_t>(), top_k, h,
         extra.defined() ? extra.data<float>() : nullptr, accumulate, out.data<float>());
}

}  // namespace vllm::cuda
