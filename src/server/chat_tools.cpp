// tool_choice, parallel_tool_calls, include_reasoning and the server's --tool-call-parser /
// --reasoning-parser -> ChatOutputOptions, with vLLM's checks and messages. tool_choice
// "required" and named functions are enforced by a JSON-schema grammar built as vLLM builds it.
#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/protocol_detail.h"
#include "server/serving.h"
#include "structured/compiler.h"

namespace vllm::server::detail {
namespace {

using ToolMode = ChatOutputOptions::ToolMode;

const char* kNamedUsage =
    "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";

// A tool's parameters, or the empty object a tool without them is called with.
ojson parameters_of(const ojson& tool) {
  const ojson& fn = tool["function"];
  auto it = fn.find("parameters");
  if (it == fn.end() || it->is_null() || it->empty())
    return {{"type", "object"}, {"properties", ojson::object()}};
  return *it;
}

// vLLM's schema for "required": a non-empty list of {"name": <one tool>, "parameters": <its
// schema>} objects, the tools' $defs lifted to the top.
ojson required_schema(const ojson& tools) {
  ojson any = ojson::array();
  ojson defs = ojson::object();
  for (const ojson& tool : tools) {
    ojson params = parameters_of(tool);
    if (auto d = params.find("$defs"); d != params.end() && d->is_object()) {
      for (const auto& [k, v] : d->items()) {
        if (defs.contains(k) && defs[k] != v)
          throw bad_request("Tool definition '" + k + "' has multiple schemas, which is not "
                            "supported.", "tools");
        defs[k] = v;
      }
      params.erase("$defs");
    }
    any.push_back({{"type", "object"},
                   {"properties",
                    {{"name", {{"type", "string"}, {"enum", {tool["function"]["name"]}}}},
                     {"parameters", params}}},
                   {"required", {"name", "parameters"}}});
  }
  // vLLM writes {"type": "object", "anyOf": [...]}; the type moved into each branch means
  // the same and is the form our schema compiler takes.
  ojson schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any}}}};
  if (!defs.empty()) schema["$defs"] = defs;
  return schema;
}

bool has_other_constraint(const SamplingParams& params) { return params.grammar != nullptr; }

std::shared_ptr<const structured::CompiledGrammar> compile_tool_grammar(
    const ojson& schema, const ServingContext& ctx) {
  if (!ctx.grammars) throw bad_request("structured output is not available on this server",
                                       "tool_choice");
  structured::OutputConstraint c;
  c.kind = structured::OutputConstraint::Kind::kJsonSchema;
  c.text = schema.dump();
  try {
    return ctx.grammars->get(c);
  } catch (const Error& e) {
    throw bad_request(std::string("cannot compile the tool's parameters schema: ") + e.what(),
                      "tools");
  }
}

}  // namespace

std::shared_ptr<const ChatOutputOptions> chat_output_options(const ojson& body,
                                                             const ServingContext& ctx,
                                                             SamplingParams& params) {
  auto o = std::make_shared<ChatOutputOptions>();
  o->include_reasoning = get_bool(body, "include_reasoning").value_or(true);
  o->parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
  const ojson* tools = nullptr;
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) tools = &*t;
  // As vLLM: an absent tool_choice is "auto" with tools, an explicit null is "none".
  ojson choice = nullptr;
  if (auto c = body.find("tool_choice"); c != body.end()) choice = *c;
  else if (tools && tools->is_array() && !tools->empty()) choice = "auto";
  if (!choice.is_null() && choice != "none") {
    if (!tools) throw bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice");
    if (!(choice == "auto" || choice == "required" || choice.is_object()))
      throw bad_request("Invalid value for `tool_choice`: " + choice.dump() +
                            "! Only named tools, \"none\", \"auto\" or \"required\" are supported.",
                        "tool_choice");
    if (choice == "required" && tools->is_array() && tools->empty()) choice = "none";
  }
  if (choice.is_object()) {
    auto type = choice.find("type");
    if (type != choice.end() && *type != "function")
      throw bad_request("Invalid value for `tool_choice.type`: " + type->dump() + "! " +
                            kNamedUsage, "tool_choice");
    auto fn = choice.find("function");
    if (fn == choice.end() || !fn->is_object())
      throw bad_request("Invalid value for `function`: `" +
                            (fn == choice.end() ? std::string("None") : fn->dump()) +
                            "` in `tool_choice`! " + kNamedUsage, "tool_choice");
    if (!fn->contains("name"))
      throw bad_request(std::string("Expected field `name` in `function` in `tool_choice`! ") +
                            kNamedUsage, "tool_choice");
    if (!(*fn)["name"].is_string() || (*fn)["name"].get<std::string>().empty())
      throw bad_request("Invalid `name` in `function`: `" + (*fn)["name"].dump() +
                            "` in `tool_choice`! " + kNamedUsage, "tool_choice");
    o->named_function = (*fn)["name"].get<std::string>();
  }
  // The tool list itself is checked by the template render (validate_tools); checked here
  // too, since the grammar reads it first.
  if (tools && !choice.is_null() && choice != "none" && choice != "auto") {
    if (!tools->is_array()) throw bad_request("'tools' must be a list", "tools");
    for (const ojson& t : *tools)
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        throw bad_request("each tool needs 'function': {'name': str, ...}", "tools");
  }
  if (choice.is_object()) {
    const ojson* tool = nullptr;
    for (const ojson& t : *tools)
      if (t["function"]["name"] == o->named_function) tool = &t;
    if (!tool)
      throw bad_request("The tool specified in `tool_choice` does not match any of the "
                        "specified `tools`", "tool_choice");
    o->mode = ToolMode::kNamed;
    if (has_other_constraint(params))
      throw bad_request("a named tool_choice is enforced with a JSON schema and cannot be "
                        "combined with another structured output", "tool_choice");
    params.grammar = compile_tool_grammar(parameters_of(*tool), ctx);
  } else if (choice == "required") {
    o->mode = ToolMode::kRequired;
    o->tool_parser = make_required_tool_parser();
    if (has_other_constraint(params))
      throw bad_request("tool_choice 'required' is enforced with a JSON schema and cannot be "
                        "combined with another structured output", "tool_choice");
    params.grammar = compile_tool_grammar(required_schema(*tools), ctx);
  } else if (choice == "auto") {
    if (!ctx.config.enable_auto_tool_choice || ctx.config.tool_call_parser.empty())
      throw bad_request("\"auto\" tool choice requires --enable-auto-tool-choice and "
                        "--tool-call-parser to be set", "tool_choice");
    o->mode = ToolMode::kAuto;
    o->tool_parser = make_tool_parser(ctx.config.tool_call_parser, *tools);
    o->mistral_ids = o->tool_parser->mistral_ids();
    if (o->tool_parser->keeps_special_tokens()) params.skip_special_tokens = false;
  }
  if (!ctx.config.reasoning_parser.empty()) {
    bool thinking = true;
    if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && kw->is_object())
      if (auto e = kw->find("enable_thinking"); e != kw->end() && e->is_boolean())
        thinking = e->get<bool>();
    o->reasoning = ReasoningParser::make(ctx.config.reasoning_parser, thinking);
    // As vLLM: a grammar constrains only what follows the reasoning.
    if (params.grammar && !o->reasoning->disabled() &&
        !ctx.config.structured_enable_in_reasoning) {
      params.grammar_after = o->reasoning->end_tag();
      if (auto id = ctx.tokenizer->token_to_id(params.grammar_after))
        params.grammar_after_token = *id;
    }
  }
  return o;
}

}  // namespace vllm::server::detail
