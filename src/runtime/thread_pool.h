// A fixed pool of worker threads for data-parallel kernels. Work is handed out in chunks
// from an atomic counter, so a worker the OS has not scheduled yet delays nobody: the
// threads that are running take its chunks. Workers spin briefly between jobs, since the
// hundreds of small ops of a decode step follow each other within microseconds.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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
  // Splits [0, n) into contiguous chunks and calls fn(begin, end) once per chunk, on the
  // caller and the workers; returns when every chunk is done.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Job;
  void worker();
  static void work_on(Job& job);

  int num_threads_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;  // guards job_
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

// The pool CPU kernels use: the calling thread's own (ScopedCpuPool) if it has one, else the
// process-wide pool, which set_num_threads replaces (not while running).
ThreadPool& cpu_pool();
void set_num_threads(int n);
int default_num_threads();

// While it lives, cpu_pool() on the constructing thread returns `pool`: the ranks of a
// tensor-parallel group run side by side, each on a pool of its own (a pool runs one job at
// a time).
class ScopedCpuPool {
 public:
  explicit ScopedCpuPool(ThreadPool& pool);
  ~ScopedCpuPool();
  ScopedCpuPool(const ScopedCpuPool&) = delete;
  ScopedCpuPool& operator=(const ScopedCpuPool&) = delete;

 private:
  ThreadPool* previous_;
};

}  // namespace vllm
