#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_eval.h"

namespace vllm {

ChatTemplate ChatTemplate::parse(std::string source) {
  ChatTemplate t;
  try {
    t.tmpl_ = jinja::parse_template(source);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // keep the one-exception-type contract at this boundary
    throw Error(std::string("chat template parse failed: ") + e.what());
  }
  t.source_ = std::move(source);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const RenderLimits& limits) const {
  return render(context, [] {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    return local;
  }, limits);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const Clock& clock,
                                 const RenderLimits& limits, RenderStats* stats) const {
  const auto start = std::chrono::steady_clock::now();
  if (!context.is_object()) throw Error("chat template context must be a JSON object");
  auto globals = std::make_shared<jinja::Scope>();
  jinja::add_globals(*globals);
  auto root = std::make_shared<jinja::Scope>();
  root->parent = globals;
  for (const auto& [key, value] : context.items()) root->set(key, jinja::Value::from_json(value));
  std::string out;
  try {
    jinja::Evaluator ev(root, clock, limits);
    ev.render(tmpl_->body, out);
    if (stats) {
      stats->steps = ev.budget().steps();
      stats->output_bytes = out.size();
      stats->elapsed = std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::steady_clock::now() - start);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // an interpreter bug must not escape as a foreign type
    throw TemplateError("InternalError", e.what());
  }
  return out;
}

}  // namespace vllm
