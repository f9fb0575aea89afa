// Operators, attribute/item lookup and iteration with Python's semantics and error messages.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_strings.h"

namespace vllm::jinja {
namespace {

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(py_str_repr(obj.object_type_repr()) + " has no attribute " + py_str_repr(name));
}

Value missing_element(const Value& obj, const Value& key) {
  return Value::undefined(obj.object_type_repr() + " has no element " + key.repr());
}

std::string char_at(const std::string& s, int64_t i) {
  const auto cps = text::decode(s);
  return text::encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1);
}

[[noreturn]] void unsupported_operands(std::string_view op, const Value& a, const Value& b) {
  raise("TypeError", "unsupported operand type(s) for " + std::string(op == "**" ? "** or pow()" : op) + ": '" + a.type_name() +
                         "' and '" + b.type_name() + "'");
}

Value checked_int(bool overflow, int64_t v) {
  if (overflow) raise("OverflowError", "integer result too large for this interpreter");
  return Value(v);
}

// -x; INT64_MIN's negation is past int64.
Value negated(int64_t x) {
  int64_t r = 0;
  const bool overflow = __builtin_sub_overflow(int64_t{0}, x, &r);
  return checked_int(overflow, r);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// seq * n: the size is known before anything is built, so a huge product fails at once, and
// an empty sequence gives an empty one without a step per unit of n.
Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string() ? seq.str().empty() : seq.list().empty()) n = 0;
  uint64_t unit = seq.is_string() ? seq.str().size() : 0;
  if (!seq.is_string()) {
    for (const auto& item : seq.list()) unit += value_bytes(item);
  }
  if (n > 0 && unit > 0) {
    const auto count = static_cast<uint64_t>(n);
    reserve_bytes(count > UINT64_MAX / unit ? UINT64_MAX : count * unit);
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out), seq.is_markup());
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value(std::move(out), seq.seq_kind());
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (auto m = bound_method(obj, name)) return *m;
  if (obj.is_dict() && !name.empty()) {
    if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
  }
  if (obj.is_namespace()) {
    if (const Value* v = obj.ns().attrs.find(std::string_view(name))) return *v;
  }
  return missing_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_dict()) {
    if (key.is_list() && !key.is_tuple()) return missing_element(obj, key);  // unhashable
    if (const Value* v = obj.dict().find(key)) return *v;
  } else if ((obj.is_plain_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    const int64_t n = static_cast<int64_t>(obj.is_list() ? obj.list().size() : text::length(obj.str()));
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return missing_element(obj, key);
    return obj.is_list() ? obj.list()[static_cast<size_t>(i)] : Value(char_at(obj.str(), i));
  }
  if (key.is_string()) {
    if (auto m = bound_method(obj, key.str())) return *m;
    return missing_attr(obj, key.str());
  }
  return missing_element(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) obj.fail_undefined();
  // jinja2 compiles slices to plain Python subscripts, so these raise Python's errors.
  if (obj.is_dict()) raise("TypeError", "unhashable type: 'slice'");
  if (!obj.is_plain_list() && !obj.is_string()) {
    raise("TypeError", "'" + obj.type_name() + "' object is not subscriptable");
  }
  for (const Value* v : {&start, &stop, &step}) {
    if (v->is_undefined()) v->fail_undefined();
    if (!v->is_none() && !v->is_int() && !v->is_bool()) {
      raise("TypeError", "slice indices must be integers or None or have an __index__ method");
    }
  }
  std::vector<uint32_t> cps;
  if (obj.is_string()) cps = text::decode(obj.str());
  const int64_t n = static_cast<int64_t>(obj.is_list() ? obj.list().size() : cps.size());
  const int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) raise("ValueError", "slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  const int64_t e = clamp(stop, st > 0 ? n : -1);
  std::vector<Value> items;
  std::string s;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_list()) items.push_back(obj.list()[static_cast<size_t>(i)]);
    else text::append_utf8(s, cps[static_cast<size_t>(i)]);
    // Stop before a step that would pass e: i + st itself may not fit in int64.
    if (st > 0 ? st >= e - i : st <= e - i) break;
  }
  if (obj.is_string()) return Value(std::move(s), obj.is_markup());
  return Value(std::move(items), obj.is_tuple());
}

Value unary_op(std::string_view op, const Value& a) {
  if (a.is_undefined()) a.fail_undefined();
  if (!a.is_number()) {
    raise("TypeError", "bad operand type for unary " + std::string(op) + ": '" + a.type_name() + "'");
  }
  if (op == "+") return a.is_float() ? a : Value(a.as_int());
  if (a.is_float()) return Value(-a.as_double());
  return negated(a.as_int());
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  // str.__mod__ runs before any reflected method of the right operand, even an Undefined.
  if (op == "%" && a.is_string()) return percent_format(a, b);
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return checked_int(overflow, r);
    }
    if (nums) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      // markupsafe: Markup + str escapes the plain side, whichever side the Markup is on.
      if (a.is_markup() || b.is_markup()) {
        return Value((a.is_markup() ? a.str() : html_escape(a.str())) +
                         (b.is_markup() ? b.str() : html_escape(b.str())), true);
      }
      return Value(a.str() + b.str());
    }
    if (a.is_plain_list() && b.is_plain_list() && a.seq_kind() == b.seq_kind()) {
      std::vector<Value> items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value(std::move(items), a.is_tuple());
    }
    if (a.is_string() || a.is_plain_list()) {
      raise("TypeError", "can only concatenate " + a.type_name() + " (not \"" + b.type_name() +
                             "\") to " + a.type_name());
    }
    unsupported_operands(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return checked_int(overflow, r);
    }
    if (nums) return Value(a.as_double() - b.as_double());
    unsupported_operands(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return checked_int(overflow, r);
    }
    if (nums) return Value(a.as_double() * b.as_double());
    const bool a_seq = a.is_string() || a.is_plain_list();
    const bool b_seq = b.is_string() || b.is_plain_list();
    if (a_seq && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if (b_seq && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    if (a_seq || b_seq) {
      raise("TypeError", "can't multiply sequence by non-int of type '" +
                             (a_seq ? b : a).type_name() + "'");
    }
    unsupported_operands(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported_operands(op, a, b);
    if (b.as_double() == 0.0) raise("ZeroDivisionError", ints ? "division by zero" : "float division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (!nums) unsupported_operands(op, a, b);
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) raise("ZeroDivisionError", op == "%" ? "integer modulo by zero" : "integer division or modulo by zero");
      // INT64_MIN // -1 is 2^63 (past int64; x86's division traps on it), and its % is 0.
      if (y == -1) {
        return op == "%" ? Value(int64_t{0}) : negated(x);
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
      return Value(op == "//" ? q : m);
    }
    const double x = a.as_double(), y = b.as_double();
    if (y == 0.0) raise("ZeroDivisionError", op == "//" ? "float floor division by zero" : "float modulo");
    // CPython's float_divmod, so signs and rounding match.
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0.0) {
      if ((y < 0) != (mod < 0)) mod += y, div -= 1.0;
    } else {
      mod = std::copysign(0.0, y);
    }
    if (op == "%") return Value(mod);
    double floordiv = std::copysign(0.0, x / y);
    if (div != 0.0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    }
    return Value(floordiv);
  }
  if (op == "**") {
    if (!nums) unsupported_operands(op, a, b);
    if (ints && b.as_int() >= 0) {
      // By squaring: steps in the exponent's bits, not its value (0 ** 2**62 must not loop).
      // A square that overflows with bits left means |base| >= 2 and a result that overflows.
      int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      bool overflow = false;
      while (e > 0 && !overflow) {
        if (e & 1) overflow = __builtin_mul_overflow(acc, base, &acc);
        e >>= 1;
        if (e > 0 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
      }
      return checked_int(overflow, acc);
    }
    if (a.as_double() == 0.0 && b.as_double() < 0) {
      raise("ZeroDivisionError", "0.0 cannot be raised to a negative power");
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  raise("TypeError", "unknown operator " + std::string(op));
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Undefined: return false;
    case Value::Type::String:
      if (!item.is_string()) {
        raise("TypeError", "'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::List: {
      const Sequence& seq = container.list_data();
      if (seq.pending_error) raise(seq.pending_error->kind.c_str(), seq.pending_error->message);
      const size_t begin = container.is_iterator() ? seq.consumed : 0;
      for (size_t i = begin; i < seq.items.size(); ++i) {
        if (py_equal(seq.items[i], item)) {
          if (container.is_iterator()) seq.consumed = i + 1;  // `in` consumes up to the match
          return true;
        }
      }
      if (container.is_iterator()) seq.consumed = seq.items.size();
      return false;
    }
    case Value::Type::Dict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) {
        raise("TypeError", "unhashable type: '" + item.type_name() + "'");
      }
      return container.dict().find(item) != nullptr;
    default:
      raise("TypeError", "argument of type '" + container.type_name() + "' is not iterable");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};
    case Value::Type::List: {
      if (!v.is_iterator()) {
        uint64_t bytes = 0;
        for (const auto& item : v.list()) bytes += value_bytes(item);
        charge_copy(v.list().size(), bytes);
        return v.list();
      }
      const Sequence& seq = v.list_data();
      if (seq.pending_error) raise(seq.pending_error->kind.c_str(), seq.pending_error->message);
      std::vector<Value> rest(seq.items.begin() + static_cast<long>(seq.consumed), seq.items.end());
      seq.consumed = seq.items.size();
      return rest;
    }
    case Value::Type::Dict: {
      charge_copy(v.dict().size(), 0);
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& kv : v.dict().items()) keys.push_back(kv.first);
      return keys;
    }
    case Value::Type::String: {
      reserve_bytes(v.str().size() * sizeof(Value));  // one str value per code point at most
      std::vector<Value> chars;
      for (uint32_t cp : text::decode(v.str())) {
        std::string c;
        text::append_utf8(c, cp);
        chars.emplace_back(std::move(c));  // iterating a Markup yields plain str
      }
      return chars;
    }
    default: raise("TypeError", "'" + v.type_name() + "' object is not iterable");
  }
}

size_t py_len(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return 0;
    case Value::Type::String: return text::length(v.str());
    case Value::Type::List:
      if (v.is_iterator()) raise("TypeError", "object of type '" + v.type_name() + "' has no len()");
      return v.list().size();
    case Value::Type::Dict: return v.dict().size();
    default: raise("TypeError", "object of type '" + v.type_name() + "' has no len()");
  }
}

// printf-style formatting for the conversions chat templates use: %s %r %d %i %f %%.
Value percent_format(const Value& fmt, const Value& args) {
  std::vector<Value> values = args.is_tuple() ? args.list() : std::vector<Value>{args};
  const Dict* named = args.is_dict() ? &args.dict() : nullptr;
  // CPython treats any non-tuple argument with __getitem__ as a mapping, so a lone list
  // never triggers "not all arguments converted".
  const bool mapping_like = named || (args.is_plain_list() && !args.is_tuple()) || args.is_view() || args.is_undefined();
  const std::string& f = fmt.str();
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) raise("ValueError", "incomplete format");
    const Value* arg = nullptr;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (!named || close == std::string::npos) raise("TypeError", "format requires a mapping");
      arg = named->find(std::string_view(f).substr(i + 1, close - i - 1));
      if (!arg) raise("KeyError", py_str_repr(f.substr(i + 1, close - i - 1)));
      i = close + 1;
    }
    std::string spec;
    while (i < f.size() && (std::isdigit(static_cast<unsigned char>(f[i])) || f[i] == '.' || f[i] == '-' || f[i] == '+' || f[i] == ' ' || f[i] == '0')) {
      spec.push_back(f[i++]);
    }
    if (i >= f.size()) raise("ValueError", "incomplete format");
    const char conv = f[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (next >= values.size()) raise("TypeError", "not enough arguments for format string");
      arg = &values[next++];
    }
    // snprintf pads to the width even past its buffer: charge the width (or precision).
    uint64_t widest = 0, number = 0;
    for (const char c : spec) {
      const bool digit = std::isdigit(static_cast<unsigned char>(c));
      const uint64_t next_number = number * 10 + static_cast<uint64_t>(c - '0');
      number = digit ? std::min<uint64_t>(next_number, INT32_MAX) : 0;
      widest = std::max(widest, number);
    }
    reserve_bytes(widest);
    char buf[512];
    if (conv == 's' || conv == 'r') {
      const std::string s = conv == 's' ? arg->to_str() : arg->repr();
      std::snprintf(buf, sizeof(buf), ("%" + spec + "s").c_str(), s.c_str());
      out += spec.empty() ? s : std::string(buf);
    } else if (conv == 'd' || conv == 'i') {
      if (!arg->is_number()) raise("TypeError", "%d format: a real number is required, not " + arg->type_name());
      std::snprintf(buf, sizeof(buf), ("%" + spec + "lld").c_str(), static_cast<long long>(arg->is_float() ? std::trunc(arg->as_double()) : arg->as_int()));
      out += buf;
    } else if (conv == 'f' || conv == 'e' || conv == 'g') {
      if (!arg->is_number()) raise("TypeError", "must be real number, not " + arg->type_name());
      std::snprintf(buf, sizeof(buf), ("%" + spec + conv).c_str(), arg->as_double());
      out += buf;
    } else {
      raise("ValueError", std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!mapping_like && next < values.size()) {
    raise("TypeError", "not all arguments converted during string formatting");
  }
  return Value(std::move(out), fmt.is_markup());
}

}  // namespace vllm::jinja
