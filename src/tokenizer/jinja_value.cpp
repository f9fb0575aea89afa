#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>

#include "tokenizer/jinja_strings.h"

namespace vllm::jinja {
namespace {

// Nested data (from the request, or built by a template loop) is walked recursively; bound the
// depth like Python's recursion limit instead of overflowing the C++ stack.
thread_local int t_nesting = 0;
constexpr int kMaxNesting = 500;

class NestingGuard {
 public:
  NestingGuard() {
    if (++t_nesting > kMaxNesting) {
      --t_nesting;
      raise("RecursionError", "maximum recursion depth exceeded");
    }
  }
  ~NestingGuard() { --t_nesting; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;
};

void check_depth(uint32_t depth) {
  if (depth > kMaxDepth) raise("RecursionError", "maximum recursion depth exceeded");
}

}  // namespace

const std::shared_ptr<const Undefined>& Value::no_hint() {
  static const auto undefined = std::make_shared<const Undefined>();
  return undefined;
}

namespace {
// A new container against the running render: its bytes (strings held by value) against the
// size cap; one step per item plus its string bytes as work.
void charge_container(size_t items, size_t bytes) {
  charge_bytes(bytes, bytes - items * (sizeof(Value) - kBytesPerStep));
}
}  // namespace

Value::Value(Sequence seq) {
  size_t bytes = 0;
  for (const auto& v : seq.items) {
    seq.depth = std::max(seq.depth, v.depth() + 1);
    bytes += value_bytes(v);
  }
  charge_container(seq.items.size(), bytes);
  check_depth(seq.depth);
  data_ = std::make_shared<const Sequence>(std::move(seq));
}

Value::Value(Dict d) {
  size_t bytes = 0;
  for (const auto& [k, v] : d.items()) {
    d.depth = std::max({d.depth, k.depth() + 1, v.depth() + 1});
    bytes += value_bytes(k) + value_bytes(v);
  }
  charge_container(2 * d.items().size(), bytes);
  check_depth(d.depth);
  data_ = std::make_shared<const Dict>(std::move(d));
}

uint32_t Value::depth() const {
  switch (type()) {
    case Type::List: return list_data().depth;
    case Type::Dict: return dict().depth;
    case Type::Namespace: return ns().attrs.depth;
    case Type::Callable: return callable().depth;
    default: return 0;
  }
}

void Namespace::set(Value key, Value value) {
  const uint32_t depth = std::max(attrs.depth, value.depth() + 1);
  check_depth(depth);
  attrs.depth = depth;
  attrs.set(std::move(key), std::move(value));
}

size_t Dict::position(std::string_view key) const {
  if (string_index_.empty()) {
    for (size_t i = 0; i < items_.size(); ++i) {
      const Value& k = items_[i].first;
      if (k.is_string() && k.str() == key) return i;
    }
    return kNotFound;
  }
  const auto [first, last] = string_index_.equal_range(std::hash<std::string_view>{}(key));
  for (auto it = first; it != last; ++it) {
    if (items_[it->second].first.str() == key) return it->second;
  }
  return kNotFound;
}

size_t Dict::position(const Value& key) const {
  if (key.is_string()) return position(std::string_view(key.str()));
  for (size_t i = 0; i < items_.size(); ++i) {
    const Value& k = items_[i].first;  // a str never equals a number, None or a tuple
    if (!k.is_string() && py_equal(k, key)) return i;
  }
  return kNotFound;
}

const Value* Dict::find(const Value& key) const {
  const size_t i = position(key);
  return i == kNotFound ? nullptr : &items_[i].second;
}

const Value* Dict::find(std::string_view key) const {
  const size_t i = position(key);
  return i == kNotFound ? nullptr : &items_[i].second;
}

void Dict::index_string_key(size_t pos) {
  const Value& k = items_[pos].first;
  if (k.is_string())
    string_index_.emplace(std::hash<std::string_view>{}(k.str()), static_cast<uint32_t>(pos));
}

void Dict::set(Value key, Value value) {
  if (const size_t i = position(key); i != kNotFound) {
    items_[i].second = std::move(value);
    return;
  }
  items_.emplace_back(std::move(key), std::move(value));
  if (items_.size() > kIndexFrom) {
    index_string_key(items_.size() - 1);
  } else if (items_.size() == kIndexFrom) {
    for (size_t i = 0; i < items_.size(); ++i) index_string_key(i);
  }
}

void Dict::clear() {
  items_.clear();
  string_index_.clear();
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  NestingGuard guard;
  using J = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case J::object: {
      Dict d;
      d.reserve(j.size());
      for (const auto& [k, v] : j.items()) d.set(Value(k), from_json(v));
      return Value(std::move(d));
    }
    case J::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& v : j) items.push_back(from_json(v));
      return Value(std::move(items));
    }
    case J::string: return Value(j.get<std::string>());
    case J::boolean: return Value(j.get<bool>());
    case J::number_integer: return Value(j.get<int64_t>());
    case J::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case J::number_float: return Value(j.get<double>());
    default: return Value(nullptr);
  }
}

void Value::fail_undefined() const {
  const auto& u = undef();
  raise(u.kind.c_str(), u.message.empty() ? "undefined value" : u.message);
}

void Value::type_mismatch(const std::string& message) const {
  if (is_undefined()) fail_undefined();
  raise("TypeError", message);
}

bool Value::truthy() const {
  switch (type()) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return as_bool();
    case Type::Int: return as_int() != 0;
    case Type::Float: return as_double() != 0.0;
    case Type::String: return !str().empty();
    case Type::List: return is_iterator() || !list().empty();
    case Type::Dict: return !dict().empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (type()) {
    case Type::Undefined: return "Undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return markup_ ? "Markup" : "str";
    case Type::List: {
      static constexpr const char* kNames[] = {"list", "tuple", "dict_items", "dict_keys", "dict_values",
                                               "generator", "list_reverseiterator"};
      return kNames[static_cast<int>(seq_kind())];
    }
    case Type::Dict: return "dict";
    case Type::Namespace: return "Namespace";
    case Type::Callable: return "function";
  }
  return "object";
}

std::string Value::object_type_repr() const {
  if (is_none()) return "None";
  if (is_namespace()) return "jinja2.utils.Namespace object";
  if (is_markup()) return "markupsafe.Markup object";
  return type_name() + " object";
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  if (exp < -4 || exp >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + ebuf;
  }
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(exp + 1);
  }
  return sign + out;
}

std::string py_str_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (uint32_t cp : text::decode(s)) {
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp >= 0xdc80 && cp <= 0xdcff) {
      std::snprintf(buf, sizeof(buf), "\\udc%02x", cp & 0xff);
      out += buf;
    } else if (text::is_printable(cp)) {
      text::append_utf8(out, cp);
    } else {
      if (cp < 0x100) std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      else if (cp < 0x10000) std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      else std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string Value::to_str() const {
  switch (type()) {
    case Type::Undefined: return "";
    case Type::String: return str();
    default: return repr();
  }
}

std::string Value::repr() const {
  NestingGuard guard;
  switch (type()) {
    case Type::Undefined: return "Undefined";
    case Type::None: return "None";
    case Type::Bool: return as_bool() ? "True" : "False";
    case Type::Int: return std::to_string(as_int());
    case Type::Float: return py_float_repr(as_double());
    case Type::String: return markup_ ? "Markup(" + py_str_repr(str()) + ")" : py_str_repr(str());
    case Type::List: {
      if (is_iterator()) return "<" + type_name() + " object>";
      if (is_view()) return type_name() + "(" + Value(list()).repr() + ")";
      const bool tuple = is_tuple();
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < list().size(); ++i) {
        if (i) out += ", ";
        const std::string item = list()[i].repr();
        charge_bytes(out.size() + item.size(), item.size());
        out += item;
      }
      if (tuple && list().size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Type::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict().items()) {
        if (!first) out += ", ";
        first = false;
        const std::string item = k.repr() + ": " + v.repr();
        charge_bytes(out.size() + item.size(), item.size());
        out += item;
      }
      return out + "}";
    }
    case Type::Namespace: return "<Namespace " + Value(ns().attrs).repr() + ">";
    case Type::Callable: return "<function " + callable().name + ">";
  }
  return "";
}

size_t py_hash(const Value& v) {
  NestingGuard guard;
  if (v.is_number()) {
    const double d = v.as_double();
    // Integral values hash as integers, so that 1, 1.0 and True meet.
    if (!v.is_float() || (d == std::trunc(d) && std::fabs(d) < 9.2e18))
      return std::hash<int64_t>{}(v.is_float() ? static_cast<int64_t>(d) : v.as_int());
    return std::hash<double>{}(d);
  }
  switch (v.type()) {
    case Value::Type::String: return std::hash<std::string_view>{}(v.str());
    case Value::Type::List: {
      size_t h = 0x9e3779b97f4a7c15ULL;
      for (const Value& item : v.list()) h = (h ^ py_hash(item)) * 0x100000001b3ULL;
      return h;
    }
    case Value::Type::Callable: return std::hash<const void*>{}(&v.callable());
    default: return static_cast<size_t>(v.type());
  }
}

bool py_equal(const Value& a, const Value& b) {
  NestingGuard guard;
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::Undefined:
    case T::None: return true;
    case T::String: return a.str() == b.str();
    case T::List: {
      if (a.is_iterator()) return &a.list_data() == &b.list_data();
      if (a.seq_kind() != b.seq_kind() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!py_equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case T::Dict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().items()) {
        const Value* other = b.dict().find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    case T::Namespace: return &a.ns() == &b.ns();
    case T::Callable: return &a.callable() == &b.callable();
    default: return false;
  }
}

namespace {
template <typename T>
bool apply_op(const T& x, const T& y, std::string_view op) {
  if (op == "<") return x < y;
  if (op == "<=") return x <= y;
  if (op == ">") return x > y;
  return x >= y;
}
}  // namespace

bool py_compare(const Value& a, const Value& b, std::string_view op) {
  NestingGuard guard;
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return apply_op(a.as_double(), b.as_double(), op);
    return apply_op(a.as_int(), b.as_int(), op);
  }
  if (a.is_string() && b.is_string()) return apply_op(a.str(), b.str(), op);
  if (a.is_plain_list() && b.is_plain_list() && a.seq_kind() == b.seq_kind()) {
    const auto& x = a.list();
    const auto& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return py_compare(x[i], y[i], op);
    }
    return apply_op(x.size(), y.size(), op);
  }
  raise("TypeError", "'" + std::string(op) + "' not supported between instances of '" +
                         a.type_name() + "' and '" + b.type_name() + "'");
}

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  char buf[16];
  for (uint32_t cp : text::decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          out += buf;
        } else if (ensure_ascii && cp >= 0x80) {
          if (cp >= 0x10000) {
            const uint32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          }
          out += buf;
        } else {
          text::append_utf8(out, cp);
        }
    }
  }
  out.push_back('"');
}

std::string json_key(const Value& k) {
  if (k.is_string()) return k.str();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_none()) return "null";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) {
    const double d = k.as_double();
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
    return py_float_repr(d);
  }
  raise("TypeError", "keys must be str, int, float, bool or None, not " + k.type_name());
}

void dump(const Value& v, const JsonOptions& o, int level, std::string& out) {
  NestingGuard guard;
  size_t mark = out.size();
  auto charge = [&] {  // after each item: the text so far stays within the size cap
    charge_bytes(out.size(), out.size() - mark);
    mark = out.size();
  };
  using T = Value::Type;
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.type()) {
    case T::None: out += "null"; return;
    case T::Bool: out += v.as_bool() ? "true" : "false"; return;
    case T::Int: out += std::to_string(v.as_int()); return;
    case T::Float: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += py_float_repr(d);
      return;
    }
    case T::String: json_string(v.str(), o.ensure_ascii, out); return;
    case T::List: {
      if (!v.is_plain_list()) raise("TypeError", "Object of type " + v.type_name() + " is not JSON serializable");
      if (v.list().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) out += o.item_separator;
        if (o.indent) newline(level + 1);
        dump(v.list()[i], o, level + 1, out);
        charge();
      }
      if (o.indent) newline(level);
      out.push_back(']');
      return;
    }
    case T::Dict: {
      if (v.dict().empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict().items()) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto* x, const auto* y) {
          return py_compare(x->first, y->first, "<");
        });
      }
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (o.indent) newline(level + 1);
        json_string(json_key(items[i]->first), o.ensure_ascii, out);
        out += o.key_separator;
        dump(items[i]->second, o, level + 1, out);
        charge();
      }
      if (o.indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      raise("TypeError", "Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  dump(v, options, 0, out);
  return out;
}

}  // namespace vllm::jinja
