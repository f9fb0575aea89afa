// Paged attention on CUDA. Over a 16-bit or e4m3 cache with head_dim 64 or 128, every step goes
// to the tensor-core kernel (flash_attention.cu). f32 caches and other head sizes take the
// kernel here, which serves any mix of prefill, chunked prefill and decode: one
// block of four warps per (query token, query head), each warp streaming keys of the
// sequence's block table with an online softmax, warps merged at the end. When there are
// few (token, head) pairs and long contexts, the key range is split over more blocks
// (split-KV) and a second kernel merges the partial results. MLA's latent rows (values of
// another width than keys, in the same rows) go to mla_attention.cu.
#include <algorithm>

#include "runtime/cuda/attention.cuh"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops.h"

namespace vllm::cuda {
namespace {

constexpr int kWarps = 4;

// E = elements of the head each lane owns (head_dim <= 32 * E).
template <typename C, int E>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const AttnArgs<C> a) {
  pdl_begin();
  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int D = a.head_dim;

  const TokenKeys tk = token_keys(a, t, split, splits);
  const int b = tk.seq, begin = tk.begin, end = tk.end;
  const int kvh = h / (a.num_q_heads / a.num_kv_heads);

  float q[E], acc[E];
  const float* qp = a.q + t * a.q_st + h * a.q_sh;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    q[e] = d < D ? qp[d] * a.scale : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks;
  const int64_t slot_elems = int64_t(a.num_kv_heads) * D;
  for (int j = begin + warp; j < end; j += kWarps) {
    const int64_t slot = int64_t(table[j / a.block_size]) * a.block_size + j % a.block_size;
    const C* kp = a.k_cache + slot * slot_elems + kvh * D;
    const C* vp = a.v_cache + slot * slot_elems + kvh * D;
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d < D) s += q[e] * to_float(kp[d]);
    }
    s = warp_sum(s);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      acc[e] = acc[e] * corr + (d < D ? p * to_float(vp[d]) : 0.0f);
    }
    m = m_new;
  }

  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float so[kWarps][32 * E];
  if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
  for (int e = 0; e < E; ++e) so[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  if (warp != 0) return;
  float mx = -INFINITY;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm[w]);
  float sum = 0.0f, o[E] = {};
  for (int w = 0; w < kWarps; ++w) {
    const float f = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - mx);
    sum += sl[w] * f;
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] += so[w][lane + 32 * e] * f;
  }
  if (splits == 1) {
    float* op = a.out + t * a.o_st + h * a.o_sh;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (lane + 32 * e < D) op[lane + 32 * e] = o[e] * inv;
    return;
  }
  const int64_t part = (int64_t(t) * a.num_q_heads + h) * splits + split;
#pragma unroll
  for (int e = 0; e < E; ++e)
    if (lane + 32 * e < D) a.part_o[part * D + lane + 32 * e] = o[e];
  if (lane == 0) a.part_ml[part * 2] = mx, a.part_ml[part * 2 + 1] = sum;
}

// Block (t, h): the splits' partial rows of one (token, head) merged. Each split's factor
// exp(m - max) is computed once, by the threads together, into shared memory (-1 marks a split
// that saw no key); the sum of the weights runs in split order on one thread, and each lane's
// output sums the splits in order, four loads in flight: the arithmetic of one thread walking
// the splits, without a memory latency per split and lane.
__global__ void merge_splits_kernel(const float* __restrict__ part_o,
                                    const float* __restrict__ part_ml, int splits, int heads,
                                    int head_dim, float* out, int64_t o_st, int64_t o_sh) {
  pdl_begin();
  extern __shared__ float factor[];  // [splits]
  __shared__ float inv_sum;
  const int t = blockIdx.x, h = blockIdx.y;
  const int64_t base = (int64_t(t) * heads + h) * splits;
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) mx = fmaxf(mx, part_ml[(base + s) * 2]);
  mx = block_max(mx);
  for (int s = threadIdx.x; s < splits; s += blockDim.x) {
    const float m = part_ml[(base + s) * 2];
    factor[s] = m == -INFINITY ? -1.0f : expf(m - mx);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s)
      if (factor[s] >= 0.0f) sum += part_ml[(base + s) * 2 + 1] * factor[s];
    inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  __syncthreads();
  const float inv = inv_sum;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll 4
    for (int s = 0; s < splits; ++s)
      if (factor[s] >= 0.0f) o += part_o[(base + s) * head_dim + d] * factor[s];
    out[t * o_st + h * o_sh + d] = o * inv;
  }
}

template <typename C, int E>
void launch_per_token(const AttnArgs<C>& a, int tokens, int splits, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(a.num_q_heads),
                  static_cast<unsigned>(splits));
  launch(paged_attention_kernel<C, E>, grid, kWarps * 32, 0, stream, a);
}

}  // namespace

void CudaBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const AttentionMeta& meta, float scale, int sliding_window,
                                  Tensor& out) {
  const int tokens = static_cast<int>(q.size(0));
  if (tokens == 0) return;
  const int head_dim = static_cast<int>(q.size(2)), v_dim = static_cast<int>(v_cache.size(3));
  const int num_q_heads = static_cast<int>(q.size(1));
  const bool mla = v_dim != head_dim;
  if (!mla) {
    VLLM_CHECK(head_dim <= 256, "head_dim ", head_dim, " beyond the CUDA attention limit of 256");
    VLLM_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "caches must be contiguous");
  }

  dispatch_cache_type(k_cache.dtype(), [&](auto* tag) {
    using C = std::remove_pointer_t<decltype(tag)>;
    constexpr bool kFp8 = std::is_same_v<C, __nv_fp8_e4m3>;
    VLLM_CHECK(!(kFp8 && mla), "an e4m3 KV cache with multi-head latent attention");
    AttnArgs<C> a{};
    a.q = q.data<float>();
    a.q_st = row_stride(q);
    a.q_sh = row_stride(q, 1);
    a.out = out.data<float>();
    a.o_st = row_stride(out);
    a.o_sh = row_stride(out, 1);
    a.k_cache = k_cache.data<C>();
    a.v_cache = v_cache.data<C>();
    a.query_start_loc = meta.device_query_start_loc.data<int32_t>();
    a.seq_lens = meta.device_seq_lens.data<int32_t>();
    a.block_tables = meta.device_block_tables.data<int32_t>();
    a.num_seqs = meta.num_seqs();
    a.max_blocks = meta.max_blocks_per_seq;
    a.block_size = static_cast<int>(k_cache.size(1));
    a.num_q_heads = num_q_heads;
    a.num_kv_heads = static_cast<int>(k_cache.size(2));
    a.head_dim = head_dim;
    a.v_dim = v_dim;
    a.k_slot = row_stride(k_cache, 1);
    a.v_slot = row_stride(v_cache, 1);
    a.scale = scale;
    a.window = sliding_window;
    a.skip_queries_from = meta.skip_queries_from;
    VLLM_CHECK(mla || meta.skip_queries_from == 0,
               "skip_queries_from is for MLA's latent attention only");
    // The split count is chosen from the step as its CUDA graph sees it (decoder_graphs.cpp):
    // a power of two of tokens, the padding being one-token sequences, and block tables a power
    // of two of at least 16 blocks wide. So a decode step splits its keys alike, and gives the
    // same arithmetic, whether it runs eager or replayed (splits round differently).
    const auto pow2_at_least = [](int64_t n, int64_t smallest) {
      int64_t b = smallest;
      while (b < n) b *= 2;
      return b;
    };
    const int max_seq =
        meta.max_seq_len_bound > 0
            ? meta.max_seq_len_bound
            : static_cast<int>(pow2_at_least(meta.max_blocks_per_seq, 16)) * a.block_size;
    const int graph_tokens = static_cast<int>(pow2_at_least(tokens, 1));
    const int graph_seqs = a.num_seqs + graph_tokens - tokens;
    // MLA and the per-token kernel split the keys when the step alone cannot fill the GPU twice
    // over and there are enough keys to share, keeping tokens x heads x splits partial rows
    // under 4 x multiprocessors. (DecoderModel::graph_arena_bytes measures the partials a
    // graph needs by running its steps.)
    const int64_t pairs = int64_t(tokens) * num_q_heads;
    const auto choose_splits = [&](int64_t blocks, int key_chunk) {
      const int64_t most =
          std::min<int64_t>(64, 4 * multiprocessors_ / (int64_t(graph_tokens) * num_q_heads));
      if (blocks >= 2 * multiprocessors_ || most < 2) return 1;
      const int64_t want = std::min<int64_t>((max_seq + key_chunk - 1) / key_chunk,
                                             (2 * multiprocessors_ + blocks - 1) / blocks);
      return static_cast<int>(std::clamp<int64_t>(want, 1, most));
    };
    int splits = 1;
    Tensor part_o, part_ml;
    const auto alloc_partials = [&] {
      if (splits == 1) return;
      part_o = Tensor::empty({pairs * splits, v_dim}, DType::F32, device());
      part_ml = Tensor::empty({pairs * splits, 2}, DType::F32, device());
      a.part_o = part_o.data<float>();
      a.part_ml = part_ml.data<float>();
    };

    if (mla) {
      if constexpr (!kFp8) {  // no MLA kernel reads e4m3 (refused above)
        VLLM_CHECK(mla_attention_supports(a), "attention with keys of ", head_dim,
                   " and values of ", v_dim, " lanes needs MLA's latent cache (one KV head, values "
                   "the keys' leading lanes, at most 512)");
        // A block serves several heads of a token, so its keys cost more than the per-token
        // kernel's: chunks of 64.
        const int per_block = mla_attention_heads_per_block();
        splits = choose_splits(
            int64_t(graph_tokens) * ((num_q_heads + per_block - 1) / per_block), 64);
        alloc_partials();
        if (mla_decode_supports(a)) launch_mla_decode(a, tokens, splits, stream_);
        else launch_mla_attention(a, tokens, splits, stream_);
      }
    } else if (flash_attention_supports(a)) {
      // Tensor cores for every step over a 16-bit or e4m3 cache with a supported head size.
      // Splits of at least one key tile, as many as make the blocks one full wave of the GPU
      // (resident blocks a multiprocessor times multiprocessors), at most 64. Measured on the
      // H200 (docs/benchmarks.md, 2026-12-05): a full wave beats both fewer splits and more
      // (8B shape at 32k: 16, 24, 33, 49, 64 splits of 8 KV heads, two resident blocks a
      // multiprocessor, decoded at 140, 158, 169, 152, 158 tok/s).
      const int64_t blocks =
          int64_t(flash_attention_slots(a, graph_tokens, graph_seqs)) * a.num_kv_heads;
      const int64_t wave = int64_t(multiprocessors_) * flash_attention_blocks_per_sm(a);
      const int64_t tiles = (max_seq + flash_attention_key_tile() - 1) / flash_attention_key_tile();
      splits = static_cast<int>(std::clamp<int64_t>(std::min(tiles, wave / blocks), 1, 64));
      alloc_partials();
      launch_flash_attention(a, tokens, splits, stream_);
    } else {
      // Key chunks of 256 for the per-token kernel, whose blocks are one (token, head) each.
      splits = max_seq >= 512 ? choose_splits(int64_t(graph_tokens) * num_q_heads, 256) : 1;
      alloc_partials();
      switch ((head_dim + 31) / 32) {
        case 1: launch_per_token<C, 1>(a, tokens, splits, stream_); break;
        case 2: launch_per_token<C, 2>(a, tokens, splits, stream_); break;
        case 3: launch_per_token<C, 3>(a, tokens, splits, stream_); break;
        case 4: launch_per_token<C, 4>(a, tokens, splits, stream_); break;
        case 5: launch_per_token<C, 5>(a, tokens, splits, stream_); break;
        case 6: launch_per_token<C, 6>(a, tokens, splits, stream_); break;
        case 7: launch_per_token<C, 7>(a, tokens, splits, stream_); break;
        default: launch_per_token<C, 8>(a, tokens, splits, stream_); break;
      }
    }
    if (splits > 1) {
      const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(num_q_heads));
      launch(merge_splits_kernel, grid, row_threads(v_dim), size_t(splits) * sizeof(float),
          stream_, part_o.data<float>(), part_ml.data<float>(), splits, num_q_heads, v_dim,
          out.data<float>(), row_stride(out), row_stride(out, 1));
    }
  });
}

}  // namespace vllm::cuda
