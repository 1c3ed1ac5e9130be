// Renders a parsed Jinja template (ast.h) with Jinja2's semantics as transformers uses them:
// default Undefined (prints "", iterates empty, falsy), scoping of for loops and macros,
// namespace() objects, loop controls, and limits that stop runaway templates with an error.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/chat/jinja/ast.h"

namespace cypris::jinja {

struct RenderLimits {
  size_t max_output_bytes = 64u << 20;  // also the largest string a template may build
  size_t max_list_items = 1u << 20;     // largest list range()/ * / batch may build
  int64_t max_steps = 5'000'000;        // evaluated expressions, statements and loop iterations
  int max_call_depth = 64;              // nested macro calls
};

// The methods of str, dict and list values (x.strip(), d.items()). The interpreter knows them only
// through this table, which install_globals (globals.h) fills from methods.h, so the method library
// can use the interpreter without the interpreter depending on it.
struct ValueMethods {
  bool (*has)(const Value& self, std::string_view name) = nullptr;
  std::optional<Value> (*call)(Interpreter& interp, const Value& self, std::string_view name, CallArgs& args,
                               const SourcePos& pos) = nullptr;
};

class Interpreter {
 public:
  Interpreter(const Template& tmpl, RenderLimits limits = {});
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Variables and functions visible to the whole template (messages, bos_token, range, ...).
  void set_global(std::string name, Value value);
  void set_clock(std::function<std::tm()> clock) { clock_ = std::move(clock); }
  void set_methods(ValueMethods methods) { methods_ = methods; }

  // Renders once; throws cypris::Error ("chat template: line L, column C: ...").
  std::string render();

  // ---- used by filters, methods and globals ----
  Value call(const Value& callee, CallArgs& args, const SourcePos& pos);
  Value get_attr(const Value& obj, std::string_view name);
  Value get_item(const Value& obj, const Value& key, const SourcePos& pos);
  // Python iteration: list items, dict keys, string characters; undefined is empty.
  std::vector<Value> iterate(const Value& v, const SourcePos& pos);
  void check_string_size(size_t bytes, const SourcePos& pos) const;
  void check_list_size(size_t items, const SourcePos& pos) const;
  std::tm now() const;
  // Method `name` of `self` through the installed table; nullopt when there is no such method.
  bool has_method(const Value& self, std::string_view name) const { return methods_.has && methods_.has(self, name); }
  std::optional<Value> call_method(const Value& self, std::string_view name, CallArgs& args, const SourcePos& pos) {
    if (!methods_.call) return std::nullopt;
    return methods_.call(*this, self, name, args, pos);
  }
  // namespace() objects are the only mutable values, so the only way to build a reference cycle;
  // the interpreter breaks such cycles when it is destroyed.
  void track_namespace(const std::shared_ptr<DictData>& ns) { namespaces_.push_back(ns); }

 private:
  struct Scope {
    Scope* parent = nullptr;
    std::vector<std::pair<std::string, Value>> vars;
    const Value* find(std::string_view name) const;
    void set(const std::string& name, Value v);
  };
  enum class Flow { Normal, Break, Continue };
  friend class MacroCallable;

  Flow exec_body(const Body& body, Scope& scope);
  Flow exec(const Node& node, Scope& scope);
  void exec_for(const Node& node, Scope& scope, Flow& flow);
  void set_loop_variable(Scope& loop_scope, const std::vector<Value>& items, int64_t i);
  void exec_set(const Node& node, Scope& scope);
  void exec_call_block(const Node& node, Scope& scope);
  std::string render_body_to_string(const Body& body, Scope& scope);
  void emit(std::string_view text, const SourcePos& pos);

  Value eval(const Expr& e, Scope& scope);
  Value eval_call(const Expr& e, Scope& scope);
  Value eval_binary(const Expr& e, Scope& scope);
  Value eval_compare(const Expr& e, Scope& scope);
  Value eval_slice(const Expr& e, Scope& scope);
  void eval_args(const Expr& e, Scope& scope, CallArgs& args);
  Value apply_filter(const Expr& e, Value operand, Scope& scope);
  void assign_targets(const std::vector<std::string>& targets, Value value, Scope& scope, const SourcePos& pos);
  void tick(const SourcePos& pos);

  const Template& tmpl_;
  RenderLimits limits_;
  Scope root_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  std::function<std::tm()> clock_;
  ValueMethods methods_;
  std::vector<std::weak_ptr<DictData>> namespaces_;
};

// Python semantics of binary operators and `in`, shared with filters (e.g. sum).
Value binary_op(Interpreter& interp, std::string_view op, const Value& a, const Value& b, const SourcePos& pos);
bool contains(const Value& container, const Value& item, const SourcePos& pos);

}  // namespace cypris::jinja
