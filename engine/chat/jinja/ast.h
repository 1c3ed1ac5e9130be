// Syntax tree of a parsed Jinja template: expressions (Expr) and statements (Node). The tree is
// immutable after parsing, so one parsed template can be rendered by many threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/chat/jinja/value.h"

namespace cypris::jinja {

struct Expr;
struct Node;
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// A filter or test function; see filters.h.
using FilterFn = Value (*)(Interpreter&, const Value& operand, CallArgs& args, const SourcePos& pos);
using TestFn = bool (*)(Interpreter&, const Value& operand, CallArgs& args, const SourcePos& pos);

enum class ExprKind {
  Literal,    // value
  Name,       // name
  List,       // items
  Tuple,      // items
  Dict,       // keys[i]: items[i]
  Attr,       // object.name
  Item,       // object[args[0]]
  Slice,      // object[args[0]:args[1]:args[2]] (null parts omitted)
  Call,       // object(args, kwargs)
  Filter,     // object | name(args, kwargs); object null inside {% filter %}
  Test,       // object is [not] name(args)
  Unary,      // op object  ("not", "-", "+")
  Binary,     // object op args[0]  (+ - * / // % ** ~ and or)
  Compare,    // object ops[0] args[0] ops[1] args[1] ...
  Condition,  // args[0] if object else args[1] (args[1] may be null)
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  Value value;                       // Literal
  std::string name;                  // Name, Attr, Filter, Test; operator for Unary / Binary
  ExprPtr object;                    // operand / callee / condition
  std::vector<ExprPtr> args;         // items, arguments, operands (entries may be null for slices)
  std::vector<ExprPtr> keys;         // Dict keys
  std::vector<std::string> kwnames;  // Call / Filter keyword names; Compare operators
  std::vector<ExprPtr> kwargs;
  bool negated = false;  // Test: `is not`
  FilterFn filter = nullptr;
  TestFn test = nullptr;

  Expr(ExprKind k, SourcePos p) : kind(k), pos(p) {}
};

enum class NodeKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // conditions[i] -> bodies[i]; else_body
  For,          // for targets in expr [if cond]: body; else_body
  Set,          // set targets = expr  /  set targets[0].attr = expr
  SetBlock,     // set targets[0] %}body{% endset  (filters: optional filter chain over the body)
  Macro,        // macro name(params = defaults): body
  CallBlock,    // call(params) expr: body  (expr calls a macro with `caller`)
  FilterBlock,  // filter chain: body
  With,         // with targets = values: body
  Break,
  Continue,
  Do,          // do expr
  Generation,  // transformers' {% generation %}: renders its body
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Node {
  NodeKind kind;
  SourcePos pos;
  std::string text;                 // Text; Macro name; Set attribute name
  ExprPtr expr;                     // Output / For iterable / Set value / CallBlock call / Do / FilterBlock chain
  ExprPtr cond;                     // For filter condition
  std::vector<ExprPtr> conditions;  // If
  std::vector<Body> bodies;         // If branches
  Body body;
  Body else_body;
  std::vector<std::string> targets;  // For / Set / With names
  std::vector<ExprPtr> values;       // With values
  std::vector<MacroParam> params;    // Macro / CallBlock
  bool attribute_target = false;     // Set: `set ns.attr = ...`
  bool uses_loop = true;             // For: whether the body mentions `loop` (else it is not built)

  Node(NodeKind k, SourcePos p) : kind(k), pos(p) {}
};

struct Template {
  Body body;
};

}  // namespace cypris::jinja
