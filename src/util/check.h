// Error reporting: one exception type for user-facing failures (bad files, bad input) and one
// check macro for invariants carrying file:line (__FILE__/__LINE__: clang 14, which builds the
// fuzz targets, has no std::source_location with libstdc++ 12).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace vllm {

// Thrown for anything a caller can report to a user: a damaged file, a bad argument.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail_check(const char* expr, const std::string& msg,
                             const char* file, int line);

namespace detail {
inline std::string cat() { return {}; }
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace vllm

// VLLM_CHECK(cond, msg parts...): throws vllm::Error naming file:line and the condition.
#define VLLM_CHECK(cond, ...)                                                   \
  do {                                                                          \
    if (!(cond)) [[unlikely]]                                                   \
      ::vllm::fail_check(#cond, ::vllm::detail::cat(__VA_ARGS__),               \
                         __FILE__, __LINE__);                                   \
  } while (0)
