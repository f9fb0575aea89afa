// Parsed template tree: expressions (Expr) and statements (Node), both owned by a Template that
// outlives every render. Each kind documents which fields it uses.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace vllm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // literal
    Name,      // name
    List,      // args = items
    Tuple,     // args = items
    Dict,      // args = k0, v0, k1, v1, ...
    Attr,      // args[0] . name
    Item,      // args[0] [ args[1] ]
    Slice,     // args = start, stop, step (each may be null); only as an Item key
    Call,      // args[0] ( args[1..], kwargs )
    Filter,    // args[0] | name ( args[1..], kwargs ); args[0] null in {% filter %} blocks
    Test,      // args[0] is name ( args[1..], kwargs )
    Unary,     // name ("-" or "+") args[0]
    Binary,    // args[0] name args[1], name in + - * / // % **
    Concat,    // args joined with ~
    And,       // args[0] and args[1]
    Or,        // args[0] or args[1]
    Not,       // not args[0]
    Compare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    Cond,      // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::string> ops;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // if expr: body else else_body (elif = nested If in else_body)
    For,          // for targets in expr [if cond]: body, else_body
    Set,          // set targets = expr, or set targets[0].attr = expr when attr is non-empty
    SetBlock,     // set targets[0] (| expr filter) : body rendered to a string
    Macro,        // macro name(params = defaults): body
    Break,
    Continue,
    FilterBlock,  // filter expr: body
    With,         // with targets[i] = values[i]: body in a new scope
    Generation,   // HF's {% generation %}: body rendered in place
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> values;   // Macro: defaults aligned with params (null = none); With values
};

struct Template {
  Body body;
};

// Throws vllm::Error "unsupported construct X at line N" for bad syntax and for tags, filters
// and tests this interpreter does not implement.
std::unique_ptr<Template> parse_template(std::string_view source);

}  // namespace vllm::jinja
