// Python methods of str, dict and list values as the sandbox exposes them (mutating list and
// dict methods are blocked like ImmutableSandboxedEnvironment), and the template globals.
#include <algorithm>
#include <array>
#include <cstdio>

#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_strings.h"

namespace vllm::jinja {
namespace {

using Method = Value (*)(const Value& self, CallArgs& a);

std::optional<std::string> opt_str(const Value& v) {
  if (v.is_none()) return std::nullopt;
  if (!v.is_string()) raise("TypeError", "must be str or None, not " + v.type_name());
  return v.str();
}

std::vector<std::string> affixes(const Value& v, const char* fn) {
  if (v.is_string()) return {v.str()};
  if (v.is_tuple()) {
    std::vector<std::string> out;
    for (const auto& x : v.list()) {
      if (!x.is_string()) raise("TypeError", "tuple for " + std::string(fn) + " must only contain str, not " + x.type_name());
      out.push_back(x.str());
    }
    return out;
  }
  raise("TypeError", std::string(fn) + " first arg must be str or a tuple of str, not " + v.type_name());
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value(std::move(out));
}

// Code-point window [start, end) of a Python str.startswith/find call, as a substring.
std::string window(const std::string& s, const Value& start, const Value& end) {
  if (start.is_none() && end.is_none()) return s;
  return get_slice(Value(s), start, end, Value(nullptr)).str();
}

std::string format_field(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.to_str();
  size_t i = 0;
  char fill = ' ', align = 0;
  if (spec.size() >= 2 && (spec[1] == '<' || spec[1] == '>' || spec[1] == '^')) fill = spec[0], align = spec[1], i = 2;
  else if (spec[0] == '<' || spec[0] == '>' || spec[0] == '^') align = spec[0], i = 1;
  size_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + (spec[i++] - '0');
  int prec = -1;
  if (i < spec.size() && spec[i] == '.') {
    prec = 0;
    while (++i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) prec = prec * 10 + (spec[i] - '0');
  }
  const char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) raise("ValueError", "unsupported format spec '" + spec + "'");
  std::string body;
  if (type == 'f' || type == 'e' || type == 'g' || type == '%') {
    char buf[512];
    std::snprintf(buf, sizeof(buf), ("%." + std::to_string(prec < 0 ? 6 : prec) + (type == '%' ? 'f' : type)).c_str(),
                  v.as_double() * (type == '%' ? 100 : 1));
    body = std::string(buf) + (type == '%' ? "%" : "");
  } else if (type == 'd') {
    body = std::to_string(v.as_int());
  } else {
    body = v.to_str();
    if (prec >= 0) body = text::encode(text::decode(body), 0, static_cast<size_t>(prec));
  }
  if (!align) align = v.is_number() ? '>' : '<';
  const size_t len = text::length(body);
  if (len >= width) return body;
  reserve_bytes(body.size() + (width - len));
  const size_t pad = width - len;
  const size_t left = align == '<' ? 0 : align == '>' ? pad : pad / 2;
  return std::string(left, fill) + body + std::string(pad - left, fill);
}

Value str_format(const Value& self, CallArgs& a) {
  const std::string& f = self.str();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '}' ) {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      else raise("ValueError", "Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (f[i] != '{') {
      out.push_back(f[i]);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) raise("ValueError", "expected '}' before end of string");
    std::string field = f.substr(i + 1, close - i - 1), spec, conv;
    if (const size_t c = field.find(':'); c != std::string::npos) spec = field.substr(c + 1), field.resize(c);
    if (const size_t c = field.find('!'); c != std::string::npos) conv = field.substr(c + 1), field.resize(c);
    Value v;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      const size_t idx = field.empty() ? auto_index++ : std::strtoull(field.c_str(), nullptr, 10);
      if (idx >= a.positional.size()) raise("IndexError", "Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      v = a.positional[idx];
    } else {
      auto it = std::find_if(a.keyword.begin(), a.keyword.end(), [&](const auto& kv) { return kv.first == field; });
      if (it == a.keyword.end()) raise("KeyError", py_str_repr(field));
      v = it->second;
    }
    if (conv == "r") v = Value(v.repr());
    else if (conv == "s") v = Value(v.to_str());
    append_bounded(out, format_field(v, spec));
    i = close;
  }
  return Value(std::move(out));
}

Value str_join(const Value& self, CallArgs& a) {
  auto p = bind("join", a, {{"iterable", std::nullopt}});
  std::string out;
  size_t i = 0;
  for (const auto& item : iterate(p[0])) {
    if (!item.is_string()) {
      raise("TypeError", "sequence item " + std::to_string(i) + ": expected str instance, " + item.type_name() + " found");
    }
    if (i++) append_bounded(out, self.str());
    append_bounded(out, item.str());
  }
  return Value(std::move(out));
}

Value str_find(const Value& self, CallArgs& a, const char* fn) {
  auto p = bind(fn, a, {{"sub", std::nullopt}, {"start", Value(nullptr)}, {"end", Value(nullptr)}});
  const std::string hay = window(self.str(), p[1], p[2]);
  const std::string& sub = p[0].str();
  const bool right = fn[0] == 'r';
  const size_t hit = right ? hay.rfind(sub) : hay.find(sub);
  if (hit == std::string::npos) {
    if (std::string_view(fn).find("index") != std::string_view::npos) raise("ValueError", "substring not found");
    return Value(-1);
  }
  int64_t offset = 0;
  if (!p[1].is_none()) {
    const auto n = static_cast<int64_t>(text::length(self.str()));
    offset = p[1].as_int() < 0 ? std::max<int64_t>(0, p[1].as_int() + n) : std::min(p[1].as_int(), n);
  }
  return Value(offset + static_cast<int64_t>(text::code_point_index(hay, hit)));
}

bool all_chars(const std::string& s, bool (*pred)(uint32_t)) {
  const auto cps = text::decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

Value str_method(const std::string& name, const Value& self, CallArgs& a) {
  const std::string& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto p = bind(name, a, {{"chars", Value(nullptr)}});
    return Value(text::strip(s, opt_str(p[0]), name[0] != 'r', name[0] != 'l'));
  }
  if (name == "split" || name == "rsplit") {
    auto p = bind(name, a, {{"sep", Value(nullptr)}, {"maxsplit", Value(-1)}});
    auto sep = opt_str(p[0]);
    if (sep && sep->empty()) raise("ValueError", "empty separator");
    return str_list(text::split(s, sep, p[1].as_int(), name == "rsplit"));
  }
  if (name == "splitlines") {
    auto p = bind(name, a, {{"keepends", Value(false)}});
    return str_list(text::splitlines(s, p[0].truthy()));
  }
  if (name == "startswith" || name == "endswith") {
    auto p = bind(name, a, {{"prefix", std::nullopt}, {"start", Value(nullptr)}, {"end", Value(nullptr)}});
    const std::string w = window(s, p[1], p[2]);
    for (const auto& x : affixes(p[0], name.c_str())) {
      const bool hit = name == "startswith" ? w.compare(0, x.size(), x) == 0
                                            : w.size() >= x.size() && w.compare(w.size() - x.size(), x.size(), x) == 0;
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "upper") return bind(name, a, {}), Value(text::upper(s));
  if (name == "lower") return bind(name, a, {}), Value(text::lower(s));
  if (name == "title") return bind(name, a, {}), Value(text::title(s));
  if (name == "capitalize") return bind(name, a, {}), Value(text::capitalize(s));
  if (name == "replace") {
    auto p = bind(name, a, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value(-1)}});
    return Value(text::replace(s, p[0].to_str(), p[1].to_str(), p[2].as_int()));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") return str_find(self, a, name.c_str());
  if (name == "count") {
    auto p = bind(name, a, {{"sub", std::nullopt}});
    const std::string& sub = p[0].str();
    if (sub.empty()) return Value(static_cast<int64_t>(text::length(s) + 1));
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") return str_join(self, a);
  if (name == "format") return str_format(self, a);
  if (name == "removeprefix" || name == "removesuffix") {
    auto p = bind(name, a, {{"affix", std::nullopt}});
    const std::string& x = p[0].str();
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value(s.substr(0, s.size() - x.size()));
    }
    return Value(s);
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return bind(name, a, {}), Value(all_chars(s, text::is_digit));
  if (name == "isalpha") return bind(name, a, {}), Value(all_chars(s, text::is_alpha));
  if (name == "isalnum") return bind(name, a, {}), Value(all_chars(s, [](uint32_t c) { return text::is_alpha(c) || text::is_digit(c); }));
  if (name == "isspace") return bind(name, a, {}), Value(all_chars(s, text::is_space));
  if (name == "islower" || name == "isupper") {
    bind(name, a, {});
    bool any_cased = false;
    for (uint32_t cp : text::decode(s)) {
      const bool lower = text::to_upper(cp) != cp, upper = text::to_lower(cp) != cp;
      if (name == "islower" ? upper : lower) return Value(false);
      any_cased |= lower || upper;
    }
    return Value(any_cased);
  }
  raise("AttributeError", "'str' object has no attribute '" + name + "'");
}

constexpr std::array<std::string_view, 23> kStrMethods = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "upper", "lower", "title", "capitalize", "replace", "find", "rfind", "index", "rindex",
    "count", "join", "format", "removeprefix", "removesuffix", "isdigit"};
constexpr std::array<std::string_view, 7> kStrPredicates = {
    "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace", "islower", "isupper"};
constexpr std::array<std::string_view, 5> kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::array<std::string_view, 8> kListUnsafe = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
bool in(const std::array<std::string_view, N>& set, std::string_view name) {
  return std::find(set.begin(), set.end(), name) != set.end();
}

Value dict_method(const std::string& name, const Value& self, CallArgs& a) {
  const Dict& d = self.dict();
  if (name == "get") {
    auto p = bind(name, a, {{"key", std::nullopt}, {"default", Value(nullptr)}});
    const Value* v = d.find(p[0]);
    return v ? *v : p[1];
  }
  bind(name, a, {});
  if (name == "copy") return self;
  std::vector<Value> out;
  for (const auto& [k, v] : d.items()) {
    if (name == "items") out.emplace_back(std::vector<Value>{k, v}, true);
    else out.push_back(name == "keys" ? k : v);
  }
  return Value(std::move(out), name == "items" ? SeqKind::Items : name == "keys" ? SeqKind::Keys : SeqKind::Values);
}

Value list_method(const std::string& name, const Value& self, CallArgs& a) {
  if (name == "copy") return bind(name, a, {}), self;
  auto p = bind(name, a, {{"value", std::nullopt}});
  const auto& items = self.list();
  if (name == "count") {
    return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) { return py_equal(v, p[0]); })));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (py_equal(items[i], p[0])) return Value(static_cast<int64_t>(i));
  }
  raise("ValueError", p[0].repr() + " is not in list");
}

Value bind_method(const Value& self, const std::string& name, Value (*fn)(const std::string&, const Value&, CallArgs&)) {
  return Value::function(name, [self, name, fn](Evaluator&, CallArgs& a) { return fn(name, self, a); },
                         self.depth() + 1);
}

Value unsafe(const Value& self, const std::string& name) {
  return Value::undefined("access to attribute " + py_str_repr(name) + " of " + py_str_repr(self.type_name()) +
                              " object is unsafe.", "SecurityError");
}

}  // namespace

std::optional<Value> bound_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    if (in(kStrMethods, name) || in(kStrPredicates, name)) return bind_method(obj, name, str_method);
  } else if (obj.is_dict()) {
    if (name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy") {
      return bind_method(obj, name, dict_method);
    }
    if (in(kDictUnsafe, name)) return unsafe(obj, name);
  } else if (obj.is_list() && obj.seq_kind() == SeqKind::List) {
    if (name == "index" || name == "count" || name == "copy") return bind_method(obj, name, list_method);
    if (in(kListUnsafe, name)) return unsafe(obj, name);
  } else if (obj.is_tuple() && (name == "index" || name == "count")) {
    return bind_method(obj, name, list_method);
  }
  return std::nullopt;
}

void add_globals(Scope& globals) {
  // jinja2's `self` (block references): templates only ever read missing attributes from it.
  globals.set("self", Value(std::make_shared<Namespace>()));
  globals.set("range", Value::function("range", [](Evaluator&, CallArgs& a) {
    if (!a.keyword.empty()) raise("TypeError", "range() takes no keyword arguments");
    const auto& p = a.positional;
    if (p.empty() || p.size() > 3) raise("TypeError", "range expected at most 3 arguments, got " + std::to_string(p.size()));
    for (const auto& v : p) {
      if (!v.is_int() && !v.is_bool()) raise("TypeError", "'" + v.type_name() + "' object cannot be interpreted as an integer");
    }
    const int64_t start = p.size() > 1 ? p[0].as_int() : 0;
    const int64_t stop = p.size() > 1 ? p[1].as_int() : p[0].as_int();
    const int64_t step = p.size() > 2 ? p[2].as_int() : 1;
    if (step == 0) raise("ValueError", "range() arg 3 must not be zero");
    // The length, in unsigned arithmetic: the distance between two int64 values, and -step,
    // can pass INT64_MAX.
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    const uint64_t len =
        step > 0 ? (stop > start ? (u(stop) - u(start) - 1) / u(step) + 1 : 0)
                 : (start > stop ? (u(start) - u(stop) - 1) / (uint64_t(0) - u(step)) + 1 : 0);
    const int64_t n = len > 100000 ? 100001 : static_cast<int64_t>(len);
    if (n > 100000) raise("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    std::vector<Value> out;
    // start + i * step lies between start and stop, but i * step alone may not fit an int64.
    for (int64_t i = 0; i < n; ++i)
      out.emplace_back(static_cast<int64_t>(u(start) + u(i) * u(step)));
    return Value(std::move(out));
  }));
  globals.set("namespace", Value::function("namespace", [](Evaluator& ev, CallArgs& a) {
    auto ns = std::make_shared<Namespace>();
    ev.adopt(ns);
    for (const auto& v : a.positional) {
      if (!v.is_dict()) raise("TypeError", "'" + v.type_name() + "' object is not a mapping");
      for (const auto& [k, val] : v.dict().items()) ns->set(k, val);
    }
    for (const auto& [k, v] : a.keyword) ns->set(Value(k), v);
    return Value(std::move(ns));
  }));
  globals.set("dict", Value::function("dict", [](Evaluator&, CallArgs& a) {
    Dict d;
    for (const auto& v : a.positional) {
      if (v.is_dict()) {
        for (const auto& [k, val] : v.dict().items()) d.set(k, val);
      } else {
        for (const auto& pair : iterate(v)) {
          const auto kv = iterate(pair);
          if (kv.size() != 2) raise("ValueError", "dictionary update sequence element has wrong length");
          d.set(kv[0], kv[1]);
        }
      }
    }
    for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
    return Value(std::move(d));
  }));
  globals.set("raise_exception", Value::function("raise_exception", [](Evaluator&, CallArgs& a) -> Value {
    auto p = bind("raise_exception", a, {{"message", std::nullopt}});
    raise("TemplateError", p[0].to_str());
  }));
  globals.set("strftime_now", Value::function("strftime_now", [](Evaluator& ev, CallArgs& a) {
    auto p = bind("strftime_now", a, {{"format", std::nullopt}});
    const std::string fmt = p[0].to_str();
    const std::tm t = ev.now();
    std::vector<char> buf(256 + fmt.size() * 8);
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &t);
    return Value(std::string(buf.data(), n));
  }));
}

}  // namespace vllm::jinja
