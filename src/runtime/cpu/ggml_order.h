// The f16 attention arithmetic of ggml's CPU backend (llama.cpp without flash attention, f16
// K/V cache) and its SwiGLU, reproduced operation for operation so that our logits equal
// llama.cpp's to the last bit and greedy decoding follows the same path. Float addition is
// not associative, and an int8 activation quantiser downstream turns a last-bit difference
// into a visible one, so the order of every sum matters, not just its precision.
//
// ggml computes the two products of attention as f16 matrix products (q and the softmax
// weights rounded to f16, f32 accumulation) in one of two orders, chosen by how many query
// rows the step has:
// - Single (one query row, ggml_vec_dot_f16): 4 accumulators of 16 lanes take consecutive
//   16-element pieces of each 64-element chunk; then (acc0 + acc2) + (acc1 + acc3), a 16-lane
//   tree sum, and any tail past a multiple of 64 added one product at a time in double.
// - Batched (2+ rows, llamafile's tinyBLAS): one accumulator of 16 lanes over 16-element
//   pieces, then the 16-lane tree sum. Needs a length that is a multiple of 16; otherwise
//   ggml falls back to the single order.
// The 16-lane tree sum is _mm512_reduce_add_ps as GCC defines it: lanes i + (i+8), then
// i + (i+4), then (0+2) + (1+3). The softmax exponentials are ggml's AVX-512 expf, summed
// 16 keys at a time (tree sum, then added in double). Keys take their lanes from their
// absolute position, as ggml's cache cells do when a sequence fills the cache from cell 0.
//
// Every kernel has a scalar, an AVX2 and an AVX-512 build; all three give identical bits
// (tests/runtime/test_ggml_order.cpp checks that), so the result does not depend on the CPU.
#pragma once
#include <cstdint>

namespace vllm::cpu::ggml_order {

enum class Order { Single, Batched };

// Lanes a key's weighted value is accumulated in before the final sum: 64 or 16.
inline int value_slots(Order order) { return order == Order::Single ? 64 : 16; }

// out[r] = q . rows[r * stride .. + n] for count f16 rows, q already rounded to f16.
void dot_rows(const float* q, const uint16_t* rows, int64_t stride, int64_t count, int64_t n,
              Order order, float* out);
// y[i] = expf(x[i] - max) for 16 values; returns their tree sum, widened to double.
double exp_sum16(const float* x, float max, float* y);
// For count f16 rows of n values, key first_index + r: acc[slot][:] += p[r] * row, where slot
// is the key's lane (its index modulo `slots`), acc holding slots x n floats.
void accumulate_values(const float* p, const uint16_t* rows, int64_t stride, int64_t count,
                       int64_t n, int64_t first_index, int slots, float* acc);
// out[:n] = the lane sums of acc (slots x n) in ggml's order for that many slots.
void reduce_values(const float* acc, int slots, int64_t n, float* out);
// y = x / (1 + expf(-x)) * g, ggml's SwiGLU: its expf on 16-lane pieces, glibc's on the tail.
void swiglu(const float* x, const float* g, float* y, int64_t n);

#define VLLM_GGML_ORDER_DECLS                                                                  \
  void dot_rows(const float* q, const uint16_t* rows, int64_t stride, int64_t count,          \
                int64_t n, Order order, float* out);                                           \
  double exp_sum16(const float* x, float max, float* y);                                      \
  void accumulate_values(const float* p, const uint16_t* rows, int64_t stride, int64_t count, \
                         int64_t n, int64_t first_index, int slots, float* acc);              \
  void reduce_values(const float* acc, int slots, int64_t n, float* out);                     \
  void swiglu(const float* x, const float* g, float* y, int64_t n);

// Each ISA build, for tests that compare them; the functions above pick the CPU's best.
namespace scalar { VLLM_GGML_ORDER_DECLS }
namespace avx2 { VLLM_GGML_ORDER_DECLS }
namespace avx512 { VLLM_GGML_ORDER_DECLS }
#undef VLLM_GGML_ORDER_DECLS

}  // namespace vllm::cpu::ggml_order
