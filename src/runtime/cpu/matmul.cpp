// CPU matmul and embedding. Weights stay in their stored type: 32-element block types and
// K-quants are multiplied in int8 against activations quantised once per call (as llama.cpp
// does: Q8_1-style blocks of 32, Q8_K blocks of 256); other types are expanded to f32 a tile
// of rows at a time (FP8 rows of up to four tokens multiply straight from their bytes).
#include <algorithm>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/isa.h"
#include "runtime/cpu/kquant.h"
#include "runtime/cpu/quant.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"

namespace vllm::cpu {
namespace {

constexpr int64_t kRowTile = 16;  // weight rows per task: they stay in L1 across all M rows

bool has_int8_dot(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0;
}

// accumulate: out += x @ w^T, each product rounded to f32 before the add, as a separate add
// would; the int8 tiles write to a per-task scratch that is then added in.
void matmul_int8(const Tensor& x, const Tensor& w, Tensor& out, bool accumulate) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const int64_t nb = K / kQK;
  // The calling thread's buffer; workers reach it through the pointer (not their own copy).
  static thread_local std::vector<BlockQ8_1> xq;
  xq.resize(static_cast<size_t>(M * nb));
  BlockQ8_1* xq_data = xq.data();
  ThreadPool& pool = cpu_pool();
  pool.parallel_for(M, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      quantize_row_q8_1_fast(reinterpret_cast<const float*>(x.row(m)), xq_data + m * nb, K);
  });
  const QDotFn dot = qdot_for(w.dtype());
  const QGemmFn gemm = qgemm_for(w.dtype());
  const int64_t num_tiles = (N + kRowTile - 1) / kRowTile;
  const int64_t ldo = out.stride_bytes(0) / int64_t(sizeof(float));
  pool.parallel_for(num_tiles, [&](int64_t t0, int64_t t1) {
    std::vector<float> scratch(gemm && accumulate ? static_cast<size_t>(M * kRowTile) : 0);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * kRowTile, n1 = std::min(N, n0 + kRowTile);
      float* o = reinterpret_cast<float*>(out.row(0));
      if (gemm && !accumulate) {
        gemm(w.row(n0), w.stride_bytes(0), n1 - n0, xq_data, M, nb, o + n0, ldo);
      } else if (gemm) {
        gemm(w.row(n0), w.stride_bytes(0), n1 - n0, xq_data, M, nb, scratch.data(), kRowTile);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = n0; n < n1; ++n) o[m * ldo + n] += scratch[m * kRowTile + n - n0];
      } else {
        for (int64_t m = 0; m < M; ++m) {
          const BlockQ8_1* a = xq_data + m * nb;
          for (int64_t n = n0; n < n1; ++n) {
            const float v = dot(w.row(n), a, nb);
            o[m * ldo + n] = accumulate ? o[m * ldo + n] + v : v;
          }
        }
      }
    }
  });
}

// K-quants: out (+)= x @ w^T with x quantised to Q8_K, each output in llama.cpp's order
// (kquant.h).
void matmul_kquant(const Tensor& x, const Tensor& w, Tensor& out, bool accumulate) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const int64_t nb = K / kQKK;
  static thread_local std::vector<BlockQ8_K> xq;
  xq.resize(static_cast<size_t>(M * nb));
  BlockQ8_K* xq_data = xq.data();
  ThreadPool& pool = cpu_pool();
  pool.parallel_for(M, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      quantize_row_q8_k(reinterpret_cast<const float*>(x.row(m)), xq_data + m * nb, K);
  });
  const DType type = w.dtype();
  // Every row in the order of a one-row call, unless llama.cpp's shape-dependent order is asked.
  const bool llamacpp = cpu_order() == CpuOrder::kLlamaCpp;
  const int64_t num_tiles = (N + kRowTile - 1) / kRowTile;
  pool.parallel_for(num_tiles, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * kRowTile, n1 = std::min(N, n0 + kRowTile);
      for (int64_t m = 0; m < M; ++m) {
        const KOrder order = llamacpp ? kquant_order(type, N, M, m) : kquant_order(type, N, 1, 0);
        float* o = reinterpret_cast<float*>(out.row(m));
        for (int64_t n = n0; n < n1; ++n) {
          const float v = dot_kquant(type, order, w.row(n), xq_data + m * nb, nb);
          o[n] = accumulate ? o[n] + v : v;
        }
      }
    }
  });
}

// f16 and bf16 weights multiply activations rounded to their own type first, as ggml (its
// vec_dot_type for both) and PyTorch (f16 / bf16 tensors on both sides) do; products and sums
// stay f32.
void matmul_f32(const Tensor& x, const Tensor& w, Tensor& out, bool accumulate) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const int64_t num_tiles = (N + kRowTile - 1) / kRowTile;
  // FP8 rows of a few tokens' products go straight from their bytes (the same sums); more
  // tokens share one dequantized tile.
  const Fp8DotFn fp8 = w.dtype() == DType::FP8_E4M3 && M <= 4 ? fp8_dot() : nullptr;
  const bool direct = w.dtype() == DType::F32 || fp8;
  const bool half = w.dtype() == DType::F16 || w.dtype() == DType::BF16;
  std::vector<float> rounded(half ? static_cast<size_t>(M * K) : 0);
  if (half)
    cpu_pool().parallel_for(M, [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        const float* a = reinterpret_cast<const float*>(x.row(m));
        float* r = rounded.data() + m * K;
        if (w.dtype() == DType::F16) {
          std::copy(a, a + K, r);
          round_to_f16(r, K);
        } else {
          for (int64_t k = 0; k < K; ++k) r[k] = bf16_to_f32(f32_to_bf16(a[k]));
        }
      }
    });
  cpu_pool().parallel_for(num_tiles, [&](int64_t t0, int64_t t1) {
    std::vector<float> tile(direct ? 0 : static_cast<size_t>(kRowTile * K));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * kRowTile, n1 = std::min(N, n0 + kRowTile);
      if (!direct)
        for (int64_t n = n0; n < n1; ++n)
          dequantize_row(w.dtype(), w.row(n), tile.data() + (n - n0) * K, K);
      for (int64_t m = 0; m < M; ++m) {
        const float* a = half ? rounded.data() + m * K : reinterpret_cast<const float*>(x.row(m));
        float* o = reinterpret_cast<float*>(out.row(m));
        for (int64_t n = n0; n < n1; ++n) {
          const float* wr = direct ? reinterpret_cast<const float*>(w.row(n))
                                   : tile.data() + (n - n0) * K;
          const float v =
              fp8 ? fp8(reinterpret_cast<const BlockFp8E4M3*>(w.row(n)), a, K / kFp8Block)
                  : dot_f32(wr, a, K);
          o[n] = accumulate ? o[n] + v : v;
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::matmul(const Tensor& x, const Tensor& w, Tensor& out) {
  if (has_int8_dot(w.dtype()))
    matmul_int8(x, w, out, false);
  else if (is_kquant(w.dtype()))
    matmul_kquant(x, w, out, false);
  else
    matmul_f32(x, w, out, false);
}

// Accumulation only: the norm and activation fusions would change the CPU's arithmetic.
bool CpuBackend::matmul_fused(const Tensor& x, const Tensor& w, Tensor& out,
                              const MatmulFusion& f) {
  if (!f.accumulate || f.norm_weight || f.silu_and_mul || f.rope_cache) return false;
  if (has_int8_dot(w.dtype()))
    matmul_int8(x, w, out, true);
  else if (is_kquant(w.dtype()))
    matmul_kquant(x, w, out, true);
  else
    matmul_f32(x, w, out, true);
  return true;
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, int64_t first_id,
                           Tensor& out) {
  const int64_t T = ids.size(0), D = table.size(1), rows = table.size(0);
  const int32_t* id = ids.data<int32_t>();
  cpu_pool().parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      auto* o = reinterpret_cast<float*>(out.row(t));
      const int64_t r = int64_t(id[t]) - first_id;
      if (r >= 0 && r < rows)
        dequantize_row(table.dtype(), table.row(r), o, D);
      else
        std::fill_n(o, D, 0.0f);
    }
  });
}

}  // namespace vllm::cpu
