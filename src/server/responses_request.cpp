// Responses API request bodies -> the chat request they mean (see responses_api.h): input items
// become chat messages, flattened function tools become chat tools, text.format becomes
// response_format; anything this server cannot honour is a 400 naming the field.
#include "server/api_error.h"
#include "server/responses_api.h"
#include "server/serving.h"

namespace vllm::server {
namespace {

// The fields a create body may carry; the last ones are vLLM's sampling extensions, passed to
// the chat request unchanged.
constexpr const char* kHandled[] = {
    "model", "input", "instructions", "previous_response_id", "store", "max_output_tokens",
    "temperature", "top_p", "stream", "metadata", "user", "parallel_tool_calls", "tools",
    "tool_choice", "text", "reasoning", "background", "include", "truncation",
    "safety_identifier", "service_tier", "top_logprobs", "max_tool_calls"};
constexpr const char* kPassThrough[] = {"top_k", "logit_bias", "skip_special_tokens",
                                        "priority"};

bool present(const ojson& o, const char* f) {
  auto it = o.find(f);
  return it != o.end() && !it->is_null();
}

// The request field a nested place is in: "input[2].content" -> "input".
std::string field_of(const std::string& where) {
  return where.substr(0, where.find_first_of("[."));
}

const std::string& string_at(const ojson& o, const char* key, const std::string& where) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string())
    throw bad_request("'" + where + "." + key + "' must be a string", field_of(where));
  return it->get_ref<const std::string&>();
}

void check_known_fields(const ojson& body) {
  for (const auto& [k, v] : body.items()) {
    bool known = false;
    for (const char* f : kHandled) known = known || k == f;
    for (const char* f : kPassThrough) known = known || k == f;
    if (!known) throw bad_request("'" + k + "' is not supported by this server's Responses API", k);
  }
}

// Settings accepted only at the value that means "nothing to do".
void check_unsupported_values(const ojson& body) {
  if (get_bool(body, "background").value_or(false))
    throw bad_request("background mode is not supported by this server", "background");
  if (present(body, "include") && !(body["include"].is_array() && body["include"].empty()))
    throw bad_request("'include' values are not supported by this server (got " +
                      body["include"].dump() + ")", "include");
  if (auto t = get_string(body, "truncation"); t && *t != "disabled")
    throw bad_request("'truncation' must be 'disabled' (prompts that do not fit are a 400)",
                      "truncation");
  if (auto t = get_string(body, "service_tier"); t && *t != "auto")
    throw bad_request("'service_tier' must be 'auto' on this server", "service_tier");
  if (get_int(body, "top_logprobs").value_or(0) != 0)
    throw bad_request("'top_logprobs' is not supported by this server (no output logprobs)",
                      "top_logprobs");
  if (present(body, "max_tool_calls"))
    throw bad_request("'max_tool_calls' is not supported by this server", "max_tool_calls");
  for (const char* f : {"user", "safety_identifier", "instructions", "previous_response_id"})
    get_string(body, f);  // type checks
  if (present(body, "metadata")) {
    const ojson& m = body["metadata"];
    if (!m.is_object() || m.size() > 16)
      throw bad_request("'metadata' must be an object of at most 16 string pairs", "metadata");
    for (const auto& [k, v] : m.items())
      if (k.size() > 64 || !v.is_string() || v.get_ref<const std::string&>().size() > 512)
        throw bad_request("'metadata' keys must be strings of at most 64 characters and "
                          "values strings of at most 512", "metadata");
  }
  if (auto n = get_int(body, "max_output_tokens"); n && *n < 1)
    throw bad_request("'max_output_tokens' must be at least 1", "max_output_tokens");
}

// A message item's content: a string, or input_text / output_text parts as chat text parts.
ojson message_content(const ojson& content, const std::string& where) {
  if (content.is_string()) return content;
  if (!content.is_array())
    throw bad_request("'" + where + "' must be a string or a list of content parts", "input");
  ojson parts = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string w = where + "[" + std::to_string(k) + "]";
    const ojson& part = content[k];
    if (!part.is_object()) throw bad_request("'" + w + "' must be an object", "input");
    const std::string type = present(part, "type") && part["type"].is_string()
                                 ? part["type"].get<std::string>() : "";
    if (type != "input_text" && type != "output_text")
      throw bad_request("'" + w + ".type' " + (type.empty() ? "is missing" : "'" + type + "'") +
                        ": only input_text and output_text parts are supported", "input");
    parts.push_back({{"type", "text"}, {"text", string_at(part, "text", w)}});
  }
  return parts;
}

void append_function_call(ojson& messages, const ojson& item, const std::string& where) {
  ojson call = {{"id", string_at(item, "call_id", where)},
                {"type", "function"},
                {"function", {{"name", string_at(item, "name", where)},
                              {"arguments", string_at(item, "arguments", where)}}}};
  // Consecutive calls are one assistant turn, as chat completions write them.
  if (!messages.empty() && messages.back()["role"] == "assistant" &&
      messages.back().contains("tool_calls")) {
    messages.back()["tool_calls"].push_back(std::move(call));
    return;
  }
  // Content "" as vLLM gives templates for an assistant turn without text.
  messages.push_back({{"role", "assistant"},
                      {"content", ""},
                      {"tool_calls", ojson::array({std::move(call)})}});
}

void append_input_item(ojson& messages, const ojson& item, size_t i) {
  const std::string where = "input[" + std::to_string(i) + "]";
  if (!item.is_object()) throw bad_request("'" + where + "' must be an object", "input");
  std::string type = "message";
  if (present(item, "type")) type = string_at(item, "type", where);
  if (type == "message") {
    const std::string& role = string_at(item, "role", where);
    if (role != "user" && role != "system" && role != "developer" && role != "assistant")
      throw bad_request("'" + where + ".role' must be user, system, developer or assistant",
                        "input");
    if (!item.contains("content"))
      throw bad_request("'" + where + ".content' is required", "input");
    messages.push_back(
        {{"role", role}, {"content", message_content(item["content"], where + ".content")}});
  } else if (type == "function_call") {
    append_function_call(messages, item, where);
  } else if (type == "function_call_output") {
    ojson output = present(item, "output") ? item["output"] : ojson();
    if (!output.is_string()) output = message_content(output, where + ".output");
    messages.push_back({{"role", "tool"},
                        {"tool_call_id", string_at(item, "call_id", where)},
                        {"content", std::move(output)}});
  } else if (type != "reasoning") {  // reasoning is not replayed to the template, as vLLM
    throw bad_request("'" + where + ".type' '" + type + "' is not supported (message, "
                      "function_call, function_call_output and reasoning items are)", "input");
  }
}

ojson input_messages(const ojson& body) {
  if (!present(body, "input")) throw bad_request("'input' is required", "input");
  const ojson& input = body["input"];
  if (input.is_string()) return ojson::array({{{"role", "user"}, {"content", input}}});
  if (!input.is_array() || input.empty())
    throw bad_request("'input' must be a string or a non-empty list of items", "input");
  ojson messages = ojson::array();
  for (size_t i = 0; i < input.size(); ++i) append_input_item(messages, input[i], i);
  return messages;
}

// Flattened function tools {type, name, description, parameters, strict} -> chat tools.
ojson chat_tools(const ojson& tools) {
  if (!tools.is_array()) throw bad_request("'tools' must be a list", "tools");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const ojson& t = tools[i];
    if (!t.is_object()) throw bad_request("'" + where + "' must be an object", "tools");
    const std::string& type = string_at(t, "type", where);
    if (type != "function")
      throw bad_request("'" + where + ".type' '" + type + "': only function tools are "
                        "supported (no built-in tools on this server)", "tools");
    ojson fn = {{"name", string_at(t, "name", where)}};
    for (const auto& [k, v] : t.items()) {
      if (k == "type" || k == "name") continue;
      if (k != "description" && k != "parameters" && k != "strict")
        throw bad_request("'" + where + "." + k + "' is not supported", "tools");
      if (!v.is_null()) fn[k] = v;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

ojson chat_tool_choice(const ojson& choice) {
  if (choice.is_string()) return choice;
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name"))
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  throw bad_request("'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                    "\"name\": ...} (no built-in or allowed_tools choices on this server)",
                    "tool_choice");
}

// text.format -> chat response_format (nothing for plain text).
void apply_text_format(const ojson& body, ojson& chat) {
  if (!present(body, "text")) return;
  const ojson& text = body["text"];
  if (!text.is_object()) throw bad_request("'text' must be an object", "text");
  for (const auto& [k, v] : text.items())
    if (k != "format" && !v.is_null())
      throw bad_request("'text." + k + "' is not supported by this server", "text");
  if (!present(text, "format")) return;
  const ojson& f = text["format"];
  const std::string type = f.is_object() ? f.value("type", "") : "";
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    if (!present(f, "schema")) throw bad_request("'text.format.schema' is required", "text");
    ojson js = {{"name", f.value("name", "response")}, {"schema", f["schema"]}};
    if (present(f, "strict")) js["strict"] = f["strict"];
    if (present(f, "description")) js["description"] = f["description"];
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  } else if (type != "text") {
    throw bad_request("'text.format.type' must be text, json_object or json_schema", "text");
  }
}

void apply_reasoning(const ojson& body, ojson& chat) {
  if (!present(body, "reasoning")) return;
  const ojson& r = body["reasoning"];
  if (!r.is_object()) throw bad_request("'reasoning' must be an object", "reasoning");
  for (const auto& [k, v] : r.items()) {
    if (v.is_null()) continue;
    if (k != "effort")
      throw bad_request("'reasoning." + k + "' is not supported by this server", "reasoning");
    if (!v.is_string()) throw bad_request("'reasoning.effort' must be a string", "reasoning");
    chat["reasoning_effort"] = v;  // seen by the chat template, as chat's reasoning_effort
  }
}

// The chat request `chat` means, its errors naming the Responses API's fields.
ChatRequest parse_chat(const ojson& chat, const ServingContext& ctx) {
  try {
    return parse_chat_request(chat, ctx);
  } catch (const ApiError& e) {
    std::optional<std::string> param = e.param();
    std::string message = e.what();
    if (param == "messages") param = "input";
    if (param == "response_format") {
      param = "text";
      if (auto at = message.find("'response_format'"); at != std::string::npos)
        message.replace(at, 17, "'text.format'");
    }
    throw ApiError(e.status(), message, param);
  }
}

// The conversation before this turn's input: the stored turn `previous_response_id` ended.
ojson previous_conversation(const ojson& body, const ServingContext& ctx) {
  auto prev = get_string(body, "previous_response_id");
  if (!prev) return ojson::array();
  std::optional<StoredResponse> stored = ctx.responses->get(*prev);
  if (!stored) throw response_not_found(*prev, "previous_response_id");
  return stored->messages;
}

}  // namespace

ApiError response_not_found(const std::string& id, const char* param) {
  return ApiError(404, "Response with id '" + id + "' not found. Responses created with "
                  "store=false are not kept, and the oldest are evicted past the server's "
                  "--responses-store-max-count / --responses-store-max-bytes.", param);
}

ResponsesRequest parse_responses_request(const ojson& body, const ServingContext& ctx) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  check_known_fields(body);
  check_unsupported_values(body);
  ResponsesRequest r;
  r.body = body;
  r.store = get_bool(body, "store").value_or(true);
  r.stream = get_bool(body, "stream").value_or(false);
  r.conversation = previous_conversation(body, ctx);
  for (auto& m : input_messages(body)) r.conversation.push_back(std::move(m));
  ojson chat = ojson::object();
  if (present(body, "model")) chat["model"] = body["model"];
  ojson messages = ojson::array();
  if (auto instructions = get_string(body, "instructions"))
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  for (const ojson& m : r.conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  for (const char* f : {"temperature", "top_p", "parallel_tool_calls"})
    if (present(body, f)) chat[f] = body[f];
  for (const char* f : kPassThrough)
    if (present(body, f)) chat[f] = body[f];
  if (present(body, "tools")) chat["tools"] = chat_tools(body["tools"]);
  if (present(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(body["tool_choice"]);
  apply_text_format(body, chat);
  apply_reasoning(body, chat);
  r.chat = parse_chat(chat, ctx);
  // As vLLM: max_output_tokens is capped by the room the prompt leaves, not refused.
  if (auto max = get_int(body, "max_output_tokens"); max && *max < r.chat.prompt.max_tokens)
    r.chat.prompt.max_tokens = r.chat.params.max_tokens = static_cast<int>(*max);
  return r;
}

ojson response_skeleton(const ResponsesRequest& r, const std::string& id, int64_t created_at,
                        const char* status) {
  const ojson& b = r.body;
  auto echo = [&](const char* f, ojson fallback = nullptr) {
    return present(b, f) ? b[f] : fallback;
  };
  ojson tools = ojson::array();
  if (present(b, "tools"))
    for (const ojson& t : b["tools"]) {
      ojson e = {{"type", "function"}, {"name", t["name"]}};
      for (const char* k : {"description", "parameters", "strict"})
        e[k] = t.contains(k) ? t[k] : ojson(nullptr);
      tools.push_back(std::move(e));
    }
  ojson text = {{"format", {{"type", "text"}}}};
  if (present(b, "text") && present(b["text"], "format")) text["format"] = b["text"]["format"];
  ojson reasoning = nullptr;
  if (present(b, "reasoning"))
    reasoning = {{"effort", echo("reasoning").value("effort", ojson(nullptr))},
                 {"summary", nullptr}};
  return {{"id", id},
          {"object", "response"},
          {"created_at", created_at},
          {"status", status},
          {"background", false},
          {"error", nullptr},
          {"incomplete_details", nullptr},
          {"instructions", echo("instructions")},
          {"max_output_tokens", echo("max_output_tokens")},
          {"metadata", echo("metadata", ojson::object())},
          {"model", r.chat.model},
          {"output", ojson::array()},
          {"parallel_tool_calls", r.chat.output->parallel_tool_calls},
          {"previous_response_id", echo("previous_response_id")},
          {"reasoning", std::move(reasoning)},
          {"store", r.store},
          {"temperature", echo("temperature", 1.0)},
          {"text", std::move(text)},
          {"tool_choice", echo("tool_choice", "auto")},
          {"tools", std::move(tools)},
          {"top_p", echo("top_p", 1.0)},
          {"truncation", "disabled"},
          {"usage", nullptr},
          {"user", echo("user")},
          {"safety_identifier", echo("safety_identifier")},
          {"service_tier", "auto"}};
}

}  // namespace vllm::server
