// MLA attention of one prefilling sequence by materialized scores (runtime/ops.h
// mla_prefill_attention). All heads of a token attend over the same latent rows, so in latent
// space the scores of every (token, head) row against the sequence's rows are one GEMM, and
// the outputs another: tensor-core work through cuBLASLt, where mla_attention.cu's kernel
// (decode) runs on the CUDA cores and would spend a prefill's quadratic work there. Query rows
// go in chunks so that a chunk's f32 scores stay under kScoreBudget elements.
#include <algorithm>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops.h"

namespace vllm::cuda {
namespace {

constexpr int64_t kScoreBudget = int64_t(1) << 25;  // 128 MiB of f32 scores per chunk
// The key count the GEMMs see is rounded up to this (zero rows past the sequence), so that
// cuBLASLt plans, cached per shape, come in few sizes.
constexpr int kKeyRound = 64;

// For j < padded: keys[j, :] = the sequence's cached row j (dk lanes), values_t[:, j] = its
// leading dv lanes; zeros for j >= len and for j < first (rows no query may see: under a
// window their blocks may be the null block, whose contents were never written).
template <typename C>
__global__ void gather_latents_kernel(const C* __restrict__ cache, int64_t slot_stride,
                                      const int32_t* __restrict__ block_table, int block_size,
                                      int first, int len, int padded, int dk, int dv,
                                      C* __restrict__ keys, C* __restrict__ values_t) {
  pdl_begin();
  for (int j = blockIdx.x; j < padded; j += gridDim.x) {
    const C* src = nullptr;
    if (j >= first && j < len)
      src = cache + (int64_t(block_table[j / block_size]) * block_size + j % block_size) *
                        slot_stride;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      const C v = src ? src[i] : from_float<C>(0.0f);
      keys[int64_t(j) * dk + i] = v;
      if (i < dv) values_t[int64_t(i) * padded + j] = v;
    }
  }
}

// Row r of s [rows, width] (token first_token + r / heads, at position first_pos + that token):
// softmax of scale * s over the keys it may see (causal, and within the window when > 0), 0
// elsewhere, in place. One block per row.
__global__ void causal_softmax_kernel(float* __restrict__ s, int heads, int width,
                                      int first_token, int first_pos, float scale, int window) {
  pdl_begin();
  float* row = s + int64_t(blockIdx.x) * width;
  const int pos = first_pos + first_token + int(blockIdx.x) / heads;
  const int hi = pos, lo = window > 0 ? max(0, pos - window + 1) : 0;
  float mx = -INFINITY;
  for (int j = lo + threadIdx.x; j <= hi; j += blockDim.x) mx = fmaxf(mx, row[j] * scale);
  mx = block_max(mx);
  float sum = 0.0f;
  for (int j = lo + threadIdx.x; j <= hi; j += blockDim.x) sum += expf(row[j] * scale - mx);
  sum = block_sum(sum);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < width; j += blockDim.x)
    row[j] = j >= lo && j <= hi ? expf(row[j] * scale - mx) * inv : 0.0f;
}

}  // namespace

void CudaBackend::mla_prefill_attention(const Tensor& q, const Tensor& cache,
                                        const AttentionMeta& meta, int seq, int v_dim,
                                        float scale, int sliding_window, Tensor& out) {
  const int tq = int(q.size(0)), heads = int(q.size(1)), dk = int(q.size(2));
  const int len = meta.seq_lens[seq];
  if (tq == 0) return;
  const int padded = (len + kKeyRound - 1) / kKeyRound * kKeyRound;
  const DType dt = cache.dtype();
  Tensor keys = Tensor::empty({padded, dk}, dt, device());
  Tensor values_t = Tensor::empty({v_dim, padded}, dt, device());
  const int32_t* table =
      meta.device_block_tables.data<int32_t>() + int64_t(seq) * meta.max_blocks_per_seq;
  dispatch_float_type(dt, [&](auto* tag) {
    using C = std::remove_pointer_t<decltype(tag)>;
    // The first row the earliest query can see.
    const int first = sliding_window > 0 ? std::max(0, len - tq - sliding_window + 1) : 0;
    launch(gather_latents_kernel<C>, dim3(unsigned(std::min(padded, 65535))), dim3(128), 0,
           stream_, cache.data<C>(), row_stride(cache, 1), table, int(cache.size(1)), first, len,
           padded, dk, v_dim, keys.data<C>(), values_t.data<C>());
  });
  const int64_t chunk = std::max<int64_t>(1, kScoreBudget / (int64_t(heads) * padded));
  const Tensor q_rows = q.reshape({int64_t(tq) * heads, dk});
  Tensor out_rows = out.reshape({int64_t(tq) * heads, v_dim});
  for (int64_t t0 = 0; t0 < tq; t0 += chunk) {
    const int64_t n = std::min<int64_t>(chunk, tq - t0);
    Tensor scores = Tensor::empty({n * heads, padded}, DType::F32, device());
    matmul(q_rows.narrow(t0 * heads, n * heads), keys, scores);
    launch(causal_softmax_kernel, dim3(unsigned(n * heads)), dim3(256), 0, stream_,
           scores.data<float>(), heads, padded, int(t0), len - tq, scale, sliding_window);
    Tensor o = out_rows.narrow(t0 * heads, n * heads);
    matmul(scores, values_t, o);
  }
}

}  // namespace vllm::cuda
