#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_parser.h"

namespace vllm::jinja {

std::unique_ptr<Template> Parser::run() {
  auto t = std::make_unique<Template>();
  std::string end = parse_body(t->body, {});
  if (!end.empty()) unsupported("'unexpected " + end + "'", cur().line);
  return t;
}

void Parser::fail_here(const std::string& expected) const {
  const Token& t = cur();
  std::string got = t.kind == TokenKind::Eof ? "end of template"
                    : t.kind == TokenKind::BlockEnd ? "end of statement block"
                    : t.kind == TokenKind::VarEnd ? "end of print statement"
                    : "'" + t.value + "'";
  unsupported("'expected " + expected + ", got " + got + "'", t.line);
}

std::string Parser::expect_name() {
  if (cur().kind != TokenKind::Name) fail_here("a name");
  std::string v = cur().value;
  next();
  return v;
}

void Parser::expect_block_end() {
  if (cur().kind != TokenKind::BlockEnd) fail_here("end of statement block");
  next();
}

// Parses nodes until a block tag whose name is in `ends`; returns that name (the tag name is
// consumed, the rest of the tag is not) or "" at end of input.
std::string Parser::parse_body(Body& body, std::initializer_list<std::string_view> ends) {
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

NodePtr Parser::parse_statement() {
  const int line = cur().line;
  NestingGuard guard(*this, line);
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

NodePtr Parser::parse_if(int line) {
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

std::vector<std::string> Parser::parse_targets(std::string_view end_name) {
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

NodePtr Parser::parse_for(int line) {
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

NodePtr Parser::parse_set(int line) {
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

NodePtr Parser::parse_macro(int line) {
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
  ++macro_depth_;
  parse_body(n->body, {"endmacro"});
  --macro_depth_;
  expect_block_end();
  return n;
}

std::unique_ptr<Template> parse_template(std::string_view source) {
  return Parser(tokenize(source)).run();
}

}  // namespace vllm::jinja
