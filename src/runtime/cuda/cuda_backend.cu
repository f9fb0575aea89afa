// CUDA backend: device selection, the stream, the memory pool and copies.
#include "runtime/cuda/cuda_backend.h"

#include "runtime/cuda/cublaslt.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/cuda/common.cuh"
#include "runtime/device.h"
#include "runtime/kernel_options.h"
#include "runtime/thread_pool.h"

namespace vllm::cuda {

bool fusion_enabled() { return kernel_options().cuda_fusion; }

namespace {

constexpr size_t kStagedUploadMin = size_t(1) << 20;  // below: one pageable copy costs less

}  // namespace

struct CudaBackend::UploadStage {
  static constexpr int kBuffers = 4;
  static constexpr size_t kBufferBytes = size_t(16) << 20;
  static constexpr int64_t kPiece = int64_t(1) << 20;  // a thread's share of a buffer at a time
  std::array<void*, kBuffers> host{};
  std::array<cudaEvent_t, kBuffers> done{};  // recorded after each buffer's DMA
  int next = 0;
  ThreadPool pool;

  explicit UploadStage(int threads) : pool(threads) {
    try {
      for (int i = 0; i < kBuffers; ++i) {
        VLLM_CUDA_CHECK(cudaHostAlloc(&host[i], kBufferBytes, cudaHostAllocDefault));
        VLLM_CUDA_CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~UploadStage() { release(); }
  void release() {
    for (int i = 0; i < kBuffers; ++i) {
      if (done[i]) cudaEventSynchronize(done[i]), cudaEventDestroy(done[i]);
      if (host[i]) cudaFreeHost(host[i]);
      done[i] = nullptr, host[i] = nullptr;
    }
  }
};

bool pdl_enabled() {
  static const bool supported = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    const auto attr = cudaDevAttrComputeCapabilityMajor;
    return cudaDeviceGetAttribute(&major, attr, device) == cudaSuccess && major >= 9;
  }();
  return supported && kernel_options().cuda_pdl;
}

bool repeat_launch(const void* kernel) {
  const std::string& pattern = kernel_options().cuda_repeat_kernel;
  if (pattern.empty()) return false;
  static std::mutex mutex;
  static std::map<const void*, bool> seen;
  const std::lock_guard lock(mutex);
  const auto it = seen.find(kernel);
  if (it != seen.end()) return it->second;
  const char* name = nullptr;
  const bool match = cudaFuncGetName(&name, kernel) == cudaSuccess && name &&
                     std::string(name).find(pattern) != std::string::npos;
  if (match) std::fprintf(stderr, "--cuda-repeat-kernel: %s runs twice\n", name);
  seen.emplace(kernel, match);
  return match;
}

CudaBackend::CudaBackend(int index, int physical) : index_(index), physical_(physical) {
  VLLM_CUDA_CHECK(cudaSetDevice(physical));
  VLLM_CUDA_CHECK(
      cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, physical));
  VLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Freed blocks stay in the pool for reuse instead of going back to the driver, so the
  // per-step activations cost no cudaMalloc after the first steps.
  cudaMemPool_t pool;
  VLLM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, physical));
  uint64_t keep = UINT64_MAX;
  VLLM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  VLLM_CHECK(lt().cublasLtCreate(&lt_) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate failed");
  workspace_bytes_ = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper
  VLLM_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CudaBackend::~CudaBackend() {
  // Process exit: the driver reclaims everything; only tidy up what is cheap and safe.
  plans_.clear();
  if (lt_) lt().cublasLtDestroy(lt_);
}

void* CudaBackend::alloc(size_t bytes) {
  if (arena_active_) {
    const size_t at = (arena_used_ + 255) / 256 * 256;
    VLLM_CHECK(at + bytes <= arena_bytes_, "step arena of ", arena_bytes_ >> 20,
               " MiB exhausted");
    arena_used_ = at + bytes;
    return arena_ + at;
  }
  if (profiling_) profile_arena_ = (profile_arena_ + 255) / 256 * 256 + bytes;
  make_current();  // the load thread places every rank's weights
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, bytes, stream_);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error("out of memory on " + device().str() + ": asked for " +
                std::to_string(bytes >> 20) + " MiB with " + std::to_string(free_b >> 20) +
                " MiB free of " + std::to_string(total_b >> 20) + " MiB");
  }
  return p;
}

void CudaBackend::free(void* ptr) {
  const char* c = static_cast<const char*>(ptr);
  if (c >= arena_ && c < arena_ + arena_bytes_) return;  // arena pieces die with the step
  // Not make_current(): nothing may throw here (destructors, process exit).
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != physical_) cudaSetDevice(physical_);
  cudaFreeAsync(ptr, stream_);
}

void CudaBackend::begin_arena(size_t bytes) {
  VLLM_CHECK(!arena_active_, "nested step arenas");
  if (bytes > arena_bytes_) {
    VLLM_CHECK(graphs_alive_ == 0, "the step arena cannot grow while graphs point into it");
    if (arena_) {
      VLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      VLLM_CUDA_CHECK(cudaFree(arena_));
    }
    arena_ = nullptr;
    VLLM_CUDA_CHECK(cudaMalloc(&arena_, bytes));
    arena_bytes_ = bytes;
  }
  arena_used_ = 0;
  arena_active_ = true;
}

void CudaBackend::end_arena() { arena_active_ = false; }

namespace {
cudaMemPool_t default_pool(int index) {
  cudaMemPool_t pool;
  VLLM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
  return pool;
}
}  // namespace

void CudaBackend::begin_profile() {
  VLLM_CHECK(!profiling_ && !arena_active_, "profiling inside a profile or a step arena");
  VLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaMemPool_t pool = default_pool(physical_);
  uint64_t zero = 0;  // resets the high watermark to the current use
  VLLM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  VLLM_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &profile_base_));
  profile_arena_ = 0;
  profiling_ = true;
}

Backend::MemoryProfile CudaBackend::end_profile() {
  VLLM_CHECK(profiling_, "end_profile without begin_profile");
  profiling_ = false;
  VLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaMemPool_t pool = default_pool(physical_);
  uint64_t high = 0;
  VLLM_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
  MemoryProfile p;
  p.peak_bytes = high > profile_base_ ? static_cast<int64_t>(high - profile_base_) : 0;
  p.arena_bytes = static_cast<int64_t>(profile_arena_);
  return p;
}

void CudaBackend::release_cached_memory() {
  VLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  VLLM_CUDA_CHECK(cudaMemPoolTrimTo(default_pool(physical_), 0));
  const std::lock_guard lock(stage_mutex_);
  stage_.reset();  // the weights are in place: the pinned buffers and their threads go
}

void CudaBackend::begin_capture() {
  VLLM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

std::shared_ptr<void> CudaBackend::end_capture() {
  cudaGraph_t graph = nullptr;
  VLLM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  VLLM_CUDA_CHECK(err);
  ++graphs_alive_;
  return std::shared_ptr<void>(exec, [this](void* e) {
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e));
    --graphs_alive_;
  });
}

void CudaBackend::replay(const std::shared_ptr<void>& graph) {
  VLLM_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), stream_));
}

void CudaBackend::staged_upload(void* dst, const void* src, size_t bytes) {
  const std::lock_guard lock(stage_mutex_);
  if (!stage_) {
    const int threads = std::clamp(int(std::thread::hardware_concurrency()), 1, 8);
    stage_ = std::make_unique<UploadStage>(threads);
  }
  UploadStage& s = *stage_;
  const auto* from = static_cast<const char*>(src);
  for (size_t at = 0; at < bytes; at += UploadStage::kBufferBytes) {
    const size_t n = std::min(UploadStage::kBufferBytes, bytes - at);
    const int b = s.next;
    s.next = (s.next + 1) % UploadStage::kBuffers;
    VLLM_CUDA_CHECK(cudaEventSynchronize(s.done[b]));  // its previous DMA has finished
    char* buffer = static_cast<char*>(s.host[b]);
    const int64_t pieces = int64_t((n + UploadStage::kPiece - 1) / UploadStage::kPiece);
    s.pool.parallel_for(pieces, [&](int64_t p0, int64_t p1) {
      const size_t a = size_t(p0 * UploadStage::kPiece);
      const size_t e = std::min(n, size_t(p1 * UploadStage::kPiece));
      std::memcpy(buffer + a, from + at + a, e - a);
    });
    VLLM_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + at, buffer, n,
                                    cudaMemcpyHostToDevice, stream_));
    VLLM_CUDA_CHECK(cudaEventRecord(s.done[b], stream_));
  }
}

void CudaBackend::copy(void* dst, Device dst_device, const void* src, Device src_device,
                       size_t bytes) {
  if (bytes == 0) return;
  make_current();
  if (src_device.kind == DeviceKind::Cpu && dst_device.kind == DeviceKind::Cuda &&
      bytes >= kStagedUploadMin) {
    staged_upload(dst, src, bytes);
    return;
  }
  VLLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  // A copy to the host is complete on return; one from pageable host memory has been staged.
  if (dst_device.kind == DeviceKind::Cpu || src_device.kind == DeviceKind::Cpu)
    VLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::synchronize() { VLLM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaBackend::make_current() {
  int current = -1;
  VLLM_CUDA_CHECK(cudaGetDevice(&current));
  if (current != physical_) VLLM_CUDA_CHECK(cudaSetDevice(physical_));
}

}  // namespace vllm::cuda

namespace vllm {

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error for a CPU run
      return 0;
    }
    return n;
  }();
  return count;
}

namespace {
int backends_per_gpu = 1;
}  // namespace

void set_cuda_backends_per_gpu(int per_gpu) {
  VLLM_CHECK(per_gpu >= 1, "backends per GPU: ", per_gpu);
  backends_per_gpu = per_gpu;
}

int cuda_backends_per_gpu() { return backends_per_gpu; }

int cuda_physical_device(int index) {
  const int count = cuda_device_count();
  return count > 0 ? index % count : index;
}

Backend& cuda_backend(int index) {
  constexpr int kMaxDevices = 16;
  // Never destroyed: tensors released during static destruction still call free().
  static auto& backends = *new std::array<std::unique_ptr<cuda::CudaBackend>, kMaxDevices>();
  static std::mutex mutex;
  VLLM_CHECK(index >= 0 && index < kMaxDevices, "cuda device index ", index);
  if (index >= cuda_device_count() * backends_per_gpu)
    throw Error("cuda:" + std::to_string(index) + " is not present (" +
                std::to_string(cuda_device_count()) + " CUDA device(s) usable)");
  std::lock_guard<std::mutex> lock(mutex);
  if (!backends[index])
    backends[index] = std::make_unique<cuda::CudaBackend>(index, cuda_physical_device(index));
  return *backends[index];
}

DeviceInfo cuda_device_info(int index) {
  auto& be = static_cast<cuda::CudaBackend&>(cuda_backend(index));
  be.make_current();  // cudaMemGetInfo reads the current device
  DeviceInfo info;
  cudaDeviceProp prop{};
  VLLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, cuda_physical_device(index)));
  info.name = prop.name;
  info.multiprocessors = be.multiprocessors();
  VLLM_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

}  // namespace vllm
