// Scalar build of the ggml-order kernels (any CPU; also the readable statement of each lane's
// arithmetic), and the dispatch to the CPU's best build.
#include "runtime/cpu/ggml_order.h"

#include <cmath>
#include <cstring>

#include "runtime/cpu/isa.h"
#include "runtime/dtype.h"

namespace vllm::cpu::ggml_order {
namespace scalar {
namespace {

struct Lanes {
  float v[16];

  static Lanes zero() { return set1(0.0f); }
  static Lanes set1(float x) {
    Lanes r;
    for (float& e : r.v) e = x;
    return r;
  }
  static Lanes load(const float* p) {
    Lanes r;
    std::memcpy(r.v, p, sizeof(r.v));
    return r;
  }
  static Lanes load_h(const uint16_t* p) {
    Lanes r;
    for (int i = 0; i < 16; ++i) r.v[i] = f16_to_f32(p[i]);
    return r;
  }
  void store(float* p) const { std::memcpy(p, v, sizeof(v)); }
  static Lanes fma(const Lanes& a, const Lanes& b, const Lanes& c) {
    Lanes r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static Lanes add(const Lanes& a, const Lanes& b) {
    Lanes r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] + b.v[i];
    return r;
  }
  static Lanes sub(const Lanes& a, const Lanes& b) {
    Lanes r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] - b.v[i];
    return r;
  }
  static Lanes mul(const Lanes& a, const Lanes& b) {
    Lanes r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] * b.v[i];
    return r;
  }
  static Lanes div(const Lanes& a, const Lanes& b) {
    Lanes r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] / b.v[i];
    return r;
  }
  static float reduce(const Lanes& a) {
    float x[16];
    std::memcpy(x, a.v, sizeof(x));
    for (int l = 0; l < 8; ++l) x[l] += x[l + 8];
    for (int l = 0; l < 4; ++l) x[l] += x[l + 4];
    return (x[0] + x[2]) + (x[1] + x[3]);
  }
  static Lanes neg(const Lanes& a) {
    Lanes r;
    for (int i = 0; i < 16; ++i) r.v[i] = -a.v[i];
    return r;
  }
  static Lanes scale_pow2(const Lanes& j, const Lanes& n) {
    Lanes r;
    for (int i = 0; i < 16; ++i) {
      const float e = n.v[i];
      if (std::isnan(e)) r.v[i] = j.v[i];  // NaN in, NaN out
      else if (std::fabs(e) > 192) r.v[i] = e <= 0 ? 0.0f : INFINITY;
      else r.v[i] = std::ldexp(j.v[i], static_cast<int>(e));
    }
    return r;
  }
};

}  // namespace
}  // namespace scalar
}  // namespace vllm::cpu::ggml_order

#define VLLM_GGML_ORDER_NS scalar
#include "runtime/cpu/ggml_order.inc"

namespace vllm::cpu::ggml_order {

#define VLLM_GGML_ORDER_DISPATCH(call)            \
  switch (detected_isa()) {                       \
    case Isa::Avx512Vnni: return avx512::call;    \
    case Isa::Avx2: return avx2::call;            \
    case Isa::Scalar: break;                      \
  }                                               \
  return scalar::call;

void dot_rows(const float* q, const uint16_t* rows, int64_t stride, int64_t count, int64_t n,
              Order order, float* out) {
  VLLM_GGML_ORDER_DISPATCH(dot_rows(q, rows, stride, count, n, order, out))
}

double exp_sum16(const float* x, float max, float* y) {
  VLLM_GGML_ORDER_DISPATCH(exp_sum16(x, max, y))
}

void accumulate_values(const float* p, const uint16_t* rows, int64_t stride, int64_t count,
                       int64_t n, int64_t first_index, int slots, float* acc) {
  VLLM_GGML_ORDER_DISPATCH(accumulate_values(p, rows, stride, count, n, first_index, slots, acc))
}

void reduce_values(const float* acc, int slots, int64_t n, float* out) {
  VLLM_GGML_ORDER_DISPATCH(reduce_values(acc, slots, n, out))
}

void swiglu(const float* x, const float* g, float* y, int64_t n) {
  VLLM_GGML_ORDER_DISPATCH(swiglu(x, g, y, n))
}

#undef VLLM_GGML_ORDER_DISPATCH

}  // namespace vllm::cpu::ggml_order
