// RoPE frequency tables, computed in f32 the way transformers' rope initialisers do.
#include <algorithm>
#include <cmath>

#include "model/config.h"
#include "util/check.h"

namespace vllm {
namespace {

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double yarn_correction_dim(double rotations, int dim, double base, int max_pos) {
  return (dim * std::log(max_pos / (rotations * 2 * M_PI))) / (2 * std::log(base));
}

}  // namespace

RopeTables compute_rope_tables(const RopeSpec& rope, int head_dim, int max_position_embeddings,
                               int max_model_len) {
  const int dim = static_cast<int>(head_dim * rope.partial_rotary_factor);
  const int half = dim / 2;
  const float base = static_cast<float>(rope.theta);
  const RopeScaling& s = rope.scaling;
  RopeTables out;
  std::vector<float> pos_freqs(half);
  for (int i = 0; i < half; ++i)
    pos_freqs[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  out.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) out.inv_freq[i] = 1.0f / pos_freqs[i];

  if (s.type == "default") return out;
  const float factor = static_cast<float>(s.factor);
  if (s.type == "linear") {
    for (float& f : out.inv_freq) f /= factor;
    return out;
  }
  if (s.type == "llama3") {
    const float old_len = static_cast<float>(s.original_max_position_embeddings);
    const float lff = static_cast<float>(s.low_freq_factor);
    const float hff = static_cast<float>(s.high_freq_factor);
    const float low_wavelen = old_len / lff, high_wavelen = old_len / hff;
    for (float& f : out.inv_freq) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      float g = wavelen > low_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      if (medium) {
        const float smooth = (old_len / wavelen - lff) / (hff - lff);
        g = (1 - smooth) * g / factor + smooth * g;
      }
      f = g;
    }
    return out;
  }
  if (s.type == "yarn") {
    const int orig = s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings
                                                            : max_position_embeddings;
    double attention = 0;
    if (s.attention_factor) {
      attention = *s.attention_factor;
    } else if (s.mscale && s.mscale_all_dim) {
      attention = yarn_mscale(s.factor, *s.mscale) / yarn_mscale(s.factor, *s.mscale_all_dim);
    } else {
      attention = yarn_mscale(s.factor, 1.0);
    }
    double low = yarn_correction_dim(s.beta_fast, dim, rope.theta, orig);
    double high = yarn_correction_dim(s.beta_slow, dim, rope.theta, orig);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
      const float extrapolation = 1.0f - ramp;
      const float interp = 1.0f / (factor * pos_freqs[i]);
      const float extrap = 1.0f / pos_freqs[i];
      out.inv_freq[i] = interp * (1 - extrapolation) + extrap * extrapolation;
    }
    out.mscale = static_cast<float>(attention);
    return out;
  }
  if (s.type == "longrope") {
    // One divisor per pair: the long factors when the context served reaches past the
    // original one (a static choice, so a token's rotation never depends on its batch).
    const int orig = s.original_max_position_embeddings;
    const int served = max_model_len > 0 ? max_model_len : max_position_embeddings;
    const std::vector<double>& ext = served > orig ? s.long_factor : s.short_factor;
    VLLM_CHECK(static_cast<int>(ext.size()) == half, "longrope factors for ", half, " pairs");
    for (int i = 0; i < half; ++i)
      out.inv_freq[i] = 1.0f / (static_cast<float>(ext[i]) * pos_freqs[i]);
    if (s.attention_factor) {
      out.mscale = static_cast<float>(*s.attention_factor);
    } else {
      const double f = static_cast<double>(max_position_embeddings) / orig;
      out.mscale = f <= 1.0 ? 1.0f : static_cast<float>(std::sqrt(1 + std::log(f) / std::log(orig)));
    }
    return out;
  }
  throw Error("unsupported rope_scaling type '" + s.type + "'");
}

}  // namespace vllm
