#include "runtime/thread_pool.h"

#include <algorithm>
#include <memory>
#include <mutex>

#if defined(__x86_64__)
#include <immintrin.h>
#define VLLM_PAUSE() _mm_pause()
#else
#define VLLM_PAUSE() ((void)0)
#endif

namespace vllm {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    // Spin for a while, then block on the atomic: new jobs usually follow within microseconds.
    for (int spin = 0; g == seen && spin < 200000; ++spin) {
      VLLM_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    (*job_)(index, num_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, num_threads_);
  while (pending_.load(std::memory_order_acquire) != 0) VLLM_PAUSE();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (num_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  run([&](int i, int nt) {
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min<int64_t>(n, i * chunk);
    const int64_t end = std::min<int64_t>(n, begin + chunk);
    if (begin < end) fn(begin, end);
  });
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex pool_mutex;
}  // namespace

int default_num_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& cpu_pool() {
  auto& p = pool_slot();
  if (!p) {
    std::lock_guard lock(pool_mutex);
    if (!p) p = std::make_unique<ThreadPool>(default_num_threads());
  }
  return *p;
}

void set_num_threads(int n) {
  std::lock_guard lock(pool_mutex);
  auto& p = pool_slot();
  if (p && p->num_threads() == n) return;
  p.reset();
  p = std::make_unique<ThreadPool>(n);
}

}  // namespace vllm
