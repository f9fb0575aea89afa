// Shared helpers of the libFuzzer targets (tests/fuzz/fuzz_*.cpp, built by scripts/fuzz.sh).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace vllm::fuzz {

// ../shared next to the checkout (the shared tokenizers), or $VLLM_FUZZ_SHARED.
inline std::string shared_dir() {
  if (const char* d = std::getenv("VLLM_FUZZ_SHARED")) return d;
  return std::string(VLLM_SOURCE_DIR) + "/../shared";
}

// A tokenizer of ../shared/tokenizers/NAME, loaded once per process.
inline std::unique_ptr<Tokenizer> load_shared_tokenizer(const std::string& name) {
  const std::string dir = shared_dir() + "/tokenizers/" + name;
  try {
    return Tokenizer::from_dir(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: cannot load the tokenizer %s: %s\n", dir.c_str(), e.what());
    std::abort();
  }
}

// A finding that is not a sanitizer report: print it and abort, so libFuzzer saves the input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz check failed: %s\n", what.c_str());
  std::abort();
}

// An in-memory file with a path (/proc/self/fd/N) for readers that only open paths; each
// call of write() replaces its contents.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("fuzz", 0)) {
    if (fd_ < 0) fail("memfd_create");
  }
  ~MemFile() { close(fd_); }
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) fail("ftruncate");
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) fail("pwrite");
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_ = "/proc/self/fd/" + std::to_string(fd_);
};

// Splits fuzz input at the first `sep`: (before, after); after is empty without one.
inline std::pair<std::string_view, std::string_view> split(std::string_view in, char sep) {
  const size_t at = in.find(sep);
  if (at == std::string_view::npos) return {in, {}};
  return {in.substr(0, at), in.substr(at + 1)};
}

// Token ids from bytes, 3 per id: mostly inside a vocabulary of `vocab`, sometimes negative
// or far outside it (byte 2 == 0xFF).
inline std::vector<int32_t> fuzz_ids(std::string_view in, int32_t vocab) {
  std::vector<int32_t> ids;
  const auto* d = reinterpret_cast<const uint8_t*>(in.data());
  for (size_t i = 0; i + 3 <= in.size(); i += 3) {
    const uint32_t v = d[i] | (d[i + 1] << 8) | (uint32_t(d[i + 2]) << 16);
    if (d[i + 2] == 0xFF)
      ids.push_back(d[i + 1] & 1 ? -1 - d[i] : INT32_MAX - d[i]);
    else
      ids.push_back(static_cast<int32_t>(v % uint32_t(vocab + 4)));
  }
  return ids;
}

}  // namespace vllm::fuzz
