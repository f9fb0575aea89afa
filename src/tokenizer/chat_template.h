// Hugging Face chat templates: a Jinja2 subset parsed once and rendered byte-identically to
// transformers' apply_chat_template (jinja2 with trim/lstrip blocks, tojson, raise_exception).
#pragma once
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/jinja_error.h"  // TemplateError
#include "tokenizer/render_limits.h"

namespace vllm {

namespace jinja {
struct Template;
}

inline constexpr const char* kRenderLimitError = "RenderLimitError";

class ChatTemplate {
 public:
  // Local wall-clock time for strftime_now(); tests inject a fixed date.
  using Clock = std::function<std::tm()>;

  // Throws vllm::Error "unsupported construct X at line N" for syntax errors and for tags,
  // filters or tests outside the supported subset.
  static ChatTemplate parse(std::string source);

  // context: {"messages": [...], "tools": [...] | null, "add_generation_prompt": bool,
  // "bos_token": "...", "eos_token": "...", any extra template kwargs}. Throws TemplateError
  // (kind() names jinja2's exception) for raise_exception() and render-time errors, and with
  // kind() == kRenderLimitError when the render exceeds `limits`.
  std::string render(const nlohmann::ordered_json& context,
                     const RenderLimits& limits = {}) const;
  std::string render(const nlohmann::ordered_json& context, const Clock& clock,
                     const RenderLimits& limits = {}, RenderStats* stats = nullptr) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  std::shared_ptr<const jinja::Template> tmpl_;
};

}  // namespace vllm
