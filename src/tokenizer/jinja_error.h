// Render-time errors of the Jinja interpreter. kind() names the Python exception jinja2 would
// raise ("TemplateError" for raise_exception, "UndefinedError", "TypeError", ...).
#pragma once
#include <string>
#include <utility>

#include "util/check.h"

namespace vllm {

class TemplateError : public Error {
 public:
  TemplateError(std::string kind, const std::string& message)
      : Error(message), kind_(std::move(kind)) {}
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
};

namespace jinja {
[[noreturn]] inline void raise(const char* kind, const std::string& message) {
  throw TemplateError(kind, message);
}
// Parse-time failure: the template uses something this interpreter does not implement, or is
// not valid Jinja. The message names the construct and its 1-based source line.
[[noreturn]] inline void unsupported(const std::string& what, int line) {
  throw Error("unsupported construct " + what + " at line " + std::to_string(line));
}
}  // namespace jinja

}  // namespace vllm
