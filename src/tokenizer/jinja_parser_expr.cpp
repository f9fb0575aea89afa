#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_parser.h"

namespace vllm::jinja {

bool Parser::at_tuple_end(std::string_view extra) const {
  if (cur().kind == TokenKind::VarEnd || cur().kind == TokenKind::BlockEnd || is_op(")")) return true;
  return !extra.empty() && is_name(extra);
}

ExprPtr Parser::parse_tuple(bool with_condexpr, std::string_view extra_end, bool explicit_parens) {
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
  auto e = make_expr(K::Tuple, line);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  if (!with_condexpr) return parse_or();
  const int line = cur().line;
  ExprPtr expr = parse_or();
  while (skip_name("if")) {
    auto c = make_expr(K::Cond, line);
    ExprPtr test = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
    c->args.push_back(std::move(expr));
    c->args.push_back(std::move(test));
    c->args.push_back(std::move(otherwise));
    expr = std::move(c);
  }
  return expr;
}

ExprPtr Parser::binary(K kind, ExprPtr a, ExprPtr b, std::string name) {
  auto e = make_expr(kind, a->line);
  e->name = std::move(name);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (skip_name("or")) left = binary(K::Or, std::move(left), parse_and());
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (skip_name("and")) left = binary(K::And, std::move(left), parse_not());
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    auto e = make_expr(K::Not, cur().line);
    next();
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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
      cmp = make_expr(K::Compare, first->line);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().value;
    next();
    left = binary(K::Binary, std::move(left), parse_concat(), op);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make_expr(K::Concat, first->line);
  e->args.push_back(std::move(first));
  while (skip_op("~")) e->args.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().value;
    next();
    left = binary(K::Binary, std::move(left), parse_pow(), op);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (skip_op("**")) left = binary(K::Binary, std::move(left), parse_unary(true), "**");
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  NestingGuard guard(*this, cur().line);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make_expr(K::Unary, cur().line);
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

ExprPtr Parser::parse_primary() {
  const Token t = cur();
  switch (t.kind) {
    case TokenKind::Name: {
      next();
      auto e = make_expr(K::Literal, t.line);
      if (t.value == "true" || t.value == "True") e->literal = Value(true);
      else if (t.value == "false" || t.value == "False") e->literal = Value(false);
      else if (t.value == "none" || t.value == "None") e->literal = Value(nullptr);
      else e->kind = K::Name, e->name = t.value;
      if (macro_depth_ && (t.value == "varargs" || t.value == "kwargs" || t.value == "caller")) {
        unsupported("'" + t.value + "' in a macro", t.line);
      }
      return e;
    }
    case TokenKind::String: {
      std::string s;
      while (cur().kind == TokenKind::String) s += cur().value, next();
      auto e = make_expr(K::Literal, t.line);
      e->literal = Value(std::move(s));
      return e;
    }
    case TokenKind::Integer:
    case TokenKind::Float: {
      next();
      auto e = make_expr(K::Literal, t.line);
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

ExprPtr Parser::parse_collection(bool is_dict) {
  auto e = make_expr(is_dict ? K::Dict : K::List, cur().line);
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) node = parse_filters(std::move(node), false);
    else if (is_name("is")) node = parse_test(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const int line = cur().line;
  if (skip_op(".")) {
    if (cur().kind == TokenKind::Name) {
      auto e = make_expr(K::Attr, line);
      e->name = cur().value;
      next();
      e->args.push_back(std::move(node));
      return e;
    }
    if (cur().kind != TokenKind::Integer) fail_here("a name or number");
    auto key = make_expr(K::Literal, line);
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
    key = make_expr(K::Tuple, line);
    key->args = std::move(keys);
  }
  return binary(K::Item, std::move(node), std::move(key));
}

ExprPtr Parser::parse_subscribed() {
  const int line = cur().line;
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression(true);
    if (!is_op(":")) return start;
  }
  next();
  auto s = make_expr(K::Slice, line);
  s->args.push_back(std::move(start));
  s->args.push_back(is_op(":") || is_op("]") || is_op(",") ? nullptr : parse_expression(true));
  ExprPtr step;
  if (skip_op(":") && !is_op("]") && !is_op(",")) step = parse_expression(true);
  s->args.push_back(std::move(step));
  return s;
}

void Parser::parse_call_args(Expr& e) {
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

ExprPtr Parser::parse_call(ExprPtr callee) {
  if (callee->kind == K::Name && (callee->name == "cycler" || callee->name == "joiner" || callee->name == "lipsum")) {
    unsupported("global '" + callee->name + "'", callee->line);
  }
  auto e = make_expr(K::Call, cur().line);
  e->args.push_back(std::move(callee));
  parse_call_args(*e);
  return e;
}

ExprPtr Parser::parse_filters(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    auto e = make_expr(K::Filter, cur().line);
    e->name = expect_name();
    if (is_op(".")) unsupported("'dotted filter name'", e->line);
    if (!is_known_filter(e->name)) unsupported("filter '" + e->name + "'", e->line);
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    node = std::move(e);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const int line = cur().line;
  next();  // "is"
  const bool negated = skip_name("not");
  auto e = make_expr(K::Test, line);
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
  auto n = make_expr(K::Not, line);
  n->args.push_back(std::move(e));
  return n;
}

}  // namespace vllm::jinja
