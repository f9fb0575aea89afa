// Anthropic Messages bodies -> chat completions bodies (see anthropic_messages.h). The checks
// here name Anthropic's fields; what the chat path then checks (sampling values, the tool
// grammar, the template) it reports itself.
#include <initializer_list>
#include <map>

#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/serving.h"

namespace vllm::server {
namespace {

// The value of `key`, or null when absent or null.
const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

void require_object(const ojson& v, const std::string& path) {
  if (!v.is_object()) throw bad_request("'" + path + "' must be an object", path);
}

// Keys outside `known` are a 400 naming the first one: nothing is silently ignored. A null
// asks for nothing (SDKs echo a block's unset optional fields as null).
void reject_unknown(const ojson& obj, std::initializer_list<const char*> known,
                    const std::string& path) {
  for (const auto& [k, v] : obj.items()) {
    bool ok = v.is_null();
    for (const char* f : known) ok = ok || k == f;
    const std::string name = path.empty() ? k : path + "." + k;
    if (!ok) throw bad_request("'" + name + "' is not supported by this server", name);
  }
}

std::string need_string(const ojson& obj, const char* key, const std::string& path) {
  const ojson* v = field(obj, key);
  const std::string name = path.empty() ? key : path + "." + key;
  if (!v) throw bad_request("'" + name + "' is required", name);
  if (!v->is_string()) throw bad_request("'" + name + "' must be a string", name);
  return v->get<std::string>();
}

// Prompt-caching hints: the prefix cache is automatic here, so any ephemeral breakpoint is
// already honoured; anything else is a 400.
void check_cache_control(const ojson& obj, const std::string& path) {
  const ojson* cc = field(obj, "cache_control");
  if (!cc) return;
  const std::string where = path.empty() ? "cache_control" : path + ".cache_control";
  require_object(*cc, where);
  reject_unknown(*cc, {"type", "ttl"}, where);
  if (need_string(*cc, "type", where) != "ephemeral")
    throw bad_request("'" + where + ".type' must be 'ephemeral'", where);
}

std::string block_type(const ojson& block, const std::string& path) {
  require_object(block, path);
  return need_string(block, "type", path);
}

// A text block -> a chat text part.
ojson text_part(const ojson& block, const std::string& path) {
  reject_unknown(block, {"type", "text", "cache_control", "citations"}, path);
  check_cache_control(block, path);
  if (const ojson* c = field(block, "citations"); c && !(c->is_array() && c->empty()))
    throw bad_request("'" + path + ".citations' is not supported by this server",
                      path + ".citations");
  return {{"type", "text"}, {"text", need_string(block, "text", path)}};
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& path) {
  if (type == "image" || type == "document")
    throw bad_request("'" + path + "': " + type + " content blocks are not supported: this "
                      "server serves text-only models", path);
  throw bad_request("'" + path + "': content block type '" + type + "' is not supported",
                    path);
}

// A string or a list of text blocks -> chat content (a string or text parts).
ojson text_content(const ojson& content, const std::string& path) {
  if (content.is_string()) return content;
  if (!content.is_array())
    throw bad_request("'" + path + "' must be a string or a list of text blocks", path);
  ojson parts = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string p = path + "[" + std::to_string(k) + "]";
    const std::string type = block_type(content[k], p);
    if (type != "text") unsupported_block(type, p);
    parts.push_back(text_part(content[k], p));
  }
  return parts;
}

ojson tool_call(const ojson& block, const std::string& path) {
  reject_unknown(block, {"type", "id", "name", "input", "cache_control"}, path);
  check_cache_control(block, path);
  const ojson* input = field(block, "input");
  if (!input || !input->is_object())
    throw bad_request("'" + path + ".input' must be an object", path + ".input");
  return {{"id", need_string(block, "id", path)},
          {"type", "function"},
          {"function", {{"name", need_string(block, "name", path)}, {"arguments", input->dump()}}}};
}

// Tool names by tool_use id, from the assistant turns so far.
using ToolNames = std::map<std::string, std::string>;

// A tool_result block -> a tool message, named after its call (templates such as hermes
// require the name). An error result says so in its text, the one way a chat template can
// show it to the model.
ojson tool_message(const ojson& block, const std::string& path, const ToolNames& names) {
  reject_unknown(block, {"type", "tool_use_id", "content", "is_error", "cache_control"}, path);
  check_cache_control(block, path);
  ojson content = "";
  if (const ojson* c = field(block, "content")) content = text_content(*c, path + ".content");
  if (const ojson* e = field(block, "is_error")) {
    if (!e->is_boolean())
      throw bad_request("'" + path + ".is_error' must be a boolean", path + ".is_error");
    if (e->get<bool>()) {
      if (content.is_string()) content = "Error: " + content.get<std::string>();
      else content.insert(content.begin(), ojson({{"type", "text"}, {"text", "Error:"}}));
    }
  }
  const std::string id = need_string(block, "tool_use_id", path);
  ojson msg = {{"role", "tool"}, {"tool_call_id", id}, {"content", std::move(content)}};
  if (auto it = names.find(id); it != names.end()) msg["name"] = it->second;
  return msg;
}

// One Anthropic message -> chat messages appended to `out`: tool results become tool
// messages (before the user's text, as Anthropic orders them), tool_use blocks the assistant's
// tool_calls, thinking blocks its reasoning.
void convert_message(const ojson& m, const std::string& path, ToolNames& names, ojson& out) {
  require_object(m, path);
  reject_unknown(m, {"role", "content"}, path);
  const std::string role = need_string(m, "role", path);
  if (role != "user" && role != "assistant")
    throw bad_request("'" + path + ".role' must be 'user' or 'assistant', not '" + role + "'",
                      path + ".role");
  const ojson* content = field(m, "content");
  if (!content) throw bad_request("'" + path + ".content' is required", path + ".content");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array() || (content->empty() && role == "user"))
    throw bad_request("'" + path + ".content' must be a string or a non-empty list of content "
                      "blocks", path + ".content");
  ojson parts = ojson::array(), calls = ojson::array();
  std::string reasoning;
  for (size_t k = 0; k < content->size(); ++k) {
    const std::string p = path + ".content[" + std::to_string(k) + "]";
    const ojson& block = (*content)[k];
    const std::string type = block_type(block, p);
    const bool assistant = role == "assistant";
    if (type == "text") {
      parts.push_back(text_part(block, p));
    } else if (type == "tool_use" && assistant) {
      calls.push_back(tool_call(block, p));
      names[calls.back()["id"].get<std::string>()] = calls.back()["function"]["name"];
    } else if (type == "tool_result" && !assistant) {
      out.push_back(tool_message(block, p, names));
    } else if (type == "thinking" && assistant) {
      reject_unknown(block, {"type", "thinking", "signature"}, p);
      reasoning += need_string(block, "thinking", p);
    } else if (type == "tool_use" || type == "tool_result" || type == "thinking") {
      throw bad_request("'" + p + "': a " + type + " block cannot be in a " + role + " message",
                        p);
    } else {
      unsupported_block(type, p);
    }
  }
  ojson msg = {{"role", role}};
  if (!parts.empty() || calls.empty()) msg["content"] = std::move(parts);
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  if (!reasoning.empty()) msg["reasoning"] = reasoning;
  // A user turn of tool results only has no text message of its own.
  if (role == "assistant" || !msg["content"].empty()) out.push_back(std::move(msg));
}

ojson convert_messages(const ojson& body, const ojson* system) {
  const ojson* messages = field(body, "messages");
  if (!messages) throw bad_request("'messages' is required", "messages");
  if (!messages->is_array() || messages->empty())
    throw bad_request("'messages' must be a non-empty list", "messages");
  ojson out = ojson::array();
  if (system) {
    ojson text = text_content(*system, "system");
    if (!text.empty()) out.push_back({{"role", "system"}, {"content", std::move(text)}});
  }
  ToolNames names;
  for (size_t i = 0; i < messages->size(); ++i)
    convert_message((*messages)[i], "messages[" + std::to_string(i) + "]", names, out);
  return out;
}

// Anthropic's prefill: a final assistant turn (without tool calls) is continued, not answered.
void continue_final_assistant(ojson& chat) {
  const ojson& last = chat["messages"].back();
  if (last["role"] != "assistant" || last.contains("tool_calls")) return;
  chat["continue_final_message"] = true;
  chat["add_generation_prompt"] = false;
}

ojson convert_tools(const ojson& tools) {
  if (!tools.is_array()) throw bad_request("'tools' must be a list", "tools");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = "tools[" + std::to_string(i) + "]";
    const ojson& t = tools[i];
    require_object(t, path);
    reject_unknown(t, {"type", "name", "description", "input_schema", "cache_control"}, path);
    check_cache_control(t, path);
    if (const ojson* type = field(t, "type"); type && *type != "custom")
      throw bad_request("'" + path + ".type' " + type->dump() + " is not supported (server "
                        "tools are Anthropic's own); only custom tools are", path + ".type");
    ojson fn = {{"name", need_string(t, "name", path)}};
    if (field(t, "description")) fn["description"] = need_string(t, "description", path);
    const ojson* schema = field(t, "input_schema");
    if (!schema || !schema->is_object())
      throw bad_request("'" + path + ".input_schema' must be an object", path + ".input_schema");
    fn["parameters"] = *schema;
    if (!schema->contains("type")) fn["parameters"]["type"] = "object";  // as vLLM
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice {type: auto|any|tool|none, name, disable_parallel_tool_use} -> the chat fields.
void convert_tool_choice(const ojson& choice, ojson& chat) {
  require_object(choice, "tool_choice");
  const std::string type = need_string(choice, "type", "tool_choice");
  if (type == "none") {
    reject_unknown(choice, {"type"}, "tool_choice");
    chat["tool_choice"] = "none";
    return;
  }
  if (type == "tool") {
    reject_unknown(choice, {"type", "name", "disable_parallel_tool_use"}, "tool_choice");
    chat["tool_choice"] = {{"type", "function"},
                           {"function", {{"name", need_string(choice, "name", "tool_choice")}}}};
  } else if (type == "auto" || type == "any") {
    reject_unknown(choice, {"type", "disable_parallel_tool_use"}, "tool_choice");
    chat["tool_choice"] = type == "auto" ? "auto" : "required";
  } else {
    throw bad_request("'tool_choice.type' must be 'auto', 'any', 'tool' or 'none', not '" +
                      type + "'", "tool_choice.type");
  }
  if (const ojson* p = field(choice, "disable_parallel_tool_use")) {
    if (!p->is_boolean())
      throw bad_request("'tool_choice.disable_parallel_tool_use' must be a boolean",
                        "tool_choice.disable_parallel_tool_use");
    chat["parallel_tool_calls"] = !p->get<bool>();
  }
}

// thinking {type: enabled|disabled|adaptive} -> the template's enable_thinking (adaptive:
// the template's default), read by the reasoning parser too. A thinking budget has no engine
// behind it here, so it is refused.
void convert_thinking(const ojson& thinking, const ServingContext& ctx, ojson& chat) {
  if (ctx.config.reasoning_parser.empty())
    throw bad_request("'thinking' needs a server started with --reasoning-parser", "thinking");
  require_object(thinking, "thinking");
  reject_unknown(thinking, {"type", "budget_tokens"}, "thinking");
  const std::string type = need_string(thinking, "type", "thinking");
  if (type != "enabled" && type != "disabled" && type != "adaptive")
    throw bad_request("'thinking.type' must be 'enabled', 'disabled' or 'adaptive', not '" +
                      type + "'", "thinking.type");
  if (field(thinking, "budget_tokens"))
    throw bad_request("'thinking.budget_tokens' is not supported by this server (no thinking "
                      "budget; max_tokens bounds the whole reply)", "thinking.budget_tokens");
  if (type != "adaptive") chat["chat_template_kwargs"]["enable_thinking"] = type == "enabled";
}

// The sampling fields of a create request.
void convert_sampling(const ojson& body, ojson& chat) {
  const ojson* max_tokens = field(body, "max_tokens");
  if (!max_tokens) throw bad_request("'max_tokens' is required", "max_tokens");
  if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() <= 0)
    throw bad_request("'max_tokens' must be a positive integer", "max_tokens");
  chat["max_tokens"] = *max_tokens;
  if (const ojson* stop = field(body, "stop_sequences")) {
    if (!stop->is_array())
      throw bad_request("'stop_sequences' must be a list of strings", "stop_sequences");
    for (const ojson& s : *stop)
      if (!s.is_string() || s.get<std::string>().empty())
        throw bad_request("'stop_sequences' must be a list of non-empty strings",
                          "stop_sequences");
    chat["stop"] = *stop;
  }
  for (const char* f : {"temperature", "top_p", "top_k", "stream"})
    if (const ojson* v = field(body, f)) chat[f] = *v;
  if (const ojson* meta = field(body, "metadata")) {
    require_object(*meta, "metadata");
    reject_unknown(*meta, {"user_id"}, "metadata");
    // The end user's id, as OpenAI's `user`: type-checked, no effect on the output.
    if (field(*meta, "user_id")) chat["user"] = need_string(*meta, "user_id", "metadata");
  }
}

// output_config {format: {type: json_schema, schema}, effort} -> chat's response_format (the
// grammar engine enforces the schema) and reasoning_effort (what the template sees, as vLLM).
void convert_output_config(const ojson& config, ojson& chat) {
  require_object(config, "output_config");
  reject_unknown(config, {"format", "effort"}, "output_config");
  if (const ojson* format = field(config, "format")) {
    require_object(*format, "output_config.format");
    reject_unknown(*format, {"type", "schema"}, "output_config.format");
    if (need_string(*format, "type", "output_config.format") != "json_schema")
      throw bad_request("'output_config.format.type' must be 'json_schema'",
                        "output_config.format.type");
    const ojson* schema = field(*format, "schema");
    if (!schema || !schema->is_object())
      throw bad_request("'output_config.format.schema' must be an object",
                        "output_config.format.schema");
    chat["response_format"] = {{"type", "json_schema"},
                               {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  }
  if (field(config, "effort")) {
    const std::string effort = need_string(config, "effort", "output_config");
    for (const char* e : {"low", "medium", "high", "xhigh", "max"})
      if (effort == e) chat["reasoning_effort"] = effort;
    if (!chat.contains("reasoning_effort"))
      throw bad_request("'output_config.effort' must be low, medium, high, xhigh or max",
                        "output_config.effort");
  }
}

}  // namespace

ojson chat_body_from_anthropic(const ojson& body, bool count, const ServingContext& ctx) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  if (count)
    reject_unknown(body, {"model", "messages", "system", "tools", "tool_choice", "thinking",
                          "chat_template_kwargs", "cache_control"}, "");
  else
    reject_unknown(body, {"model", "messages", "max_tokens", "system", "stop_sequences",
                          "temperature", "top_p", "top_k", "stream", "metadata", "tools",
                          "tool_choice", "thinking", "chat_template_kwargs", "cache_control",
                          "output_config"},
                   "");
  check_cache_control(body, "");
  ojson chat = {{"model", need_string(body, "model", "")}};
  chat["messages"] = convert_messages(body, field(body, "system"));
  continue_final_assistant(chat);
  // vLLM's extension: keyword arguments for the chat template.
  if (const ojson* kw = field(body, "chat_template_kwargs")) {
    require_object(*kw, "chat_template_kwargs");
    chat["chat_template_kwargs"] = *kw;
  }
  if (const ojson* tools = field(body, "tools")) chat["tools"] = convert_tools(*tools);
  if (const ojson* choice = field(body, "tool_choice")) {
    if (!chat.contains("tools"))
      throw bad_request("'tool_choice' needs 'tools'", "tool_choice");
    convert_tool_choice(*choice, chat);
  }
  if (const ojson* thinking = field(body, "thinking")) convert_thinking(*thinking, ctx, chat);
  if (count) return chat;
  convert_sampling(body, chat);
  if (const ojson* config = field(body, "output_config")) convert_output_config(*config, chat);
  return chat;
}

}  // namespace vllm::server
