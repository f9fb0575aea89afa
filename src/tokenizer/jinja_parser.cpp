// Recursive-descent parser following jinja2's parser.py precedence and statement grammar.
#include <initializer_list>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_lexer.h"

namespace vllm::jinja {
namespace {

using K = Expr::Kind;

ExprPtr make(K kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  std::unique_ptr<Template> run() {
    auto t = std::make_unique<Template>();
    std::string end = parse_body(t->body, {});
    if (!end.empty()) unsupported("'unexpected " + end + "'", cur().line);
    return t;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void next() { if (pos_ + 1 < toks_.size()) ++pos_; }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::Operator && cur().value == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::Name && cur().value == n; }
  bool skip_op(std::string_view op) { return is_op(op) ? (next(), true) : false; }
  bool skip_name(std::string_view n) { return is_name(n) ? (next(), true) : false; }

  [[noreturn]] void fail_here(const std::string& expected) const {
    const Token& t = cur();
    std::string got = t.kind == TokenKind::Eof ? "end of template"
                      : t.kind == TokenKind::BlockEnd ? "end of statement block"
                      : t.kind == TokenKind::VarEnd ? "end of print statement"
                      : "'" + t.value + "'";
    unsupported("'expected " + expected + ", got " + got + "'", t.line);
  }
  void expect_op(std::string_view op) { if (!skip_op(op)) fail_here("'" + std::string(op) + "'"); }
  std::string expect_name() {
    if (cur().kind != TokenKind::Name) fail_here("a name");
    std::string v = cur().value;
    next();
    return v;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::BlockEnd) fail_here("end of statement block");
    next();
  }

  // Parses nodes until a block tag whose name is in `ends`; returns that name (the tag name is
  // consumed, the rest of the tag is not) or "" at end of input.
  std::string parse_body(Body& body, std::initializer_list<std::string_view> ends) {
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::Eof:
          if (ends.size()) unsupported("'unexpected end of template, expected " + std::string(*ends.begin()) + "'", t.line);
          return "";
        case TokenKind::Data: {
          auto n = node(Node::Kind::Text, t.line);
          n->text = t.value;
          body.push_back(std::move(n));
          next();
          break;
        }
        case TokenKind::VarBegin: {
          next();
          auto n = node(Node::Kind::Output, t.line);
          n->expr = parse_tuple(true);
          if (cur().kind != TokenKind::VarEnd) fail_here("end of print statement");
          next();
          body.push_back(std::move(n));
          break;
        }
        case TokenKind::BlockBegin: {
          next();
          if (cur().kind != TokenKind::Name) fail_here("a tag name");
          const std::string tag = cur().value;
          for (auto e : ends) {
            if (tag == e) {
              next();
              return tag;
            }
          }
          body.push_back(parse_statement());
          break;
        }
        default: fail_here("template data");
      }
    }
  }

  static NodePtr node(Node::Kind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
  }

  NodePtr parse_statement() {
    const int line = cur().line;
    const std::string tag = expect_name();
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "break" || tag == "continue") {
      expect_block_end();
      return node(tag == "break" ? Node::Kind::Break : Node::Kind::Continue, line);
    }
    if (tag == "filter") {
      auto n = node(Node::Kind::FilterBlock, line);
      n->expr = parse_filters(nullptr, true);
      expect_block_end();
      parse_body(n->body, {"endfilter"});
      expect_block_end();
      return n;
    }
    if (tag == "with") {
      auto n = node(Node::Kind::With, line);
      while (cur().kind != TokenKind::BlockEnd) {
        if (!n->targets.empty()) expect_op(",");
        n->targets.push_back(expect_name());
        expect_op("=");
        n->values.push_back(parse_expression(true));
      }
      expect_block_end();
      parse_body(n->body, {"endwith"});
      expect_block_end();
      return n;
    }
    if (tag == "generation") {
      auto n = node(Node::Kind::Generation, line);
      expect_block_end();
      parse_body(n->body, {"endgeneration"});
      expect_block_end();
      return n;
    }
    unsupported("tag '" + tag + "'", line);
  }

  NodePtr parse_if(int line) {
    auto n = node(Node::Kind::If, line);
    n->expr = parse_tuple(false);
    expect_block_end();
    const std::string end = parse_body(n->body, {"elif", "else", "endif"});
    if (end == "elif") {
      n->else_body.push_back(parse_if(cur().line));
      return n;
    }
    if (end == "else") {
      expect_block_end();
      parse_body(n->else_body, {"endif"});
    }
    expect_block_end();
    return n;
  }

  std::vector<std::string> parse_targets(std::string_view end_name) {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    while (true) {
      names.push_back(expect_name());
      if (!skip_op(",")) break;
      if (is_name(end_name) || is_op(")") || is_op("=")) break;
    }
    if (paren) expect_op(")");
    return names;
  }

  NodePtr parse_for(int line) {
    auto n = node(Node::Kind::For, line);
    n->targets = parse_targets("in");
    if (!skip_name("in")) fail_here("'in'");
    n->expr = parse_tuple(false, "recursive");
    if (skip_name("if")) n->cond = parse_expression(true);
    if (is_name("recursive")) unsupported("'recursive for loop'", line);
    expect_block_end();
    const std::string end = parse_body(n->body, {"endfor", "else"});
    if (end == "else") {
      expect_block_end();
      parse_body(n->else_body, {"endfor"});
    }
    expect_block_end();
    return n;
  }

  NodePtr parse_set(int line) {
    auto n = node(Node::Kind::Set, line);
    if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().value == ".") {
      n->targets.push_back(expect_name());
      next();
      n->attr = expect_name();
    } else {
      n->targets = parse_targets("");
    }
    if (skip_op("=")) {
      n->expr = parse_tuple(true);
      expect_block_end();
      return n;
    }
    if (n->targets.size() != 1 || !n->attr.empty()) unsupported("'block set with this target'", line);
    n->kind = Node::Kind::SetBlock;
    if (is_op("|")) n->expr = parse_filters(nullptr, false);
    expect_block_end();
    parse_body(n->body, {"endset"});
    expect_block_end();
    return n;
  }

  NodePtr parse_macro(int line) {
    auto n = node(Node::Kind::Macro, line);
    n->name = expect_name();
    expect_op("(");
    while (!skip_op(")")) {
      if (!n->params.empty()) expect_op(",");
      if (skip_op(")")) break;
      n->params.push_back(expect_name());
      n->values.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    expect_block_end();
    parse_body(n->body, {"endmacro"});
    if (cur().kind == TokenKind::Name) next();  // {% endmacro name %} is not jinja2, tolerate
    expect_block_end();
    return n;
  }

  // ---- expressions ----

  bool at_tuple_end(std::string_view extra) const {
    if (cur().kind == TokenKind::VarEnd || cur().kind == TokenKind::BlockEnd || is_op(")")) return true;
    return !extra.empty() && is_name(extra);
  }

  ExprPtr parse_tuple(bool with_condexpr, std::string_view extra_end = "", bool explicit_parens = false) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_here("an expression");
    }
    auto e = make(K::Tuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    if (!with_condexpr) return parse_or();
    const int line = cur().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto c = make(K::Cond, line);
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
      c->args.push_back(std::move(expr));
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(otherwise));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(K kind, ExprPtr a, ExprPtr b, std::string name = "") {
    auto e = make(kind, a->line);
    e->name = std::move(name);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(K::Or, std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(K::And, std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = make(K::Not, cur().line);
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::Operator &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        op = cur().value;
        next();
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().kind == TokenKind::Name && peek().value == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(K::Compare, first->line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().value;
      next();
      left = binary(K::Binary, std::move(left), parse_concat(), op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(K::Concat, first->line);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().value;
      next();
      left = binary(K::Binary, std::move(left), parse_pow(), op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary(K::Binary, std::move(left), parse_unary(true), "**");
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(K::Unary, cur().line);
      node->name = cur().value;
      next();
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token t = cur();
    switch (t.kind) {
      case TokenKind::Name: {
        next();
        auto e = make(K::Literal, t.line);
        if (t.value == "true" || t.value == "True") e->literal = Value(true);
        else if (t.value == "false" || t.value == "False") e->literal = Value(false);
        else if (t.value == "none" || t.value == "None") e->literal = Value(nullptr);
        else e->kind = K::Name, e->name = t.value;
        return e;
      }
      case TokenKind::String: {
        std::string s;
        while (cur().kind == TokenKind::String) s += cur().value, next();
        auto e = make(K::Literal, t.line);
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenKind::Integer:
      case TokenKind::Float: {
        next();
        auto e = make(K::Literal, t.line);
        e->literal = t.kind == TokenKind::Integer ? Value(t.int_value) : Value(t.float_value);
        return e;
      }
      case TokenKind::Operator:
        if (t.value == "(") {
          next();
          ExprPtr e = parse_tuple(true, "", true);
          expect_op(")");
          return e;
        }
        if (t.value == "[" || t.value == "{") return parse_collection(t.value == "{");
        [[fallthrough]];
      default: fail_here("an expression");
    }
  }

  ExprPtr parse_collection(bool is_dict) {
    auto e = make(is_dict ? K::Dict : K::List, cur().line);
    next();
    const char* close = is_dict ? "}" : "]";
    while (!is_op(close)) {
      if (!e->args.empty()) expect_op(",");
      if (is_op(close)) break;
      e->args.push_back(parse_expression(true));
      if (is_dict) {
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
    }
    expect_op(close);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filters(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const int line = cur().line;
    if (skip_op(".")) {
      if (cur().kind == TokenKind::Name) {
        auto e = make(K::Attr, line);
        e->name = cur().value;
        next();
        e->args.push_back(std::move(node));
        return e;
      }
      if (cur().kind != TokenKind::Integer) fail_here("a name or number");
      auto key = make(K::Literal, line);
      key->literal = Value(cur().int_value);
      next();
      return binary(K::Item, std::move(node), std::move(key));
    }
    expect_op("[");
    std::vector<ExprPtr> keys;
    while (!is_op("]")) {
      if (!keys.empty()) expect_op(",");
      keys.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr key;
    if (keys.size() == 1) {
      key = std::move(keys[0]);
    } else {
      key = make(K::Tuple, line);
      key->args = std::move(keys);
    }
    return binary(K::Item, std::move(node), std::move(key));
  }

  ExprPtr parse_subscribed() {
    const int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();
    auto s = make(K::Slice, line);
    s->args.push_back(std::move(start));
    s->args.push_back(is_op(":") || is_op("]") || is_op(",") ? nullptr : parse_expression(true));
    ExprPtr step;
    if (skip_op(":") && !is_op("]") && !is_op(",")) step = parse_expression(true);
    s->args.push_back(std::move(step));
    return s;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) unsupported("'*args / **kwargs in a call'", cur().line);
      if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) unsupported("'positional argument after keyword argument'", cur().line);
        e.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(K::Call, cur().line);
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filters(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto e = make(K::Filter, cur().line);
      e->name = expect_name();
      if (is_op(".")) unsupported("'dotted filter name'", e->line);
      if (!is_known_filter(e->name)) unsupported("filter '" + e->name + "'", e->line);
      e->args.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = cur().line;
    next();  // "is"
    const bool negated = skip_name("not");
    auto e = make(K::Test, line);
    e->name = expect_name();
    if (!is_known_test(e->name)) unsupported("test '" + e->name + "'", line);
    e->args.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().kind == TokenKind::Name || cur().kind == TokenKind::String ||
                cur().kind == TokenKind::Integer || cur().kind == TokenKind::Float ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      // As in jinja2, any other name here is the test's argument, even `not`.
      if (is_name("is")) unsupported("'chained tests with is'", line);
      e->args.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = make(K::Not, line);
    n->args.push_back(std::move(e));
    return n;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
};

}  // namespace

std::unique_ptr<Template> parse_template(std::string_view source) {
  return Parser(tokenize(source)).run();
}

}  // namespace vllm::jinja
