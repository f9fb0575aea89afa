#include "runtime/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#define VLLM_PAUSE() _mm_pause()
#else
#define VLLM_PAUSE() ((void)0)
#endif

namespace vllm {

struct ThreadPool::Job {
  std::function<void(int64_t, int64_t)> fn;
  int64_t n = 0, chunk = 1, num_chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::work_on(Job& job) {
  for (;;) {
    const int64_t c = job.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.num_chunks) return;
    const int64_t begin = c * job.chunk;
    job.fn(begin, std::min(job.n, begin + job.chunk));
    job.done.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 20000; ++spin) {
      VLLM_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    std::shared_ptr<Job> job;
    {
      std::lock_guard lock(mutex_);
      job = job_;
    }
    if (job) work_on(*job);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (num_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = fn;
  job->n = n;
  // A few chunks per thread balance uneven work without much bookkeeping.
  job->num_chunks = std::min<int64_t>(n, int64_t(num_threads_) * 4);
  job->chunk = (n + job->num_chunks - 1) / job->num_chunks;
  job->num_chunks = (n + job->chunk - 1) / job->chunk;
  {
    std::lock_guard lock(mutex_);
    job_ = job;
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  work_on(*job);
  for (int spin = 0; job->done.load(std::memory_order_acquire) != job->num_chunks; ++spin) {
    if (spin < 4096)
      VLLM_PAUSE();
    else
      std::this_thread::yield();  // a worker holding a chunk was descheduled
  }
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex pool_mutex;
}  // namespace

int default_num_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

static thread_local ThreadPool* thread_pool_override = nullptr;

ThreadPool& cpu_pool() {
  if (thread_pool_override) return *thread_pool_override;
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

ScopedCpuPool::ScopedCpuPool(ThreadPool& pool) : previous_(thread_pool_override) {
  thread_pool_override = &pool;
}

ScopedCpuPool::~ScopedCpuPool() { thread_pool_override = previous_; }

}  // namespace vllm
