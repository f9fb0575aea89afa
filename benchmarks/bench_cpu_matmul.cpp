// CPU matmul of one 4096 x 4096 weight by M activation rows, per weight type, with the bytes
// of weight read per second, beside this machine's read bandwidth measured the same way (a
// sum over 1 GiB, in the same thread pool), the limit a decode-sized product meets. Wall time.
#include <benchmark/benchmark.h>

#include <random>

#include "model/quantization.h"
#include "runtime/cpu/quant.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"

using namespace vllm;

namespace {

constexpr int64_t kN = 4096, kK = 4096;

const Tensor& weight_f32() {
  static const Tensor w = [] {
    Tensor t = Tensor::empty({kN, kK}, DType::F32);
    std::mt19937 g(7);
    std::normal_distribution<float> d(0, 0.02f);
    for (int64_t i = 0; i < kN * kK; ++i) t.data<float>()[i] = d(g);
    return t;
  }();
  return w;
}

Tensor weight_of(DType type) {
  const Tensor& w = weight_f32();
  if (type == DType::F32) return w;
  if (type == DType::FP8_E4M3) return quantize_fp8_per_tensor(w);
  Tensor out = Tensor::empty({kN, kK}, type);
  for (int64_t n = 0; n < kN; ++n) {
    const float* row = reinterpret_cast<const float*>(w.row(n));
    if (type == DType::BF16) {
      auto* o = reinterpret_cast<uint16_t*>(out.row(n));
      for (int64_t k = 0; k < kK; ++k) o[k] = f32_to_bf16(row[k]);
    } else {
      cpu::quantize_row_q8_0(row, reinterpret_cast<BlockQ8_0*>(out.row(n)), kK);
    }
  }
  return out;
}

void BM_Matmul(benchmark::State& state, DType type) {
  const Tensor w = weight_of(type);
  const int64_t M = state.range(0);
  Tensor x = Tensor::empty({M, kK}, DType::F32), out = Tensor::empty({M, kN}, DType::F32);
  for (int64_t i = 0; i < M * kK; ++i) x.data<float>()[i] = float(i % 97) / 97.0f - 0.5f;
  for (auto _ : state) {
    matmul(x, w, out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * w.nbytes());
  state.counters["bytes_per_weight"] = double(w.nbytes()) / double(kN * kK);
}

// Reads 1 GiB of f32 (summed, so nothing is skipped) split over the pool's threads.
void BM_ReadBandwidth(benchmark::State& state) {
  const int64_t n = int64_t(1) << 28;
  std::vector<float> a(static_cast<size_t>(n), 1.0f);
  ThreadPool& pool = cpu_pool();
  for (auto _ : state) {
    pool.parallel_for(n / 4096, [&](int64_t b0, int64_t b1) {
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t i = b0 * 4096; i < b1 * 4096; i += 4) {
        s0 += a[size_t(i)];
        s1 += a[size_t(i) + 1];
        s2 += a[size_t(i) + 2];
        s3 += a[size_t(i) + 3];
      }
      benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
    });
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * int64_t(sizeof(float)));
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
#define MATMUL_CASE(name, type)                                               \
  BENCHMARK_CAPTURE(BM_Matmul, name, type)->Arg(1)->Arg(8)->UseRealTime()->Unit( \
      benchmark::kMillisecond)
MATMUL_CASE(f32, DType::F32);
MATMUL_CASE(bf16, DType::BF16);
MATMUL_CASE(q8_0, DType::Q8_0);
MATMUL_CASE(fp8_e4m3, DType::FP8_E4M3);

BENCHMARK_MAIN();
