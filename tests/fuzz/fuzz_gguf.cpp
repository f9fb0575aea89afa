// GGUF reader: any bytes either open (and then every key and tensor reads without a sanitizer
// report) or throw vllm::Error.
#include "fuzz_util.h"
#include "loader/gguf.h"
#include "util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vllm::fuzz::MemFile file;
  const std::string& path = file.write(data, size);
  std::shared_ptr<vllm::GgufFile> g;
  try {
    g = vllm::GgufFile::open(path);
  } catch (const vllm::Error&) {
    return 0;
  }
  for (const std::string& key : g->keys()) {
    // Each getter either reads the value or throws naming the type mismatch.
    try { (void)g->get_int(key); } catch (const vllm::Error&) {}
    try { (void)g->get_float(key); } catch (const vllm::Error&) {}
    try { (void)g->get_string(key); } catch (const vllm::Error&) {}
    try { (void)g->get_bool(key); } catch (const vllm::Error&) {}
    try { (void)g->get_string_array(key); } catch (const vllm::Error&) {}
    try { (void)g->get_int_array(key); } catch (const vllm::Error&) {}
    try { (void)g->get_float_array(key); } catch (const vllm::Error&) {}
    if (!g->type_of(key)) vllm::fuzz::fail("a listed key has no type: " + key);
  }
  for (const auto& t : g->tensors()) {
    if (g->find(t.name) != &t && g->find(t.name) == nullptr)
      vllm::fuzz::fail("a listed tensor is not found: " + t.name);
    if (!t.supported) continue;
    try {
      vllm::Tensor view = g->tensor(t.name);
      // Touch the first and last byte of the view: its range must lie in the file.
      if (t.nbytes > 0) {
        const auto* p = static_cast<const volatile uint8_t*>(view.raw());
        (void)p[0];
        (void)p[t.nbytes - 1];
      }
    } catch (const vllm::Error&) {
    }
  }
  return 0;
}
