// /v1/chat/completions bodies: messages normalized as vLLM does (text parts joined, tool-call
// arguments parsed), rendered with the chat template, encoded without extra special tokens.
#include <optional>

#include "server/api_error.h"
#include "server/protocol.h"
#include "server/protocol_detail.h"
#include "server/serving.h"

namespace vllm::server {
namespace {

std::string content_text(const ojson& content, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw bad_request("'" + where + "' must be a string or a list of parts", "messages");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& part = content[k];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw bad_request("'" + where + "' parts must be objects with a 'type'", "messages");
    const std::string type = part["type"].get<std::string>();
    if (type != "text" && type != "input_text")
      throw bad_request("content part type '" + type + "' is not supported", "messages");
    if (!part.contains("text") || !part["text"].is_string())
      throw bad_request("'" + where + "' text parts need a string 'text'", "messages");
    if (k) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

std::string json_type(const ojson& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "a list";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  return "null";
}

// OpenAI's tool schema, as vLLM's pydantic models check it: a list of {"type": "function"
// (the default), "function": {"name": str, "description": str?, "parameters": object?,
// "strict": bool?}}; other keys are tolerated.
void validate_tools(const ojson& tools) {
  if (!tools.is_array())
    throw bad_request("'tools' must be a list, not " + json_type(tools), "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& tool = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object())
      throw bad_request("'" + where + "' must be an object, not " + json_type(tool), "tools");
    if (auto type = tool.find("type"); type != tool.end() && *type != "function")
      throw bad_request("'" + where + ".type' must be 'function', not " + type->dump(), "tools");
    auto fn = tool.find("function");
    if (fn == tool.end() || fn->is_null())
      throw bad_request("'" + where + ".function' is required", "tools");
    if (!fn->is_object())
      throw bad_request("'" + where + ".function' must be an object, not " + json_type(*fn),
                        "tools");
    auto name = fn->find("name");
    if (name == fn->end() || name->is_null())
      throw bad_request("'" + where + ".function.name' is required", "tools");
    if (!name->is_string())
      throw bad_request("'" + where + ".function.name' must be a string, not " +
                        json_type(*name), "tools");
    auto optional = [&](const char* key, bool (ojson::*is)() const noexcept, const char* what) {
      auto it = fn->find(key);
      if (it != fn->end() && !it->is_null() && !((*it).*is)())
        throw bad_request("'" + where + ".function." + key + "' must be " + what + ", not " +
                          json_type(*it), "tools");
    };
    optional("description", &ojson::is_string, "a string");
    optional("parameters", &ojson::is_object, "an object");
    optional("strict", &ojson::is_boolean, "a boolean");
  }
}

// The limit named in a RenderLimitError, with the flag that raises it.
std::string limit_hint(const std::string& message) {
  if (message.find("step limit") != std::string::npos) return " (--chat-template-max-steps)";
  if (message.find("size limit") != std::string::npos)
    return " (--chat-template-max-output-bytes)";
  if (message.find("time limit") != std::string::npos) return " (--chat-template-timeout)";
  return "";
}

ojson normalize_messages(const ojson& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) throw bad_request("'messages' is required", "messages");
  if (!it->is_array() || it->empty())
    throw bad_request("'messages' must be a non-empty list", "messages");
  ojson out = ojson::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& m = (*it)[i];
    if (!m.is_object()) throw bad_request("messages[" + std::to_string(i) + "] must be an object", "messages");
    if (!m.contains("role") || !m["role"].is_string())
      throw bad_request("messages[" + std::to_string(i) + "] needs a string 'role'", "messages");
    ojson msg = m;
    if (m.contains("content") && !m["content"].is_null()) msg["content"] = content_text(m["content"], i);
    // Templates index tool-call arguments as a mapping, as vLLM prepares them.
    if (auto tc = msg.find("tool_calls"); tc != msg.end() && tc->is_array()) {
      for (auto& call : *tc) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        auto& fn = call["function"];
        if (fn.contains("arguments") && fn["arguments"].is_string()) {
          try {
            ojson args = parse_body(fn["arguments"].get<std::string>());
            if (args.is_object()) fn["arguments"] = std::move(args);
          } catch (const ApiError&) {
          }
        }
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// vLLM's role rule and chat echo: the reply continues the last message's role when no
// generation prompt is added, and echo prepends the last message when it has that role.
void read_role_and_echo(const ojson& body, ChatRequest& r) {
  const bool continue_final = get_bool(body, "continue_final_message").value_or(false);
  const ojson& last = body["messages"].back();
  if (!get_bool(body, "add_generation_prompt").value_or(!continue_final))
    r.role = last["role"].get<std::string>();
  if (!get_bool(body, "echo").value_or(false)) return;
  if (last["role"] == r.role && last.contains("content") && !last["content"].is_null())
    r.echo = content_text(last["content"], body["messages"].size() - 1);
}

}  // namespace

std::string render_chat(const ojson& body, const ServingContext& ctx) {
  ojson messages = normalize_messages(body);
  const bool continue_final = get_bool(body, "continue_final_message").value_or(false);
  const bool add_generation = get_bool(body, "add_generation_prompt").value_or(!continue_final);
  if (continue_final && add_generation)
    throw bad_request("Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                      "continue_final_message");
  std::optional<ChatTemplate> request_template;
  std::optional<std::string> request_source = get_string(body, "chat_template");
  const ojson* kwargs = nullptr;
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object())
      throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    kwargs = &*kw;
  }
  // As vLLM: a template from the request (or smuggled in through the kwargs) runs only on a
  // server that was told to trust it.
  const bool kwargs_template = kwargs && kwargs->contains("chat_template") &&
                               !(*kwargs)["chat_template"].is_null();
  if ((request_source || kwargs_template) && !ctx.config.trust_request_chat_template)
    throw bad_request("a chat template was passed with the request, but the server was not "
                      "started with --trust-request-chat-template; the untrusted template is "
                      "refused", "chat_template");
  if (!request_source && kwargs_template) {
    if (!(*kwargs)["chat_template"].is_string())
      throw bad_request("'chat_template_kwargs.chat_template' must be a string",
                        "chat_template_kwargs");
    request_source = (*kwargs)["chat_template"].get<std::string>();
  }
  if (const auto& src = request_source) {
    try {
      request_template = ChatTemplate::parse(*src);
    } catch (const Error& e) {
      throw bad_request(std::string("invalid chat_template: ") + e.what(), "chat_template");
    }
  }
  const ChatTemplate* tmpl = request_template ? &*request_template
                             : ctx.chat_template ? &*ctx.chat_template : nullptr;
  if (!tmpl)
    throw bad_request("this model has no chat template; start the server with --chat-template "
                      "or pass 'chat_template' in the request");
  ojson context = ojson::object();
  context["messages"] = messages;
  context["tools"] = nullptr;
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    validate_tools(*tools);
    context["tools"] = *tools;
  }
  context["documents"] = body.contains("documents") ? body["documents"] : ojson(nullptr);
  context["add_generation_prompt"] = add_generation;
  // As vLLM: the template sees the request's reasoning effort (gpt-oss style templates).
  if (auto effort = get_string(body, "reasoning_effort")) context["reasoning_effort"] = *effort;
  context["bos_token"] = ctx.tokenizer->bos_token();
  context["eos_token"] = ctx.tokenizer->eos_token();
  if (kwargs) {
    for (const auto& [k, v] : kwargs->items())
      if (k != "messages" && k != "chat_template") context[k] = v;
  }
  RenderLimits limits = ctx.config.render_limits;
  limits.cancelled = [&ctx] { return ctx.abort_all.load(); };
  std::string text;
  try {
    text = tmpl->render(context, limits);
  } catch (const TemplateError& e) {
    if (e.kind() == kRenderLimitError)
      throw bad_request(std::string(e.what()) + limit_hint(e.what()), "messages");
    throw bad_request(std::string("chat template error: ") + e.what(), "messages");
  } catch (const Error& e) {
    throw bad_request(std::string("chat template error: ") + e.what(), "messages");
  }
  if (continue_final) {
    // Cut after the final message's content so the model continues it (vLLM's rule).
    const ojson& last = messages.back();
    if (last.contains("content") && last["content"].is_string()) {
      const std::string content = last["content"].get<std::string>();
      const size_t pos = content.empty() ? std::string::npos : text.rfind(content);
      if (pos != std::string::npos) text.resize(pos + content.size());
    }
  }
  return text;
}

ChatRequest parse_chat_request(const ojson& body, const ServingContext& ctx) {
  detail::require_object(body);
  detail::warn_unknown_fields(body, true);
  detail::reject_unsupported(body);
  ChatRequest r;
  r.model = ctx.resolve_model(get_string(body, "model").value_or(""));
  r.stream = detail::stream_options(body, ctx);
  r.report = detail::token_reporting(body, ctx);
  r.priority = detail::read_priority(body, ctx);
  r.request_id = get_string(body, "request_id").value_or("");
  r.params = detail::sampling_params(
      body, ctx, {"messages", "tools", "max_tokens", "max_completion_tokens", "logprobs",
                  "top_logprobs", "stream", "stream_options", "model", "chat_template",
                  "chat_template_kwargs", "documents", "tool_choice", "echo"});
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null())
    validate_tools(*tools);  // before tool_choice, as pydantic checks the body first
  r.output = detail::chat_output_options(body, ctx, r.params);
  r.logprobs = get_bool(body, "logprobs").value_or(false);
  if (auto top = get_int(body, "top_logprobs")) {
    if (*top < 0)
      throw bad_request("'top_logprobs' must be a non-negative integer", "top_logprobs");
    if (!r.logprobs && *top > 0)
      throw bad_request("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs");
    r.top_logprobs = static_cast<int>(*top);
  }
  if (r.logprobs) r.params.logprobs = r.top_logprobs;
  // vLLM: echo asks for prompt logprobs (top_logprobs of them) unless prompt_logprobs is set.
  if (get_bool(body, "echo").value_or(false) && !r.params.prompt_logprobs && !r.stream.stream)
    r.params.prompt_logprobs = r.top_logprobs;
  if (r.stream.stream && r.params.prompt_logprobs)
    throw bad_request("'prompt_logprobs' is not available when streaming", "prompt_logprobs");
  detail::check_logprobs(r.params, ctx);
  r.prompt.text = render_chat(body, ctx);
  r.prompt.ids = ctx.tokenizer->encode(r.prompt.text,
                                       get_bool(body, "add_special_tokens").value_or(false));
  if (r.prompt.ids.empty()) throw bad_request("the rendered conversation is empty", "messages");
  read_role_and_echo(body, r);
  auto max_tokens = get_int(body, "max_completion_tokens");
  const char* field = "max_completion_tokens";
  if (!max_tokens) {
    max_tokens = get_int(body, "max_tokens");
    field = "max_tokens";
  }
  std::vector<Prompt> prompts = {std::move(r.prompt)};
  detail::truncate_prompts(body, prompts, ctx, max_tokens, field);
  r.prompt = std::move(prompts[0]);
  r.prompt.max_tokens = detail::resolve_max_tokens(max_tokens, r.prompt.ids.size(),
                                                   ctx.max_model_len, field, "messages");
  r.params.max_tokens = r.prompt.max_tokens;
  return r;
}

}  // namespace vllm::server
