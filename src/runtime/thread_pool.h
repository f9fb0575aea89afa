// A fixed pool of worker threads for data-parallel kernels. Workers spin briefly between
// jobs so that the hundreds of small ops of a decode step do not pay a wake-up each.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace vllm {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Runs fn(thread_index, num_threads) on every thread (the caller is thread 0) and waits.
  void run(const std::function<void(int, int)>& fn);
  // Splits [0, n) into contiguous chunks, one call of fn(begin, end) per non-empty chunk.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int index);

  int num_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// The process-wide pool used by CPU kernels. set_num_threads replaces it (not while running).
ThreadPool& cpu_pool();
void set_num_threads(int n);
int default_num_threads();

}  // namespace vllm
