// CPU paged attention: KV written into fixed-size blocks by slot, attention read back
// through each sequence's block table. Caches are [num_blocks, block_size, Hkv, D], f32, f16
// or e4m3. With an f16 cache the arithmetic is ggml's, operation for operation (ggml_order.h):
// q and the softmax weights rounded to f16, every sum in ggml's order, ggml's expf. An e4m3
// cache (--kv-cache-dtype fp8) holds K and V with scale 1, as vLLM's default: each element
// clamped to +-448 and rounded to nearest even; attention reads them back as f32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ggml_order.h"
#include "runtime/cpu/isa.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"

namespace vllm::cpu {

void CpuBackend::reshape_and_cache(const Tensor& k, const Tensor& v, Tensor& k_cache,
                                   Tensor& v_cache, const Tensor& slot_mapping) {
  const int64_t block_size = k_cache.size(1);
  const int64_t nk = k.size(1) * k.size(2), nv = v.size(1) * v.size(2);
  const bool half = k_cache.dtype() == DType::F16, fp8 = k_cache.dtype() == DType::F8_E4M3;
  const int32_t* slots = slot_mapping.data<int32_t>();
  const auto to_fp8 = [](const float* x, char* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      y[i] = static_cast<char>(f32_to_fp8_e4m3(std::clamp(x[i], -448.0f, 448.0f)));
  };
  for (int64_t t = 0; t < k.size(0); ++t) {
    if (slots[t] < 0) continue;
    const int64_t blk = slots[t] / block_size, off = slots[t] % block_size;
    char* kd = k_cache.row(blk) + off * k_cache.stride_bytes(1);
    char* vd = v_cache.row(blk) + off * v_cache.stride_bytes(1);
    const float* ks = reinterpret_cast<const float*>(k.row(t));
    const float* vs = reinterpret_cast<const float*>(v.row(t));
    if (half) {
      f32_to_f16_row(ks, reinterpret_cast<uint16_t*>(kd), nk);
      f32_to_f16_row(vs, reinterpret_cast<uint16_t*>(vd), nv);
    } else if (fp8) {
      to_fp8(ks, kd, nk);
      to_fp8(vs, vd, nv);
    } else {
      std::memcpy(kd, ks, nk * sizeof(float));
      std::memcpy(vd, vs, nv * sizeof(float));
    }
  }
}

namespace {

// Softmax over one query's scores in place, scores[i] for key first + i: the exponentials
// summed in ggml's order, 16 keys of absolute index c..c+15 at a time (keys outside the
// range count as masked). Returns the sum.
double ggml_softmax_exps(float* scores, int64_t first, int64_t count, float max) {
  double sum = 0;
  float chunk[16];
  for (int64_t c = first & ~int64_t{15}; c < first + count; c += 16) {
    for (int l = 0; l < 16; ++l) {
      const int64_t i = c + l - first;
      chunk[l] = i >= 0 && i < count ? scores[i] : -INFINITY;
    }
    sum += ggml_order::exp_sum16(chunk, max, chunk);
    for (int l = 0; l < 16; ++l) {
      const int64_t i = c + l - first;
      if (i >= 0 && i < count) scores[i] = chunk[l];
    }
  }
  return sum;
}

}  // namespace

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const AttentionMeta& meta, float scale, int sliding_window,
                                 Tensor& out) {
  const int64_t T = q.size(0), Hq = q.size(1), D = q.size(2), Dv = v_cache.size(3);
  const int64_t Hkv = k_cache.size(2), block_size = k_cache.size(1);
  const int64_t group = Hq / Hkv;
  const bool half = k_cache.dtype() == DType::F16, fp8 = k_cache.dtype() == DType::F8_E4M3;
  std::vector<int32_t> seq_of(static_cast<size_t>(T));
  for (int b = 0; b < meta.num_seqs(); ++b)
    for (int32_t t = meta.query_start_loc[b]; t < meta.query_start_loc[b + 1]; ++t) seq_of[t] = b;

  const bool llamacpp_order = cpu_order() == CpuOrder::kLlamaCpp;
  cpu_pool().parallel_for(T * Hq, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores, qbuf(static_cast<size_t>(D)), acc;
    std::vector<float> wide(fp8 ? static_cast<size_t>(std::max(D, Dv)) : 0);
    // A cached row as f32: in place, or (e4m3) widened into `wide`.
    const auto row_f32 = [&](const char* p, int64_t n) {
      if (!fp8) return reinterpret_cast<const float*>(p);
      dequantize_row(DType::F8_E4M3, p, wide.data(), n);
      return static_cast<const float*>(wide.data());
    };
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / Hq, h = item % Hq, kvh = h / group;
      const int b = seq_of[t];
      const int32_t q_len = meta.query_start_loc[b + 1] - meta.query_start_loc[b];
      const int64_t pos = meta.seq_lens[b] - q_len + (t - meta.query_start_loc[b]);
      const int64_t first = sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
      const int64_t count = pos - first + 1;
      const int32_t* table = meta.block_tables.data() + int64_t(b) * meta.max_blocks_per_seq;
      const float* qv = reinterpret_cast<const float*>(q.row(t) + h * q.stride_bytes(1));
      float* o = reinterpret_cast<float*>(out.row(t) + h * out.stride_bytes(1));
      auto kv_at = [&](const Tensor& cache, int64_t j) {
        return cache.row(table[j / block_size]) + (j % block_size) * cache.stride_bytes(1) +
               kvh * cache.stride_bytes(2);
      };
      // Visits the keys first..pos a cache block at a time: fn(first key, keys in block).
      auto for_blocks = [&](auto fn) {
        for (int64_t j = first; j <= pos;) {
          const int64_t n = std::min(block_size - j % block_size, pos - j + 1);
          fn(j, n);
          j += n;
        }
      };
      scores.resize(static_cast<size_t>(count));
      if (!half) {
        for_blocks([&](int64_t j, int64_t n) {
          for (int64_t r = 0; r < n; ++r) {
            const char* k = kv_at(k_cache, j) + r * k_cache.stride_bytes(1);
            scores[j - first + r] = dot_f32(qv, row_f32(k, D), D);
          }
        });
        float mx = -INFINITY;
        for (float& s : scores) mx = std::max(mx, s *= scale);
        double sum = 0;
        for (float& s : scores) sum += (s = std::exp(s - mx));
        const float inv = float(1.0 / sum);
        std::fill(o, o + Dv, 0.0f);
        for_blocks([&](int64_t j, int64_t n) {
          for (int64_t r = 0; r < n; ++r) {
            const char* v = kv_at(v_cache, j) + r * v_cache.stride_bytes(1);
            axpy_f32(scores[j - first + r] * inv, row_f32(v, Dv), o, Dv);
          }
        });
        continue;
      }
      // f16 cache: ggml's arithmetic and order (ggml_order.h): the single-row order of a
      // decode step for every row, or, as llama.cpp (CpuOrder::kLlamaCpp), the batched order
      // for rows of a prompt chunk.
      const ggml_order::Order order = q_len > 1 && llamacpp_order ? ggml_order::Order::Batched
                                                                  : ggml_order::Order::Single;
      std::copy(qv, qv + D, qbuf.begin());
      round_to_f16(qbuf.data(), D);
      // Keys (values) of one block are rows `k_stride` (`v_stride`) f16 apart.
      const int64_t k_stride = k_cache.stride_bytes(1) / 2, v_stride = v_cache.stride_bytes(1) / 2;
      for_blocks([&](int64_t j, int64_t n) {
        ggml_order::dot_rows(qbuf.data(), reinterpret_cast<const uint16_t*>(kv_at(k_cache, j)),
                             k_stride, n, D, order, &scores[j - first]);
      });
      float mx = -INFINITY;
      for (float& s : scores) mx = std::max(mx, s *= scale);
      const double sum = ggml_softmax_exps(scores.data(), first, count, mx);
      const float inv = static_cast<float>(1.0 / sum);
      for (float& s : scores) s *= inv;
      round_to_f16(scores.data(), count);
      const int slots = ggml_order::value_slots(order);
      acc.assign(static_cast<size_t>(slots * Dv), 0.0f);
      for_blocks([&](int64_t j, int64_t n) {
        ggml_order::accumulate_values(&scores[j - first],
                                      reinterpret_cast<const uint16_t*>(kv_at(v_cache, j)),
                                      v_stride, n, Dv, j, slots, acc.data());
      });
      ggml_order::reduce_values(acc.data(), slots, Dv, o);
    }
  });
}

}  // namespace vllm::cpu
