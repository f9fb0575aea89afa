#include "util/check.h"

namespace vllm {

void fail_check(const char* expr, const std::string& msg, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": check failed: " << expr;
  if (!msg.empty()) os << ": " << msg;
  throw Error(os.str());
}

}  // namespace vllm
