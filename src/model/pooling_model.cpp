#include "model/pooling_model.h"

#include <algorithm>
#include <cmath>

namespace vllm {

void l2_normalize(float* v, int64_t n) {
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(v[i]) * v[i];
  const float norm = static_cast<float>(std::max(std::sqrt(sq), 1e-12));
  for (int64_t i = 0; i < n; ++i) v[i] /= norm;
}

}  // namespace vllm
