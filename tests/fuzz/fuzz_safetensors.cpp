// safetensors header reader: any bytes either open (and then every tensor is found, and its
// view reads inside the file) or throw vllm::Error.
#include "fuzz_util.h"
#include "loader/safetensors.h"
#include "util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vllm::fuzz::MemFile file;
  const std::string& path = file.write(data, size);
  std::shared_ptr<vllm::SafetensorsModel> m;
  try {
    m = vllm::SafetensorsModel::open(path);
  } catch (const vllm::Error&) {
    return 0;
  }
  for (const std::string& name : m->names()) {
    const auto* info = m->find(name);
    if (info == nullptr || !m->has(name)) vllm::fuzz::fail("a listed tensor is not found: " + name);
    (void)m->file_of(name);
    try {
      vllm::Tensor view = m->tensor(name);
      if (view.nbytes() > 0) {
        const auto* p = static_cast<const volatile uint8_t*>(view.raw());
        (void)p[0];
        (void)p[view.nbytes() - 1];
      }
    } catch (const vllm::Error&) {
    }
  }
  return 0;
}
