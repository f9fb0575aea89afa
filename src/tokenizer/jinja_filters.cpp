// Jinja filters with jinja2's builtin semantics, plus HF's tojson override
// (json.dumps with ensure_ascii=False, optional indent/separators/sort_keys).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_strings.h"

namespace vllm::jinja {
namespace {

using FilterFn = Value (*)(Evaluator&, const Value&, CallArgs&);

Value str_of(const Value& v) { return v.is_string() ? v : Value(v.to_str()); }  // soft_str

Value ignore_case(const Value& v) { return v.is_string() ? Value(text::lower(v.str())) : v; }

// jinja2's make_attrgetter: "a.b.0" walks items (then attributes) one dotted part at a time.
Value attr_path(const Value& item, const Value& attribute) {
  if (attribute.is_none()) return item;
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  for (const auto& part : text::split(attribute.str(), std::string("."), -1, false)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    // strtoll saturates instead of throwing; a huge index is simply out of range.
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10))) : Value(part));
  }
  return v;
}

Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  if (attribute.is_string() && attribute.str().find(',') != std::string::npos) {
    std::vector<Value> keys;
    for (const auto& part : text::split(attribute.str(), std::string(","), -1, false)) {
      Value k = attr_path(item, Value(part));
      keys.push_back(case_sensitive ? k : ignore_case(k));
    }
    return Value(std::move(keys), true);
  }
  Value k = attr_path(item, attribute);
  return case_sensitive ? k : ignore_case(k);
}

Value f_tojson(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("tojson", a, {{"ensure_ascii", Value(false)}, {"indent", Value(nullptr)},
                              {"separators", Value(nullptr)}, {"sort_keys", Value(false)}});
  JsonOptions o;
  o.ensure_ascii = p[0].truthy();
  if (p[1].is_string()) o.indent = p[1].str();
  else if (p[1].is_int()) {
    const auto width = static_cast<size_t>(std::max<int64_t>(0, p[1].as_int()));
    reserve_bytes(width);
    o.indent = std::string(width, ' ');
  }
  else if (!p[1].is_none()) raise("TypeError", "indent must be an int or a string");
  if (o.indent) o.item_separator = ",";
  if (!p[2].is_none()) {
    const auto seps = iterate(p[2]);
    if (seps.size() != 2) raise("ValueError", "separators must be an (item, key) pair");
    o.item_separator = seps[0].to_str();
    o.key_separator = seps[1].to_str();
  }
  o.sort_keys = p[3].truthy();
  return Value(to_json(v, o));
}

Value f_trim(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("trim", a, {{"chars", Value(nullptr)}});
  std::optional<std::string> chars;
  if (!p[0].is_none()) chars = p[0].to_str();
  return Value(text::strip(v.to_str(), chars, true, true), v.is_markup());
}

Value f_default(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("default", a, {{"default_value", Value("")}, {"boolean", Value(false)}});
  if (v.is_undefined() || (p[1].truthy() && !v.truthy())) return p[0];
  return v;
}

Value f_length(Evaluator&, const Value& v, CallArgs& a) {
  bind("length", a, {});
  return Value(static_cast<int64_t>(py_len(v)));
}

Value f_join(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("join", a, {{"d", Value("")}, {"attribute", Value(nullptr)}});
  const std::string sep = p[0].to_str();
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) append_bounded(out, sep);
    first = false;
    append_bounded(out, attr_path(item, p[1]).to_str());
  }
  return Value(std::move(out));
}

Value f_items(Evaluator&, const Value& v, CallArgs& a) {
  bind("items", a, {});
  if (v.is_undefined()) return Value(std::vector<Value>{}, SeqKind::Generator);
  if (!v.is_dict()) raise("TypeError", "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().items()) out.emplace_back(std::vector<Value>{k, val}, true);
  return Value(std::move(out), SeqKind::Generator);
}

Value f_map(Evaluator& ev, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (a.positional.empty()) {
    auto p = bind("map", a, {{"attribute", std::nullopt}, {"default", Value(nullptr)}});
    if (!v.truthy()) return Value(std::move(out), SeqKind::Generator);
    for (const auto& item : iterate(v)) {
      Value r = attr_path(item, p[0]);
      out.push_back(r.is_undefined() && !p[1].is_none() ? p[1] : r);
    }
    return Value(std::move(out), SeqKind::Generator);
  }
  const std::string name = a.positional[0].to_str();
  if (!is_known_filter(name)) raise("TemplateRuntimeError", "No filter named " + py_str_repr(name) + ".");
  if (!v.truthy()) return Value(std::move(out), SeqKind::Generator);
  for (const auto& item : iterate(v)) {
    CallArgs rest{{a.positional.begin() + 1, a.positional.end()}, a.keyword};
    out.push_back(apply_filter(ev, name, item, rest));
  }
  return Value(std::move(out), SeqKind::Generator);
}

Value select_impl(Evaluator& ev, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t off = 0;
  Value attribute(nullptr);
  if (by_attr) {
    if (a.positional.empty()) raise("FilterArgumentError", "Missing parameter for attribute name");
    attribute = a.positional[0];
    off = 1;
  }
  std::optional<std::string> test;
  if (a.positional.size() > off) test = a.positional[off].to_str();
  if (test && !is_known_test(*test)) raise("TemplateRuntimeError", "No test named " + py_str_repr(*test) + ".");
  std::vector<Value> out;
  if (!v.truthy()) return Value(std::move(out), SeqKind::Generator);
  for (const auto& item : iterate(v)) {
    const Value subject = by_attr ? attr_path(item, attribute) : item;
    bool r;
    if (test) {
      CallArgs rest{{a.positional.begin() + static_cast<long>(off) + 1, a.positional.end()}, a.keyword};
      r = apply_test(ev, *test, subject, rest);
    } else {
      r = subject.truthy();
    }
    if (r == keep) out.push_back(item);
  }
  return Value(std::move(out), SeqKind::Generator);
}

Value f_select(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, false, true); }
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, false, false); }
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, true, true); }
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) { return select_impl(ev, v, a, true, false); }

Value f_upper(Evaluator&, const Value& v, CallArgs& a) { bind("upper", a, {}); return Value(text::upper(v.to_str())); }
Value f_lower(Evaluator&, const Value& v, CallArgs& a) { bind("lower", a, {}); return Value(text::lower(v.to_str())); }
Value f_capitalize(Evaluator&, const Value& v, CallArgs& a) { bind("capitalize", a, {}); return Value(text::capitalize(v.to_str())); }

Value f_title(Evaluator&, const Value& v, CallArgs& a) {
  bind("title", a, {});
  // jinja2 splits on runs of [-\s({[<] and capitalises every chunk.
  auto is_sep = [](uint32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c); };
  const auto cps = text::decode(v.to_str());
  std::string out;
  for (size_t i = 0; i < cps.size();) {
    size_t j = i;
    const bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    for (size_t k = i; k < j; ++k) text::append_utf8(out, k == i ? text::to_upper(cps[k]) : text::to_lower(cps[k]));
    i = j;
  }
  return Value(std::move(out));
}

Value f_replace(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("replace", a, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value(nullptr)}});
  const int64_t count = p[2].is_none() ? -1 : p[2].as_int();
  return Value(text::replace(v.to_str(), p[0].to_str(), p[1].to_str(), count), v.is_markup());
}

Value f_first(Evaluator&, const Value& v, CallArgs& a) {
  bind("first", a, {});
  if (v.is_iterator()) {  // next(iter(x)): takes one item only
    const Sequence& seq = v.list_data();
    if (seq.pending_error) raise(seq.pending_error->kind.c_str(), seq.pending_error->message);
    if (seq.consumed < seq.items.size()) return seq.items[seq.consumed++];
    return Value::undefined("No first item, sequence was empty.");
  }
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Evaluator&, const Value& v, CallArgs& a) {
  bind("last", a, {});
  if (v.is_iterator() || !(v.is_list() || v.is_dict() || v.is_string() || v.is_undefined())) {
    raise("TypeError", "'" + v.type_name() + "' object is not reversible");
  }
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_list(Evaluator&, const Value& v, CallArgs& a) { bind("list", a, {}); return Value(iterate(v)); }
Value f_string(Evaluator&, const Value& v, CallArgs& a) { bind("string", a, {}); return str_of(v); }
Value f_safe(Evaluator&, const Value& v, CallArgs& a) { bind("safe", a, {}); return Value(v.to_str(), true); }

Value f_escape(Evaluator&, const Value& v, CallArgs& a) {
  bind("escape", a, {});
  if (v.is_markup()) return v;
  return binary_op("+", Value("", true), Value(v.to_str()));
}

std::optional<double> parse_float(const std::string& s) {
  std::string t = text::strip(s, std::nullopt, true, true);
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  // strtod also reads hexadecimal floats ("0x10", "0x1p3"), which Python's float() refuses.
  if (t.empty() || t.find_first_of("xX") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

// int(d) for a finite double, truncated toward zero. Python's ints are unbounded, ours are
// int64: a value beyond it is an OverflowError, as the arithmetic's (found by fuzz_jinja:
// `5e118|int` was an out-of-range conversion).
Value truncated_int(double d) {
  if (!(d >= -0x1p63 && d < 0x1p63))
    raise("OverflowError", "integer result too large for this interpreter");
  return Value(static_cast<int64_t>(d));
}

// jinja2's do_int: int(value) (a string: int(value, base)); on a TypeError or ValueError,
// int(float(value)), whose TypeError, ValueError or OverflowError give the default. So NaN is the
// default, a float infinity an OverflowError, and the string "inf" the default.
Value f_int(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("int", a, {{"default", Value(0)}, {"base", Value(10)}});
  if (v.is_undefined()) v.fail_undefined();  // Undefined.__int__ raises
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (std::isnan(d)) return p[0];
    if (std::isinf(d)) raise("OverflowError", "cannot convert float infinity to integer");
    return truncated_int(d);
  }
  if (v.is_string()) {
    std::string t = text::strip(v.str(), std::nullopt, true, true);
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(t.c_str(), &end, static_cast<int>(p[1].as_int()));
    if (!t.empty() && end == t.c_str() + t.size()) {
      if (errno == ERANGE) raise("OverflowError", "integer result too large for this interpreter");
      return Value(static_cast<int64_t>(i));
    }
    if (auto d = parse_float(v.str()); d && std::isfinite(*d)) return truncated_int(*d);
  }
  return p[0];
}

Value f_float(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("float", a, {{"default", Value(0.0)}});
  if (v.is_undefined()) v.fail_undefined();  // Undefined.__float__ raises
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.str())) return Value(*d);
  }
  return p[0];
}

Value f_abs(Evaluator&, const Value& v, CallArgs& a) {
  bind("abs", a, {});
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  // Negation's overflow check: abs(INT64_MIN) is an OverflowError.
  if (v.is_number()) return v.as_int() < 0 ? unary_op("-", v) : Value(v.as_int());
  raise("TypeError", "bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("round", a, {{"precision", Value(0)}, {"method", Value("common")}});
  const std::string method = p[1].to_str();
  const int64_t prec = p[0].as_int();
  if (method != "common" && method != "ceil" && method != "floor") {
    raise("FilterArgumentError", "method must be common, ceil or floor");
  }
  if (!v.is_number()) raise("TypeError", "type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());
    if (prec >= 0 && prec < 300) {
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(prec), v.as_double());
      return Value(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(prec));
    return Value(std::nearbyint(v.as_double() * scale) / scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_unique(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("unique", a, {{"case_sensitive", Value(false)}, {"attribute", Value(nullptr)}});
  // jinja2 keeps a set of the keys seen: a hash table here too (a scan of all earlier keys was
  // quadratic, seconds past the time limit for 30,000 items). Each key compared is a step.
  std::vector<Value> out, seen;
  std::unordered_multimap<size_t, size_t> index;  // py_hash of a key -> its place in seen
  for (const auto& item : iterate(v)) {
    Value key = sort_key(item, p[1], p[0].truthy());
    if (key.is_dict() || (key.is_list() && !key.is_tuple()) || key.is_namespace()) {
      raise("TypeError", "unhashable type: '" + key.type_name() + "'");
    }
    const size_t h = py_hash(key);
    const auto [first, last] = index.equal_range(h);
    bool repeated = false;
    for (auto it = first; it != last && !repeated; ++it) {
      charge_steps(1);
      repeated = py_equal(seen[it->second], key);
    }
    if (!repeated) {
      index.emplace(h, seen.size());
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return Value(std::move(out), SeqKind::Generator);
}

std::vector<Value> sorted(std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? py_compare(keys[y], keys[x], "<") : py_compare(keys[x], keys[y], "<");
  });
  std::vector<Value> out;
  for (size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

Value f_sort(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("sort", a, {{"reverse", Value(false)}, {"case_sensitive", Value(false)}, {"attribute", Value(nullptr)}});
  auto items = iterate(v);
  std::vector<Value> keys;
  for (const auto& item : items) keys.push_back(sort_key(item, p[2], p[1].truthy()));
  return Value(sorted(std::move(items), keys, p[0].truthy()));
}

Value f_dictsort(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("dictsort", a, {{"case_sensitive", Value(false)}, {"by", Value("key")}, {"reverse", Value(false)}});
  const std::string by = p[1].to_str();
  if (by != "key" && by != "value") raise("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_dict()) raise("AttributeError", "'" + v.type_name() + "' object has no attribute 'items'");
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.dict().items()) {
    items.emplace_back(std::vector<Value>{k, val}, true);
    const Value& key = by == "key" ? k : val;
    keys.push_back(p[0].truthy() ? key : ignore_case(key));
  }
  return Value(sorted(std::move(items), keys, p[2].truthy()));
}

Value min_max(const Value& v, CallArgs& a, const char* name, bool want_max) {
  auto p = bind(name, a, {{"case_sensitive", Value(false)}, {"attribute", Value(nullptr)}});
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], p[1], p[0].truthy());
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(items[i], p[1], p[0].truthy());
    if (want_max ? py_compare(k, best_key, ">") : py_compare(k, best_key, "<")) best = i, best_key = k;
  }
  return items[best];
}

Value f_max(Evaluator&, const Value& v, CallArgs& a) { return min_max(v, a, "max", true); }
Value f_min(Evaluator&, const Value& v, CallArgs& a) { return min_max(v, a, "min", false); }

Value f_sum(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("sum", a, {{"attribute", Value(nullptr)}, {"start", Value(0)}});
  Value total = p[1];
  for (const auto& item : iterate(v)) total = binary_op("+", total, attr_path(item, p[0]));
  return total;
}

Value f_reverse(Evaluator&, const Value& v, CallArgs& a) {
  bind("reverse", a, {});
  if (v.is_string()) return get_slice(v, Value(nullptr), Value(nullptr), Value(-1));
  if (!v.is_list() && !v.is_dict() && !v.is_undefined()) raise("FilterArgumentError", "argument must be iterable");
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  // reversed(x) for sequences and dicts; list(x) reversed for other iterables.
  return Value(std::move(items), v.is_iterator() ? SeqKind::List : SeqKind::ReverseIterator);
}

Value f_indent(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("indent", a, {{"width", Value(4)}, {"first", Value(false)}, {"blank", Value(false)}});
  std::string ind;
  if (p[0].is_string()) {
    ind = p[0].str();
  } else {
    const auto width = static_cast<size_t>(std::max<int64_t>(0, p[0].as_int()));
    reserve_bytes(width);
    ind = std::string(width, ' ');
  }
  if (v.is_undefined()) v.fail_undefined();  // jinja2 does `s += "\n"` first
  if (v.is_plain_list() && !v.is_tuple()) raise("AttributeError", "'list' object has no attribute 'splitlines'");
  if (v.is_tuple()) raise("TypeError", "can only concatenate tuple (not \"str\") to tuple");
  if (!v.is_string()) raise("TypeError", "unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  const auto lines = text::splitlines(v.to_str() + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i && (p[2].truthy() || !lines[i].empty())) append_bounded(out, ind);
    append_bounded(out, lines[i]);
  }
  if (p[1].truthy()) out = ind + out;
  return Value(std::move(out), v.is_markup());
}

Value f_center(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("center", a, {{"width", Value(80)}});
  const std::string s = v.to_str();
  const int64_t len = static_cast<int64_t>(text::length(s)), width = p[0].as_int();
  if (width <= len) return Value(s);
  const int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
  reserve_bytes(s.size() + static_cast<uint64_t>(pad));
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
}

Value f_wordcount(Evaluator&, const Value& v, CallArgs& a) {
  bind("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t cp : text::decode(v.to_str())) {
    const bool word = cp == '_' || text::is_digit(cp) || text::is_alpha(cp);  // regex \w
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Value f_batch(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("batch", a, {{"linecount", std::nullopt}, {"fill_with", Value(nullptr)}});
  const size_t n = static_cast<size_t>(std::max<int64_t>(1, p[0].as_int()));
  std::vector<Value> out, cur;
  for (const auto& item : iterate(v)) {
    if (cur.size() == n) out.emplace_back(std::move(cur)), cur.clear();
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (!p[1].is_none()) {
      reserve_bytes((n - cur.size()) * value_bytes(p[1]));
      cur.resize(n, p[1]);
    }
    out.emplace_back(std::move(cur));
  }
  return Value(std::move(out), SeqKind::Generator);
}

Value f_attr(Evaluator&, const Value& v, CallArgs& a) {
  auto p = bind("attr", a, {{"name", std::nullopt}});
  const std::string name = p[0].to_str();
  if (auto m = bound_method(v, name)) return *m;
  return Value::undefined(py_str_repr(v.object_type_repr()) + " has no attribute " + py_str_repr(name));
}

Value f_format(Evaluator&, const Value& v, CallArgs& a) {
  if (!a.positional.empty() && !a.keyword.empty()) {
    raise("FilterArgumentError", "can't handle positional and keyword arguments at the same time");
  }
  if (!a.keyword.empty()) {
    Dict d;
    for (auto& [k, val] : a.keyword) d.set(Value(k), val);
    return percent_format(str_of(v), Value(std::move(d)));
  }
  return percent_format(str_of(v), Value(a.positional, true));
}

// map/select/reject/selectattr/rejectattr/items/unique/batch are generator functions in jinja2:
// nothing runs until the result is consumed, so their errors surface only then.
template <FilterFn F>
Value lazily(Evaluator& ev, const Value& v, CallArgs& a) {
  try {
    return F(ev, v, a);
  } catch (const TemplateError& e) {
    if (e.kind() == kLimitErrorKind) throw;  // a limit ends the render at once
    Sequence seq;
    seq.kind = SeqKind::Generator;
    seq.pending_error = std::make_shared<const Undefined>(Undefined{e.what(), e.kind()});
    return Value(std::move(seq));
  }
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs}, {"attr", f_attr}, {"batch", lazily<f_batch>}, {"capitalize", f_capitalize},
      {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
      {"float", f_float}, {"format", f_format}, {"indent", f_indent}, {"int", f_int},
      {"items", lazily<f_items>}, {"join", f_join}, {"last", f_last}, {"length", f_length},
      {"list", f_list}, {"lower", f_lower}, {"map", lazily<f_map>}, {"max", f_max}, {"min", f_min},
      {"reject", lazily<f_reject>}, {"rejectattr", lazily<f_rejectattr>}, {"replace", f_replace},
      {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", lazily<f_select>},
      {"selectattr", lazily<f_selectattr>}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
      {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", lazily<f_unique>},
      {"upper", f_upper}, {"wordcount", f_wordcount}};
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) { return filters().count(name) != 0; }

Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) raise("TemplateRuntimeError", "No filter named " + py_str_repr(name) + ".");
  return it->second(ev, v, args);
}

}  // namespace vllm::jinja
