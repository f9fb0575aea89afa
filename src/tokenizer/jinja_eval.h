// Renders a parsed Template. Scopes follow jinja2: each for-iteration, macro call and with-block
// gets a fresh frame, so {% set %} inside them never leaks out; only namespaces carry state.
#pragma once
#include <ctime>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_budget.h"
#include "tokenizer/jinja_value.h"

namespace vllm::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  Value* find_local(std::string_view name);
  void set(const std::string& name, Value value);
};

class Evaluator {
 public:
  // `root` holds the render context; its parent the globals. `now` backs strftime_now().
  // `limits` bound the whole render (they must outlive the evaluator).
  Evaluator(std::shared_ptr<Scope> root, std::function<std::tm()> now,
            const RenderLimits& limits);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  void render(const Body& body, std::string& out);
  Value eval(const Expr& e);
  Value call(const Value& callee, CallArgs& args);
  std::tm now() const { return now_(); }
  // Namespaces are the only mutable values, so only they can form reference cycles
  // ({% set ns.me = ns %}); the evaluator empties them when the render ends.
  void adopt(const std::shared_ptr<Namespace>& ns) { namespaces_.push_back(ns); }
  Budget& budget() { return budget_; }

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, std::string& out);
  Flow exec_node(const Node& n, std::string& out);
  void append(std::string& out, std::string_view text);
  Flow exec_for(const Node& n, std::string& out);
  void exec_set(const Node& n, std::string& out);
  Value make_macro(const Node& n);
  Value lookup(const std::string& name) const;
  Value eval_item(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_filter(const Expr& e, const Value& input);
  Value eval_filter_chain(const Expr& e, const Value& input);
  CallArgs eval_args(const Expr& e, size_t first);

  std::shared_ptr<Scope> scope_;
  std::function<std::tm()> now_;
  // One recursion budget for nested statements, expressions and macro calls together, so no
  // combination of them can exhaust the C++ stack (each level costs well under 1 KiB).
  class Frame {
   public:
    explicit Frame(Evaluator& ev);
    ~Frame() { --ev_.frames_; }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

   private:
    Evaluator& ev_;
  };

  std::vector<std::weak_ptr<Namespace>> namespaces_;
  Budget budget_;
  int frames_ = 0;
  int depth_ = 0;
  bool folding_output_ = false;  // trying jinja2's compile-time evaluation of a {{ }}
  std::unordered_set<const Node*> not_constant_;  // {{ }} nodes whose folding failed
};

// ---- operators and lookups (jinja_ops.cpp) ----
Value get_attr(const Value& obj, const std::string& name);   // obj.name, sandboxed
Value get_item(const Value& obj, const Value& key);          // obj[key]
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value unary_op(std::string_view op, const Value& a);
bool contains(const Value& container, const Value& item);   // item in container
std::vector<Value> iterate(const Value& v);                 // Python iter(); TypeError if not
size_t py_len(const Value& v);                              // Python len(); TypeError if none
Value percent_format(const Value& fmt, const Value& args);  // str % args

// ---- builtins: filters and tests (jinja_filters.cpp), methods and globals (jinja_methods.cpp) ----
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args);
// Python attribute `name` of a str, list or dict as a bound method; nullopt if there is none.
std::optional<Value> bound_method(const Value& obj, const std::string& name);
void add_globals(Scope& globals);

// Python-style binding of a builtin's arguments: one Value per parameter, in order. Parameters
// with no default are required; unknown keywords and surplus positionals raise TypeError.
struct Param {
  const char* name;
  std::optional<Value> fallback;
};
std::vector<Value> bind(std::string_view fn, CallArgs& args, std::initializer_list<Param> params);

}  // namespace vllm::jinja
