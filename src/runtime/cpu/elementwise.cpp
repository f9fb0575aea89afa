// CPU row-wise kernels: norms, residual adds, rotary embedding, activations, softmax.
#include <cmath>
#include <cstring>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ggml_order.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"

namespace vllm::cpu {
namespace {

inline float* frow(const Tensor& t, int64_t i) { return reinterpret_cast<float*>(t.row(i)); }

// PyTorch's gelu(x, approximate="tanh"), in f32.
inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

// One RMSNorm row in ggml's arithmetic: squares rounded to float, summed in double.
inline void rms_norm_row(const float* x, const float* w, float eps, int64_t n, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float square = x[i] * x[i];
    ss += square;
  }
  const float scale = 1.0f / std::sqrt(float(ss / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void for_rows(int64_t rows, const std::function<void(int64_t)>& fn) {
  cpu_pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fn(r);
  });
}

}  // namespace

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const int64_t n = x.size(-1);
  const int64_t heads = x.ndim() == 3 ? x.size(1) : 1;  // [T, H, D]: each head is a row
  const float* w = weight.data<float>();
  for_rows(x.size(0) * heads, [&](int64_t r) {
    const int64_t t = r / heads, h = r % heads;
    const int64_t xs = x.ndim() == 3 ? x.stride_bytes(1) : 0;
    const int64_t os = out.ndim() == 3 ? out.stride_bytes(1) : 0;
    rms_norm_row(reinterpret_cast<const float*>(x.row(t) + h * xs), w, eps, n,
                 reinterpret_cast<float*>(out.row(t) + h * os));
  });
}

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.size(-1);
  for_rows(a.size(0), [&](int64_t r) {
    const float *pa = frow(a, r), *pb = frow(b, r);
    float* po = frow(out, r);
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
  });
}

void CpuBackend::add_bias(Tensor& x, const Tensor& bias) {
  const int64_t n = x.size(-1);
  const float* b = bias.data<float>();
  for_rows(x.size(0), [&](int64_t r) {
    float* p = frow(x, r);
    for (int64_t i = 0; i < n; ++i) p[i] += b[i];
  });
}

void CpuBackend::rope(Tensor& x, const Tensor& positions, const RopeParams& params) {
  const int64_t heads = x.size(1);
  const int half = params.rotary_dim / 2;
  const int32_t* pos = positions.data<int32_t>();
  for_rows(x.size(0), [&](int64_t t) {
    std::vector<float> cos_v(half), sin_v(half);
    float chain = float(pos[t]);
    for (int i = 0; i < half; ++i) {
      float theta;
      if (params.ggml_theta) {
        const float ff = params.freq_factors.empty() ? 1.0f : params.freq_factors[i];
        const float extrap = chain / ff;
        theta = params.freq_scale * extrap;
        if (params.ext_factor != 0.0f) {  // ggml's rope_yarn
          const float y = (float(i) - params.yarn_low) /
                          std::max(0.001f, params.yarn_high - params.yarn_low);
          const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * params.ext_factor;
          theta = theta * (1.0f - mix) + extrap * mix;
        }
        chain *= params.theta_scale;
      } else {
        theta = float(pos[t]) * params.inv_freq[i];
      }
      cos_v[i] = std::cos(theta) * params.mscale;
      sin_v[i] = std::sin(theta) * params.mscale;
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = reinterpret_cast<float*>(x.row(t) + h * x.stride_bytes(1));
      for (int i = 0; i < half; ++i) {
        const int i0 = params.neox ? i : 2 * i;
        const int i1 = params.neox ? i + half : 2 * i + 1;
        const float a = v[i0], b = v[i1];
        v[i0] = std::fma(a, cos_v[i], -(b * sin_v[i]));
        v[i1] = std::fma(a, sin_v[i], b * cos_v[i]);
      }
    }
  });
}

namespace {
// out[r] = gated(gate_up[r, :F], gate_up[r, F:], out[r], F) for every row.
template <typename Gated>
void gated_rows(const Tensor& gate_up, Tensor& out, Gated gated) {
  const int64_t f = out.size(-1);
  for_rows(out.size(0), [&](int64_t r) {
    const float* g = frow(gate_up, r);
    gated(g, g + f, frow(out, r), f);
  });
}
}  // namespace

void CpuBackend::silu_and_mul(const Tensor& gate_up, Tensor& out) {
  gated_rows(gate_up, out, ggml_order::swiglu);
}

void CpuBackend::gelu_tanh_and_mul(const Tensor& gate_up, Tensor& out) {
  gated_rows(gate_up, out, [](const float* g, const float* u, float* o, int64_t f) {
    for (int64_t i = 0; i < f; ++i) o[i] = gelu_tanh(g[i]) * u[i];
  });
}

void CpuBackend::gelu_tanh_f16_and_mul(const Tensor& gate_up, Tensor& out) {
  // ggml's table: gelu of every f16 value, rounded to f16. Its f32 formula is ggml_gelu_f32
  // with the fused multiply-add GCC makes of it on x86.
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = f16_to_f32(uint16_t(h));
      const float v = 0.5f * x *
                      (1.0f + std::tanh(0.79788456080286535587989211986876f * x *
                                        std::fma(0.044715f * x, x, 1.0f)));
      t[h] = f16_to_f32(f32_to_f16(v));
    }
    return t;
  }();
  gated_rows(gate_up, out, [](const float* g, const float* u, float* o, int64_t f) {
    for (int64_t i = 0; i < f; ++i) {
      if (g[i] <= -10.0f) o[i] = 0.0f;
      else if (g[i] >= 10.0f) o[i] = g[i] * u[i];
      else o[i] = table[f32_to_f16(g[i])] * u[i];
    }
  });
}

void CpuBackend::scale(Tensor& x, float s) {
  const int64_t n = x.size(-1);
  for_rows(x.size(0), [&](int64_t r) {
    float* p = frow(x, r);
    for (int64_t i = 0; i < n; ++i) p[i] *= s;
  });
}

void CpuBackend::fill(Tensor& x, float value) {
  const int64_t n = x.size(-1);
  for_rows(x.size(0), [&](int64_t r) { std::fill(frow(x, r), frow(x, r) + n, value); });
}

void CpuBackend::copy_strided(const Tensor& src, Tensor& dst) {
  const int64_t heads = src.ndim() == 3 ? src.size(1) : 1, n = src.size(-1);
  for (int64_t t = 0; t < src.size(0); ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const char* s = src.row(t) + h * (src.ndim() == 3 ? src.stride_bytes(1) : 0);
      char* d = dst.row(t) + h * (dst.ndim() == 3 ? dst.stride_bytes(1) : 0);
      std::memcpy(d, s, static_cast<size_t>(n) * sizeof(float));
    }
}

// Sequential over j (one row's additions stay in order); the columns of a row in parallel.
void CpuBackend::index_add_scaled(const Tensor& src, const Tensor& rows, const Tensor& weights,
                                  Tensor& out) {
  const int64_t n = src.size(0), C = src.size(1);
  const int32_t* r = rows.data<int32_t>();
  const float* w = weights.data<float>();
  for (int64_t j = 0; j < n; ++j) {
    float* o = frow(out, r[j]);
    const float* v = reinterpret_cast<const float*>(src.row(j));
    for (int64_t i = 0; i < C; ++i) o[i] += v[i] * w[j];
  }
}

void CpuBackend::softmax(const Tensor& x, Tensor& out) {
  const int64_t n = x.size(-1);
  for_rows(x.size(0), [&](int64_t r) {
    const float* in = frow(x, r);
    float* o = frow(out, r);
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, in[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (o[i] = std::exp(in[i] - mx));
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) o[i] *= inv;
  });
}

void CpuBackend::argmax_rows(const Tensor& x, Tensor& out) {
  const int64_t n = x.size(-1);
  int32_t* o = out.data<int32_t>();
  for_rows(x.size(0), [&](int64_t r) {
    const float* in = frow(x, r);
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (in[i] > in[best]) best = i;
    o[r] = static_cast<int32_t>(best);
  });
}

}  // namespace vllm::cpu
