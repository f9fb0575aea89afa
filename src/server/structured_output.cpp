// Structured-output request fields -> a compiled grammar, on the HTTP handler's thread (the
// engine thread never compiles): response_format (json_object, json_schema), vLLM's
// structured_outputs {json, regex, choice, grammar, json_object, structural_tag},
// response_format structural_tag and the older guided_json, structural_tag (top level),
// guided_regex, guided_choice, guided_grammar. At most one constraint per request.
#include "server/api_error.h"
#include "server/protocol_detail.h"
#include "server/serving.h"
#include "structured/compiler.h"
#include "util/check.h"

namespace vllm::server::detail {

using structured::OutputConstraint;
using Kind = OutputConstraint::Kind;

namespace {

bool present(const ojson& o, const char* f) {
  auto it = o.find(f);
  return it != o.end() && !it->is_null();
}

// A schema given as an object or as JSON text; key order is kept (it fixes property order).
std::string schema_text(const ojson& v, const std::string& field) {
  if (v.is_string()) {
    try {
      return ojson::parse(v.get<std::string>()).dump();
    } catch (const ojson::exception&) {
      throw bad_request("'" + field + "' is not valid JSON", field);
    }
  }
  if (v.is_object() || v.is_boolean()) return v.dump();
  throw bad_request("'" + field + "' must be a JSON schema (an object)", field);
}

// A structural tag given as JSON text (structured_outputs.structural_tag, as vLLM takes it) or
// as an object; its form is checked when it compiles.
std::string tag_text(const ojson& v, const std::string& field) {
  if (v.is_string()) {
    try {
      return ojson::parse(v.get<std::string>()).dump();
    } catch (const ojson::exception&) {
      throw bad_request("'" + field + "' is not valid JSON", field);
    }
  }
  if (v.is_object()) return v.dump();
  throw bad_request("'" + field + "' must be a structural tag (JSON text or an object)", field);
}

std::string string_field(const ojson& v, const std::string& field) {
  if (!v.is_string()) throw bad_request("'" + field + "' must be a string", field);
  return v.get<std::string>();
}

std::vector<std::string> choices(const ojson& v, const std::string& field) {
  if (!v.is_array() || v.empty())
    throw bad_request("'" + field + "' must be a non-empty list of strings", field);
  std::vector<std::string> out;
  for (const auto& c : v) {
    if (!c.is_string()) throw bad_request("'" + field + "' must be a non-empty list of strings", field);
    out.push_back(c.get<std::string>());
  }
  return out;
}

struct Found {
  OutputConstraint c;
  std::string field;
};

void add(std::vector<Found>& found, Kind kind, std::string field, std::string text,
         std::vector<std::string> list = {}) {
  found.push_back({OutputConstraint{kind, std::move(text), std::move(list), {}}, std::move(field)});
}

}  // namespace

std::shared_ptr<const structured::CompiledGrammar> output_grammar(const ojson& body,
                                                                  const ServingContext& ctx) {
  std::vector<Found> found;
  structured::JsonOptions options;  // structured_outputs' options and guided_whitespace_pattern
  if (present(body, "guided_whitespace_pattern"))
    options.whitespace_pattern =
        string_field(body["guided_whitespace_pattern"], "guided_whitespace_pattern");
  if (present(body, "response_format")) {
    const ojson& rf = body["response_format"];
    const std::string type = rf["type"].get<std::string>();  // checked by reject_unsupported
    if (type == "json_object") {
      add(found, Kind::kJsonObject, "response_format", "");
    } else if (type == "json_schema") {
      if (!present(rf, "json_schema") || !rf["json_schema"].is_object() ||
          !present(rf["json_schema"], "schema"))
        throw bad_request("response_format json_schema needs 'json_schema': {'name', 'schema'}",
                          "response_format");
      add(found, Kind::kJsonSchema, "response_format",
          schema_text(rf["json_schema"]["schema"], "response_format.json_schema.schema"));
    } else if (type == "structural_tag") {
      add(found, Kind::kStructuralTag, "response_format", tag_text(rf, "response_format"));
    }
  }
  if (present(body, "structured_outputs")) {
    const ojson& so = body["structured_outputs"];
    if (!so.is_object()) throw bad_request("'structured_outputs' must be an object", "structured_outputs");
    for (const auto& [k, v] : so.items()) {
      if (v.is_null()) continue;
      const std::string f = "structured_outputs." + k;
      if (k == "json") add(found, Kind::kJsonSchema, f, schema_text(v, f));
      else if (k == "regex") add(found, Kind::kRegex, f, string_field(v, f));
      else if (k == "choice") add(found, Kind::kChoice, f, "", choices(v, f));
      else if (k == "grammar") add(found, Kind::kGrammar, f, string_field(v, f));
      else if (k == "json_object") {
        if (v.is_boolean() && v.get<bool>()) add(found, Kind::kJsonObject, f, "");
      } else if (k == "disable_any_whitespace" || k == "disable_additional_properties" ||
                 k == "disable_fallback") {
        if (!v.is_boolean()) throw bad_request("'" + f + "' must be a boolean", f);
        if (k == "disable_any_whitespace") options.any_whitespace = !v.get<bool>();
        if (k == "disable_additional_properties") options.additional_properties = !v.get<bool>();
      } else if (k == "whitespace_pattern") {
        options.whitespace_pattern = string_field(v, f);
      } else if (k == "structural_tag") {
        add(found, Kind::kStructuralTag, f, tag_text(v, f));
      } else {
        throw bad_request("'" + f + "' is not a structured_outputs field", f);
      }
    }
  }
  if (present(body, "guided_json"))
    add(found, Kind::kJsonSchema, "guided_json", schema_text(body["guided_json"], "guided_json"));
  if (present(body, "guided_regex"))
    add(found, Kind::kRegex, "guided_regex", string_field(body["guided_regex"], "guided_regex"));
  if (present(body, "guided_choice"))
    add(found, Kind::kChoice, "guided_choice", "", choices(body["guided_choice"], "guided_choice"));
  if (present(body, "guided_grammar"))
    add(found, Kind::kGrammar, "guided_grammar",
        string_field(body["guided_grammar"], "guided_grammar"));
  if (present(body, "structural_tag"))
    add(found, Kind::kStructuralTag, "structural_tag",
        tag_text(body["structural_tag"], "structural_tag"));
  if (found.empty()) return nullptr;
  if (found.size() > 1)
    throw bad_request("only one kind of structured output per request: got '" + found[0].field +
                          "' and '" + found[1].field + "'",
                      found[1].field);
  if (!ctx.grammars) throw bad_request("structured output is not available on this server");
  found[0].c.json = options;
  try {
    return ctx.grammars->get(found[0].c);
  } catch (const Error& e) {
    throw bad_request(std::string("cannot compile '") + found[0].field + "': " + e.what(),
                      found[0].field);
  }
}

}  // namespace vllm::server::detail
