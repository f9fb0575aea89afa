// Jinja tests (`x is defined`, `x is equalto 3`, ...) with jinja2's builtin semantics.
#include <algorithm>
#include <array>

#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_strings.h"

namespace vllm::jinja {
namespace {

constexpr std::array<std::string_view, 39> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false",
    "filter", "float", "ge", "gt", "greaterthan", "in", "integer", "iterable", "le", "lessthan",
    "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string",
    "test", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">="};

bool is_cased_as(const Value& v, bool want_lower) {
  bool any_cased = false;
  for (uint32_t cp : text::decode(v.to_str())) {
    const bool lower = text::to_upper(cp) != cp;
    const bool upper = text::to_lower(cp) != cp;
    if (want_lower ? upper : lower) return false;
    any_cased |= lower || upper;
  }
  return any_cased;
}

bool same_object(const Value& a, const Value& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::List: return &a.list_data() == &b.list_data();
    case Value::Type::Dict: return &a.dict() == &b.dict();
    case Value::Type::Float: return false;  // CPython float objects are rarely shared
    default: return py_equal(a, b);
  }
}

}  // namespace

bool is_known_test(std::string_view name) {
  for (auto t : kTests) {
    if (t == name) return true;
  }
  return false;
}

bool apply_test(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  (void)ev;
  auto arg = [&](const char* param) { return bind(name, args, {{param, std::nullopt}})[0]; };
  static constexpr std::string_view kUnary[] = {"defined", "undefined", "none", "boolean", "true", "false",
      "integer", "float", "number", "string", "mapping", "iterable", "sequence", "escaped", "lower", "upper",
      "odd", "even"};
  const size_t given = 1 + args.positional.size() + args.keyword.size();
  if (given > 1 && std::find(std::begin(kUnary), std::end(kUnary), name) != std::end(kUnary)) {
    raise("TypeError", "test_" + name + "() takes 1 positional argument but " + std::to_string(given) + " were given");
  }
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_plain_list() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return v.is_markup();
  if (name == "lower") return is_cased_as(v, true);
  if (name == "upper") return is_cased_as(v, false);
  if (name == "odd" || name == "even") {
    const Value m = binary_op("%", v, Value(2));
    return py_equal(m, Value(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") return py_equal(binary_op("%", v, arg("num")), Value(0));
  if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, arg("other"));
  if (name == "ne" || name == "!=") return !py_equal(v, arg("other"));
  if (name == "lt" || name == "lessthan" || name == "<") return py_compare(v, arg("other"), "<");
  if (name == "le" || name == "<=") return py_compare(v, arg("other"), "<=");
  if (name == "gt" || name == "greaterthan" || name == ">") return py_compare(v, arg("other"), ">");
  if (name == "ge" || name == ">=") return py_compare(v, arg("other"), ">=");
  if (name == "in") return contains(arg("seq"), v);
  if (name == "sameas") return same_object(v, arg("other"));
  if (name == "filter") return v.is_string() && is_known_filter(v.str());
  if (name == "test") return v.is_string() && is_known_test(v.str());
  raise("TemplateRuntimeError", "No test named " + py_str_repr(name) + ".");
}

}  // namespace vllm::jinja
