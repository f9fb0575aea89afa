// Runtime values of the Jinja interpreter, modelled on the Python objects jinja2 sees: lists and
// dicts are immutable once built (HF's ImmutableSandboxedEnvironment), only namespaces mutate.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "tokenizer/jinja_budget.h"
#include "tokenizer/jinja_error.h"

namespace vllm::jinja {

class Value;
class Evaluator;

struct Undefined {
  std::string message;                       // raised when the value is used, e.g. "'x' is undefined"
  std::string kind = "UndefinedError";       // or "SecurityError" for sandbox-blocked attributes
};

// A list, a tuple, a dict view (d.items() / keys() / values()) or a one-shot iterator (what
// map/select/... filters and reverse return in jinja2): all iterate alike, but print, compare,
// index and count differently. Iterators are always truthy and are consumed by iteration.
enum class SeqKind : uint8_t { List, Tuple, Items, Keys, Values, Generator, ReverseIterator };

// Containers record their nesting depth so that construction, not a later recursive walk or
// destructor, fails (RecursionError) when a template builds data deeper than kMaxDepth.
inline constexpr uint32_t kMaxDepth = 500;

struct Sequence {
  std::vector<Value> items;
  SeqKind kind = SeqKind::List;
  mutable size_t consumed = 0;  // iterators only: items already taken
  // Iterators only: the error a lazy jinja2 generator raises once it is consumed.
  std::shared_ptr<const Undefined> pending_error;
  uint32_t depth = 1;
};

// A Python dict: iterates, prints and serialises in insertion order (a key set again keeps its
// place); keys compare with Python equality (1 == 1.0 == True). Past a few entries, string keys
// are also hashed so lookups in large request objects stay O(1).
class Dict {
 public:
  using Item = std::pair<Value, Value>;
  const std::vector<Item>& items() const { return items_; }
  size_t size() const;
  bool empty() const;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
  void reserve(size_t n);
  void clear();
  uint32_t depth = 1;

 private:
  static constexpr size_t kIndexFrom = 16;  // below this a scan beats hashing
  static constexpr size_t kNotFound = SIZE_MAX;
  size_t position(std::string_view key) const;
  size_t position(const Value& key) const;
  void index_string_key(size_t pos);
  std::vector<Item> items_;
  // hash of a string key -> its position in items_; empty while the dict is small.
  std::unordered_multimap<size_t, uint32_t> string_index_;
};

struct Namespace {
  Dict attrs;  // its depth only grows: a conservative bound on what the namespace holds
  void set(Value key, Value value);
};

// Keyword arguments keep call order; positional arguments come first.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(Evaluator&, CallArgs&)> fn;
  uint32_t depth = 1;  // bound methods hold their receiver
};

class Value {
 public:
  enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() : data_(no_hint()) {}
  Value(std::nullptr_t) : data_(nullptr) {}
  Value(bool b) : data_(b) {}
  Value(int v) : data_(int64_t{v}) {}
  Value(int64_t v) : data_(v) {}
  Value(double v) : data_(v) {}
  // Large strings are charged to the running render (size cap and work); small ones are
  // covered by the step of the expression that built them.
  Value(std::string s, bool markup = false) : data_(std::move(s)), markup_(markup) {
    const size_t n = std::get<std::string>(data_).size();
    if (n >= kChargedStringBytes) reserve_bytes(n);
  }
  Value(const char* s) : data_(std::string(s)) {}
  Value(std::vector<Value> items, bool is_tuple = false)
      : Value(std::move(items), is_tuple ? SeqKind::Tuple : SeqKind::List) {}
  Value(std::vector<Value> items, SeqKind kind) : Value(Sequence{std::move(items), kind, 0, nullptr, 1}) {}
  explicit Value(Sequence seq);
  Value(Dict d);
  Value(std::shared_ptr<Namespace> ns) : data_(std::move(ns)) {}
  Value(std::shared_ptr<const Callable> fn) : data_(std::move(fn)) {}

  static Value undefined(std::string message, std::string kind = "UndefinedError") {
    Value v;
    v.data_ = std::make_shared<const Undefined>(Undefined{std::move(message), std::move(kind)});
    return v;
  }
  static Value from_json(const nlohmann::ordered_json& j);
  static Value function(std::string name, std::function<Value(Evaluator&, CallArgs&)> fn,
                        uint32_t depth = 1) {
    return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn), depth}));
  }

  Type type() const { return static_cast<Type>(data_.index()); }
  bool is_undefined() const { return type() == Type::Undefined; }
  bool is_none() const { return type() == Type::None; }
  bool is_bool() const { return type() == Type::Bool; }
  bool is_int() const { return type() == Type::Int; }
  bool is_float() const { return type() == Type::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return type() == Type::String; }
  bool is_list() const { return type() == Type::List; }
  bool is_tuple() const { return is_list() && list_data().kind == SeqKind::Tuple; }
  bool is_plain_list() const { return is_list() && list_data().kind <= SeqKind::Tuple; }  // list/tuple
  bool is_view() const { return is_list() && !is_plain_list() && !is_iterator(); }
  bool is_iterator() const { return is_list() && list_data().kind >= SeqKind::Generator; }
  SeqKind seq_kind() const { return list_data().kind; }
  bool is_dict() const { return type() == Type::Dict; }
  bool is_namespace() const { return type() == Type::Namespace; }
  bool is_callable() const { return type() == Type::Callable; }
  bool is_markup() const { return markup_; }

  // Typed accessors raise Python's TypeError (not std::bad_variant_access) on a type mismatch,
  // so builtins can take arguments without checking every type first.
  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const {
    if (is_bool()) return int64_t{as_bool()};
    if (!is_int()) type_mismatch("'" + type_name() + "' object cannot be interpreted as an integer");
    return std::get<int64_t>(data_);
  }
  double as_double() const {
    if (is_float()) return std::get<double>(data_);
    if (!is_number()) type_mismatch("must be real number, not " + type_name());
    return static_cast<double>(as_int());
  }
  const std::string& str() const {
    if (!is_string()) type_mismatch("must be str, not " + type_name());
    return std::get<std::string>(data_);
  }
  const std::vector<Value>& list() const { return list_data().items; }
  const Sequence& list_data() const { return *std::get<std::shared_ptr<const Sequence>>(data_); }
  const Dict& dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
  Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  const Undefined& undef() const { return *std::get<std::shared_ptr<const Undefined>>(data_); }

  // Throws the stored UndefinedError (or SecurityError) when this value is undefined.
  [[noreturn]] void fail_undefined() const;
  // Undefined values raise their UndefinedError, anything else a TypeError with `message`.
  [[noreturn]] void type_mismatch(const std::string& message) const;

  uint32_t depth() const;  // 0 for scalars
  bool truthy() const;
  std::string type_name() const;          // Python's type(x).__name__: "str", "NoneType", ...
  std::string object_type_repr() const;   // jinja2's object_type_repr: "dict object", "None"
  std::string to_str() const;             // Python str(x); undefined -> ""
  std::string repr() const;               // Python repr(x)

 private:
  std::variant<std::shared_ptr<const Undefined>, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<const Sequence>, std::shared_ptr<const Dict>, std::shared_ptr<Namespace>,
               std::shared_ptr<const Callable>>
      data_;
  bool markup_ = false;

  static const std::shared_ptr<const Undefined>& no_hint();
  static constexpr size_t kChargedStringBytes = 4096;
};

// What a value costs to copy: strings are held by value, containers are shared.
inline size_t value_bytes(const Value& v) {
  return sizeof(Value) + (v.is_string() ? v.str().size() : 0);
}

inline size_t Dict::size() const { return items_.size(); }
inline bool Dict::empty() const { return items_.empty(); }
inline void Dict::reserve(size_t n) { items_.reserve(n); }

bool py_equal(const Value& a, const Value& b);
// A hash of a hashable value (number, string, none, tuple of hashables, callable) that agrees
// with py_equal: equal values hash alike (1, 1.0 and True too).
size_t py_hash(const Value& v);
// Python's a <op> b (op one of < <= > >=) for numbers, strings and same-kind sequences;
// throws TypeError for other pairs and UndefinedError for undefined operands.
bool py_compare(const Value& a, const Value& b, std::string_view op);
std::string py_float_repr(double v);
std::string py_str_repr(const std::string& s);

struct JsonOptions {
  std::optional<std::string> indent;   // already expanded to the indent unit (" " * n)
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python json.dumps(value, ...) with HF's defaults; throws TypeError on non-serialisable values.
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace vllm::jinja
