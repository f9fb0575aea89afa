// CPU paged attention: KV written into fixed-size blocks by slot, attention read back
// through each sequence's block table. Caches are [num_blocks, block_size, Hkv, D], f32 or
// f16. With an f16 cache the whole product runs at f16 input precision, as ggml's CPU path
// does: q is rounded to f16 before q.k, and the softmax weights before weights.v.
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/isa.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"

namespace vllm::cpu {

void CpuBackend::reshape_and_cache(const Tensor& k, const Tensor& v, Tensor& k_cache,
                                   Tensor& v_cache, const Tensor& slot_mapping) {
  const int64_t block_size = k_cache.size(1);
  const int64_t n = k.size(1) * k.size(2);
  const bool half = k_cache.dtype() == DType::F16;
  const int32_t* slots = slot_mapping.data<int32_t>();
  for (int64_t t = 0; t < k.size(0); ++t) {
    if (slots[t] < 0) continue;
    const int64_t blk = slots[t] / block_size, off = slots[t] % block_size;
    char* kd = k_cache.row(blk) + off * k_cache.stride_bytes(1);
    char* vd = v_cache.row(blk) + off * v_cache.stride_bytes(1);
    const float* ks = reinterpret_cast<const float*>(k.row(t));
    const float* vs = reinterpret_cast<const float*>(v.row(t));
    if (half) {
      f32_to_f16_row(ks, reinterpret_cast<uint16_t*>(kd), n);
      f32_to_f16_row(vs, reinterpret_cast<uint16_t*>(vd), n);
    } else {
      std::memcpy(kd, ks, n * sizeof(float));
      std::memcpy(vd, vs, n * sizeof(float));
    }
  }
}

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const AttentionMeta& meta, float scale, int sliding_window,
                                 Tensor& out) {
  const int64_t T = q.size(0), Hq = q.size(1), D = q.size(2);
  const int64_t Hkv = k_cache.size(2), block_size = k_cache.size(1);
  const int64_t group = Hq / Hkv;
  const bool half = k_cache.dtype() == DType::F16;
  std::vector<int32_t> seq_of(static_cast<size_t>(T));
  for (int b = 0; b < meta.num_seqs(); ++b)
    for (int32_t t = meta.query_start_loc[b]; t < meta.query_start_loc[b + 1]; ++t) seq_of[t] = b;

  cpu_pool().parallel_for(T * Hq, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores, qbuf(static_cast<size_t>(D));
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / Hq, h = item % Hq, kvh = h / group;
      const int b = seq_of[t];
      const int32_t q_len = meta.query_start_loc[b + 1] - meta.query_start_loc[b];
      const int64_t pos = meta.seq_lens[b] - q_len + (t - meta.query_start_loc[b]);
      const int64_t first = sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
      const int32_t* table = meta.block_tables.data() + int64_t(b) * meta.max_blocks_per_seq;
      const float* qv = reinterpret_cast<const float*>(q.row(t) + h * q.stride_bytes(1));
      if (half) {
        std::copy(qv, qv + D, qbuf.begin());
        round_to_f16(qbuf.data(), D);
        qv = qbuf.data();
      }
      auto kv_at = [&](const Tensor& cache, int64_t j) {
        return cache.row(table[j / block_size]) + (j % block_size) * cache.stride_bytes(1) +
               kvh * cache.stride_bytes(2);
      };
      scores.resize(static_cast<size_t>(pos - first + 1));
      // Keys of one block are rows `kv_stride` apart: f16 caches take them a block per call.
      const int64_t kv_stride = k_cache.stride_bytes(1) / 2;
      for (int64_t j = first; j <= pos;) {
        const int64_t count = std::min(block_size - j % block_size, pos - j + 1);
        const char* k = kv_at(k_cache, j);
        if (half) {
          dot_rows_f16(qv, reinterpret_cast<const uint16_t*>(k), kv_stride, count, D,
                       &scores[j - first]);
        } else {
          for (int64_t r = 0; r < count; ++r)
            scores[j - first + r] = dot_f32(qv, reinterpret_cast<const float*>(k + r * k_cache.stride_bytes(1)), D);
        }
        j += count;
      }
      float mx = -INFINITY;
      for (float& s : scores) mx = std::max(mx, s *= scale);
      double sum = 0;
      for (float& s : scores) sum += (s = std::exp(s - mx));
      float* o = reinterpret_cast<float*>(out.row(t) + h * out.stride_bytes(1));
      std::fill(o, o + D, 0.0f);
      const float inv = float(1.0 / sum);
      for (float& s : scores) s *= inv;
      if (half) round_to_f16(scores.data(), static_cast<int64_t>(scores.size()));
      for (int64_t j = first; j <= pos;) {
        const int64_t count = std::min(block_size - j % block_size, pos - j + 1);
        const char* v = kv_at(v_cache, j);
        if (half) {
          axpy_rows_f16(&scores[j - first], reinterpret_cast<const uint16_t*>(v), kv_stride, count,
                        D, o);
        } else {
          for (int64_t r = 0; r < count; ++r)
            axpy_f32(scores[j - first + r], reinterpret_cast<const float*>(v + r * v_cache.stride_bytes(1)), o, D);
        }
        j += count;
      }
    }
  });
}

}  // namespace vllm::cpu
