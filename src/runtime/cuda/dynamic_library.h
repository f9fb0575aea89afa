// A shared library opened with dlopen on first use, its functions bound by name: how the CUDA
// backend reaches cuBLASLt and NCCL, whose link-time symbols would tie the binary to one
// release of each.
#pragma once
#include <dlfcn.h>

#include <initializer_list>
#include <string>
#include <type_traits>

#include "util/check.h"

namespace vllm::cuda {

class DynamicLibrary {
 public:
  // The first of `names` that loads. Throws "cannot load WHAT: " and every loader error.
  DynamicLibrary(std::initializer_list<const char*> names, std::string what)
      : what_(std::move(what)) {
    std::string errors;
    for (const char* name : names) {
      handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle_) return;
      errors += std::string(errors.empty() ? "" : "; ") + dlerror();
    }
    throw Error("cannot load " + what_ + ": " + errors);
  }
  // fn = the library's `symbol`; throws naming both when it has none. The handle stays open
  // for the life of the process (the bound functions outlive this object).
  template <typename Fn>
  void bind(Fn& fn, const char* symbol) const {
    fn = reinterpret_cast<std::remove_reference_t<Fn>>(dlsym(handle_, symbol));
    if (!fn) throw Error(what_ + " has no symbol " + symbol);
  }

 private:
  void* handle_ = nullptr;
  std::string what_;
};

}  // namespace vllm::cuda
