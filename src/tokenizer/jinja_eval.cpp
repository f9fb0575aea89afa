#include "tokenizer/jinja_eval.h"

#include "tokenizer/jinja_error.h"

namespace vllm::jinja {
namespace {

constexpr int kMaxCallDepth = 200;  // macro recursion, about where jinja2 hits Python's limit
constexpr int kMaxFrames = 1500;    // statements + expressions + calls in flight

// Restores the evaluator's scope on exit, also when a render error unwinds.
class ScopeGuard {
 public:
  ScopeGuard(std::shared_ptr<Scope>& slot, std::shared_ptr<Scope> next)
      : slot_(slot), saved_(std::move(slot)) {
    slot_ = std::move(next);
  }
  ~ScopeGuard() { slot_ = std::move(saved_); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  std::shared_ptr<Scope>& slot_;
  std::shared_ptr<Scope> saved_;
};

std::shared_ptr<Scope> child_of(const std::shared_ptr<Scope>& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

void unpack(Scope& scope, const std::vector<std::string>& targets, const Value& item) {
  if (targets.size() == 1) {
    scope.set(targets[0], item);
    return;
  }
  const std::vector<Value> parts = iterate(item);
  if (parts.size() < targets.size()) {
    raise("ValueError", "not enough values to unpack (expected " + std::to_string(targets.size()) +
                            ", got " + std::to_string(parts.size()) + ")");
  }
  if (parts.size() > targets.size()) {
    raise("ValueError", "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], parts[i]);
}

// Thrown while constant-folding a {{ }} expression that reads a variable or calls something.
struct NotConstant {};

}  // namespace

Value* Scope::find_local(std::string_view name) {
  for (auto& [k, v] : vars) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  if (Value* v = find_local(name)) {
    *v = std::move(value);
  } else {
    vars.emplace_back(name, std::move(value));
  }
}

Evaluator::Evaluator(std::shared_ptr<Scope> root, std::function<std::tm()> now,
                     const RenderLimits& limits)
    : scope_(std::move(root)), now_(std::move(now)), budget_(limits) {}

Evaluator::Frame::Frame(Evaluator& ev) : ev_(ev) {
  ev_.budget_.step();
  if (++ev_.frames_ > kMaxFrames) {
    --ev_.frames_;
    raise("RecursionError", "maximum recursion depth exceeded");
  }
}

Evaluator::~Evaluator() {
  for (const auto& weak : namespaces_) {
    if (auto ns = weak.lock()) ns->attrs.clear();
  }
}

void Evaluator::render(const Body& body, std::string& out) { exec(body, out); }

Value Evaluator::lookup(const std::string& name) const {
  for (Scope* s = scope_.get(); s; s = s->parent.get()) {
    if (Value* v = s->find_local(name)) return *v;
  }
  return Value::undefined("'" + name + "' is undefined");
}

Evaluator::Flow Evaluator::exec(const Body& body, std::string& out) {
  for (const auto& n : body) {
    const Flow f = exec_node(*n, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

// Text written to the render output, a macro's output or a captured block: all of them are
// bounded by the output size cap.
void Evaluator::append(std::string& out, std::string_view text) {
  budget_.grow(out.size() + text.size(), text.size());
  out += text;
}

Evaluator::Flow Evaluator::exec_node(const Node& n, std::string& out) {
  Frame frame(*this);
  using NK = Node::Kind;
  switch (n.kind) {
    case NK::Text: append(out, n.text); break;
    case NK::Output: {
      // jinja2 first tries to evaluate a {{ }} expression at compile time (as_const); when
      // that is impossible or raises, the run-time evaluation below decides.
      // Folding reads only literals, so a node that was not constant once never is.
      std::optional<Value> v;
      if (!not_constant_.contains(&n)) {
        folding_output_ = true;
        try {
          v = eval(*n.expr);
        } catch (const NotConstant&) {
          not_constant_.insert(&n);
        } catch (const TemplateError& e) {
          if (e.kind() == kLimitErrorKind) {
            folding_output_ = false;
            throw;
          }
        }
        folding_output_ = false;
      }
      if (!v) v = eval(*n.expr);
      append(out, v->to_str());
      break;
    }
    case NK::If: return exec(eval(*n.expr).truthy() ? n.body : n.else_body, out);
    case NK::For: return exec_for(n, out);
    case NK::Set:
    case NK::SetBlock: exec_set(n, out); break;
    case NK::Macro: scope_->set(n.name, make_macro(n)); break;
    case NK::Break: return Flow::Break;
    case NK::Continue: return Flow::Continue;
    case NK::FilterBlock: {
      std::string inner;
      exec(n.body, inner);
      append(out, eval_filter_chain(*n.expr, Value(std::move(inner))).to_str());
      break;
    }
    case NK::With: {
      auto scope = child_of(scope_);
      for (size_t i = 0; i < n.targets.size(); ++i) scope->set(n.targets[i], eval(*n.values[i]));
      ScopeGuard guard(scope_, scope);
      return exec(n.body, out);
    }
    case NK::Generation: return exec(n.body, out);
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_for(const Node& n, std::string& out) {
  const Value seq = eval(*n.expr);
  std::vector<Value> items = iterate(seq);
  if (n.cond) {
    std::vector<Value> kept;
    for (auto& item : items) {
      auto scope = child_of(scope_);
      unpack(*scope, n.targets, item);
      ScopeGuard guard(scope_, scope);
      if (eval(*n.cond).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  // jinja2 runs the else block unless some iteration reached the end of the body: a loop
  // whose every iteration hit break or continue runs it too.
  bool completed_an_iteration = false;
  auto last_changed = std::make_shared<std::optional<Value>>();  // loop.changed() state
  const auto length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    budget_.step();  // an iteration with an empty body is work too
    auto scope = child_of(scope_);
    Dict loop;
    loop.reserve(14);
    auto put = [&](const char* key, Value v) { loop.set(Value(key), std::move(v)); };
    put("index", Value(i + 1));
    put("index0", Value(i));
    put("revindex", Value(length - i));
    put("revindex0", Value(length - i - 1));
    put("first", Value(i == 0));
    put("last", Value(i == length - 1));
    put("length", Value(length));
    put("depth", Value(1));
    put("depth0", Value(0));
    put("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    put("nextitem", i + 1 < length ? items[i + 1] : Value::undefined("there is no next item"));
    put("cycle", Value::function("cycle", [i](Evaluator&, CallArgs& a) {
          if (a.positional.empty()) raise("TypeError", "no items for cycling given");
          return a.positional[static_cast<size_t>(i) % a.positional.size()];
        }));
    put("changed", Value::function("changed", [last_changed](Evaluator&, CallArgs& a) {
          Value args(a.positional, true);
          if (*last_changed && py_equal(**last_changed, args)) return Value(false);
          *last_changed = std::move(args);
          return Value(true);
        }));
    scope->set("loop", Value(std::move(loop)));
    unpack(*scope, n.targets, items[i]);
    ScopeGuard guard(scope_, scope);
    const Flow flow = exec(n.body, out);
    if (flow == Flow::Break) break;
    completed_an_iteration |= flow == Flow::Normal;
  }
  if (!completed_an_iteration && !n.else_body.empty()) {
    auto scope = child_of(scope_);
    ScopeGuard guard(scope_, scope);
    return exec(n.else_body, out);  // break/continue here belong to the enclosing loop
  }
  return Flow::Normal;
}

void Evaluator::exec_set(const Node& n, std::string& out) {
  (void)out;
  Value value;
  if (n.kind == Node::Kind::SetBlock) {
    std::string inner;
    exec(n.body, inner);
    value = n.expr ? eval_filter_chain(*n.expr, Value(std::move(inner))) : Value(std::move(inner));
  } else {
    value = eval(*n.expr);
  }
  if (!n.attr.empty()) {
    const Value target = lookup(n.targets[0]);
    if (!target.is_namespace()) {
      raise("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
    }
    target.ns().set(Value(n.attr), std::move(value));
    return;
  }
  unpack(*scope_, n.targets, value);
}

Value Evaluator::make_macro(const Node& n) {
  const Node* macro = &n;
  // Weak: the defining scope holds this macro, a strong capture would leak the cycle.
  std::weak_ptr<Scope> closure = scope_;
  return Value::function(n.name, [macro, closure](Evaluator& ev, CallArgs& args) {
    const std::string& name = macro->name;
    std::shared_ptr<Scope> parent = closure.lock();
    if (!parent) raise("TemplateRuntimeError", "macro '" + name + "' called outside its scope");
    if (args.positional.size() > macro->params.size()) {
      raise("TypeError", "macro '" + name + "' takes not more than " +
                             std::to_string(macro->params.size()) + " argument(s)");
    }
    auto scope = child_of(parent);
    std::vector<const Value*> given(macro->params.size(), nullptr);
    for (size_t i = 0; i < args.positional.size(); ++i) given[i] = &args.positional[i];
    for (const auto& [key, v] : args.keyword) {
      size_t idx = 0;
      while (idx < macro->params.size() && macro->params[idx] != key) ++idx;
      if (idx == macro->params.size()) {
        raise("TypeError", "macro '" + name + "' takes no keyword argument '" + key + "'");
      }
      given[idx] = &v;
    }
    ScopeGuard guard(ev.scope_, scope);
    for (size_t i = 0; i < macro->params.size(); ++i) {
      Value v = given[i] ? *given[i]
                : macro->values[i] ? ev.eval(*macro->values[i])
                : Value::undefined("parameter '" + macro->params[i] + "' was not provided");
      scope->set(macro->params[i], std::move(v));
    }
    if (++ev.depth_ > kMaxCallDepth) {
      --ev.depth_;
      raise("RecursionError", "maximum recursion depth exceeded");
    }
    std::string out;
    try {
      ev.exec(macro->body, out);
    } catch (...) {
      --ev.depth_;
      throw;
    }
    --ev.depth_;
    return Value(std::move(out));
  });
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) callee.fail_undefined();
  if (!callee.is_callable()) raise("TypeError", "'" + callee.type_name() + "' object is not callable");
  return callee.callable().fn(*this, args);
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
  return args;
}

Value Evaluator::eval_filter(const Expr& e, const Value& input) {
  CallArgs args = eval_args(e, 1);
  return apply_filter(*this, e.name, input, args);
}

// {% filter a | b %} and {% set x | a | b %}: a chain whose innermost input is the block body.
Value Evaluator::eval_filter_chain(const Expr& e, const Value& input) {
  const Value inner = e.args[0] ? eval_filter_chain(*e.args[0], input) : input;
  return eval_filter(e, inner);
}

Value Evaluator::eval_item(const Expr& e) {
  const Value obj = eval(*e.args[0]);
  if (obj.is_undefined()) obj.fail_undefined();
  const Expr& key = *e.args[1];
  if (key.kind == Expr::Kind::Slice) {
    auto part = [&](size_t i) { return key.args[i] ? eval(*key.args[i]) : Value(nullptr); };
    Value start = part(0);
    Value stop = part(1);
    Value step = part(2);
    if (!folding_output_) return get_slice(obj, start, stop, step);
    try {  // constant folding goes through jinja2's forgiving getitem
      return get_slice(obj, start, stop, step);
    } catch (const TemplateError& e) {
      if (e.kind() == kLimitErrorKind) throw;
      return Value::undefined(obj.object_type_repr() + " has no element slice(" + start.repr() + ", " +
                              stop.repr() + ", " + step.repr() + ")");
    }
  }
  return get_item(obj, eval(key));
}

Value Evaluator::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = py_equal(left, right);
    else if (op == "!=") ok = !py_equal(left, right);
    else if (op == "in") ok = contains(right, left);
    else if (op == "notin") ok = !contains(right, left);
    else ok = py_compare(left, right, op);
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Evaluator::eval(const Expr& e) {
  Frame frame(*this);
  using EK = Expr::Kind;
  switch (e.kind) {
    case EK::Literal: return e.literal;
    case EK::Name:
      if (folding_output_) throw NotConstant{};
      return lookup(e.name);
    case EK::List:
    case EK::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value(std::move(items), e.kind == EK::Tuple);
    }
    case EK::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value key = eval(*e.args[i]);
        d.set(std::move(key), eval(*e.args[i + 1]));
      }
      return Value(std::move(d));
    }
    case EK::Attr: {
      const Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) obj.fail_undefined();
      return get_attr(obj, e.name);
    }
    case EK::Item: return eval_item(e);
    case EK::Slice: raise("TypeError", "slice outside of a subscript");
    case EK::Call: {
      if (folding_output_) throw NotConstant{};
      const Value callee = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1);
      return call(callee, args);
    }
    case EK::Filter:
      if (folding_output_ && (e.name == "map" || e.name == "select" || e.name == "reject" ||
                              e.name == "selectattr" || e.name == "rejectattr")) {
        throw NotConstant{};  // context filters are never folded
      }
      return eval_filter(e, eval(*e.args[0]));
    case EK::Test: {
      const Value v = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1);
      return Value(apply_test(*this, e.name, v, args));
    }
    case EK::Unary: return unary_op(e.name, eval(*e.args[0]));
    case EK::Binary: {
      const Value left = eval(*e.args[0]);  // Python evaluates left to right
      return binary_op(e.name, left, eval(*e.args[1]));
    }
    case EK::Concat: {
      std::string s;
      for (const auto& a : e.args) append(s, eval(*a).to_str());
      return Value(std::move(s));
    }
    case EK::And: {
      Value a = eval(*e.args[0]);
      return a.truthy() ? eval(*e.args[1]) : a;
    }
    case EK::Or: {
      Value a = eval(*e.args[0]);
      return a.truthy() ? a : eval(*e.args[1]);
    }
    case EK::Not: return Value(!eval(*e.args[0]).truthy());
    case EK::Compare: return eval_compare(e);
    case EK::Cond: {
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Value();
}

std::vector<Value> bind(std::string_view fn, CallArgs& args, std::initializer_list<Param> params) {
  std::vector<Value> out;
  std::vector<bool> set(params.size(), false);
  out.resize(params.size());
  if (args.positional.size() > params.size()) {
    raise("TypeError", std::string(fn) + "() takes at most " + std::to_string(params.size()) +
                           " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i], set[i] = true;
  for (auto& [key, v] : args.keyword) {
    size_t i = 0;
    for (const auto& p : params) {
      if (key == p.name) break;
      ++i;
    }
    if (i == params.size()) {
      raise("TypeError", std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
    }
    out[i] = v;
    set[i] = true;
  }
  size_t i = 0;
  for (const auto& p : params) {
    if (!set[i]) {
      if (!p.fallback) {
        raise("TypeError", std::string(fn) + "() missing required argument '" + p.name + "'");
      }
      out[i] = *p.fallback;
    }
    ++i;
  }
  return out;
}

}  // namespace vllm::jinja
