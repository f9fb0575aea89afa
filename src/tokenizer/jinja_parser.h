// Recursive-descent parser over the lexer's tokens, following jinja2's parser.py grammar and
// operator precedence. Statements live in jinja_parser.cpp, expressions in jinja_parser_expr.cpp.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_lexer.h"

namespace vllm::jinja {

inline ExprPtr make_expr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}
  std::unique_ptr<Template> run();

 private:
  using K = Expr::Kind;

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void next() { if (pos_ + 1 < toks_.size()) ++pos_; }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::Operator && cur().value == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::Name && cur().value == n; }
  bool skip_op(std::string_view op) { return is_op(op) ? (next(), true) : false; }
  bool skip_name(std::string_view n) { return is_name(n) ? (next(), true) : false; }
  void expect_op(std::string_view op) {
    if (skip_op(op)) return;
    std::string quoted(1, '\'');  // appended piecewise: GCC 12 misreports "'" + op + "'"
    quoted.append(op).push_back('\'');
    fail_here(quoted);
  }
  static NodePtr node(Node::Kind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
  }

  // statements (jinja_parser.cpp)
  [[noreturn]] void fail_here(const std::string& expected) const;
  std::string expect_name();
  void expect_block_end();
  // Parses nodes until a block tag whose name is in `ends`; returns that name (the tag name is
  // consumed, the rest of the tag is not) or "" at end of input.
  std::string parse_body(Body& body, std::initializer_list<std::string_view> ends);
  NodePtr parse_statement();
  NodePtr parse_if(int line);
  std::vector<std::string> parse_targets(std::string_view end_name);
  NodePtr parse_for(int line);
  NodePtr parse_set(int line);
  NodePtr parse_macro(int line);

  // expressions (jinja_parser_expr.cpp)
  bool at_tuple_end(std::string_view extra) const;
  ExprPtr parse_tuple(bool with_condexpr, std::string_view extra_end = "", bool explicit_parens = false);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr binary(K kind, ExprPtr a, ExprPtr b, std::string name = "");
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_collection(bool is_dict);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filters(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  // Bounds parser (and so evaluator) recursion: hostile input must not exhaust the C++ stack.
  class NestingGuard {
   public:
    NestingGuard(Parser& p, int line) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) unsupported("'nesting deeper than 200 levels'", line);
    }
    ~NestingGuard() { --p_.nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

   private:
    Parser& p_;
  };
  static constexpr int kMaxNesting = 200;

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int macro_depth_ = 0;  // > 0 while parsing a macro body
};

}  // namespace vllm::jinja
