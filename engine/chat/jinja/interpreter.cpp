// Statement execution and expression evaluation for the Jinja interpreter (see interpreter.h).
// Scoping follows Jinja2: a for loop and a macro body get their own scope (a `set` inside them
// is not visible outside), `if` does not; namespace() objects are shared by reference.
#include "engine/chat/jinja/interpreter.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <memory>

#include "engine/chat/jinja/lexer.h"

namespace cypris::jinja {
namespace {

constexpr int kMaxEvalDepth = 1500;  // nested evaluation frames (C++ stack guard)

// A method looked up without calling it (`x.items`), called later.
class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  Value call(Interpreter& interp, CallArgs& args, const SourcePos& pos) override {
    auto r = interp.call_method(self_, name_, args, pos);
    if (!r) throw_template_error(pos, fmt::format("'{}' object has no attribute '{}'", self_.type_name(), name_));
    return std::move(*r);
  }

 private:
  Value self_;
  std::string name_;
};

// loop.cycle(a, b, ...): the argument at loop.index0 modulo the count.
class LoopCycle : public Callable {
 public:
  explicit LoopCycle(int64_t index0) : index0_(index0) {}
  std::string name() const override { return "cycle"; }
  Value call(Interpreter&, CallArgs& args, const SourcePos& pos) override {
    if (args.positional.empty()) throw_template_error(pos, "loop.cycle() needs at least one argument");
    return args.positional[static_cast<size_t>(index0_) % args.positional.size()];
  }

 private:
  int64_t index0_;
};

struct DepthGuard {
  int& depth;
  DepthGuard(int& d, int limit, const SourcePos& pos, const char* what) : depth(d) {
    if (++depth > limit) {
      --depth;
      throw_template_error(
          pos, fmt::format("{} nested too deeply (limit {}); the template may recurse forever", what, limit));
    }
  }
  ~DepthGuard() { --depth; }
};

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

// A {% macro %}: called like a function, renders its body to a string.
class MacroCallable : public Callable {
 public:
  MacroCallable(const Node& node, const Node* caller_of = nullptr, Interpreter::Scope* caller_scope = nullptr)
      : node_(node), caller_scope_(caller_scope) {
    (void)caller_of;
  }
  std::string name() const override { return node_.kind == NodeKind::Macro ? node_.text : "caller"; }

  Value call(Interpreter& interp, CallArgs& args, const SourcePos& pos) override {
    if (node_.kind == NodeKind::CallBlock && !alive_)
      throw_template_error(pos, "caller() used after its {% call %} block ended");
    DepthGuard guard(interp.call_depth_, interp.limits_.max_call_depth, pos, "macro calls");
    Interpreter::Scope scope;
    scope.parent = caller_scope_ ? caller_scope_ : &interp.root_;
    const auto& params = node_.params;
    std::vector<bool> bound(params.size(), false);
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        scope.set(params[i].name, args.positional[i]);
        bound[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    Value kwargs = Value::dict();
    for (auto& [k, v] : args.keyword) {
      bool found = false;
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].name != k) continue;
        if (bound[i])
          throw_template_error(pos, fmt::format("macro '{}' got multiple values for argument '{}'", name(), k));
        scope.set(k, v);
        bound[i] = found = true;
        break;
      }
      if (!found && k == "caller") {
        scope.set(k, v);
      } else if (!found) {
        kwargs.as_dict().set(k, v);
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) continue;
      scope.set(params[i].name, params[i].default_value
                                    ? interp.eval(*params[i].default_value, scope)
                                    : Value::undefined(fmt::format("'{}' is undefined", params[i].name)));
    }
    scope.set("varargs", Value::list(std::move(varargs), /*is_tuple=*/true));
    scope.set("kwargs", kwargs);
    return Value(interp.render_body_to_string(node_.body, scope));
  }

  void expire() { alive_ = false; }

 private:
  const Node& node_;
  Interpreter::Scope* caller_scope_;
  bool alive_ = true;
};

const Value* Interpreter::Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent)
    for (const auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Interpreter::Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

Interpreter::Interpreter(const Template& tmpl, RenderLimits limits) : tmpl_(tmpl), limits_(limits) {}

Interpreter::~Interpreter() {
  for (auto& weak : namespaces_)
    if (auto ns = weak.lock()) ns->items.clear();
}

void Interpreter::set_global(std::string name, Value value) {
  root_.set(name, std::move(value));
}

std::tm Interpreter::now() const {
  if (clock_) return clock_();
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

std::string Interpreter::render() {
  std::string out;
  out_ = &out;
  steps_ = 0;
  exec_body(tmpl_.body, root_);
  out_ = nullptr;
  return out;
}

void Interpreter::tick(const SourcePos& pos) {
  if (++steps_ > limits_.max_steps)
    throw_template_error(pos,
                         fmt::format("template exceeded {} evaluation steps; it may loop forever", limits_.max_steps));
}

void Interpreter::check_string_size(size_t bytes, const SourcePos& pos) const {
  if (bytes > limits_.max_output_bytes)
    throw_template_error(pos, fmt::format("template output or string exceeds {} bytes", limits_.max_output_bytes));
}

void Interpreter::check_list_size(size_t items, const SourcePos& pos) const {
  if (items > limits_.max_list_items)
    throw_template_error(pos, fmt::format("list of {} items exceeds the limit of {}", items, limits_.max_list_items));
}

void Interpreter::emit(std::string_view text, const SourcePos& pos) {
  check_string_size(out_->size() + text.size(), pos);
  out_->append(text);
}

std::string Interpreter::render_body_to_string(const Body& body, Scope& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

// ---------------------------------------------------------------- statements

Interpreter::Flow Interpreter::exec_body(const Body& body, Scope& scope) {
  for (const auto& node : body) {
    Flow f = exec(*node, scope);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Node& node, Scope& scope) {
  tick(node.pos);
  DepthGuard guard(eval_depth_, kMaxEvalDepth, node.pos, "statements");
  switch (node.kind) {
    case NodeKind::Text:
      emit(node.text, node.pos);
      break;
    case NodeKind::Output: {
      Value v = eval(*node.expr, scope);
      if (v.is_string()) {
        emit(v.as_string(), node.pos);
      } else {
        emit(v.str(), node.pos);
      }
      break;
    }
    case NodeKind::If:
      for (size_t i = 0; i < node.conditions.size(); ++i)
        if (eval(*node.conditions[i], scope).truthy()) return exec_body(node.bodies[i], scope);
      return exec_body(node.else_body, scope);
    case NodeKind::For: {
      Flow flow = Flow::Normal;
      exec_for(node, scope, flow);
      return flow;
    }
    case NodeKind::Set:
      exec_set(node, scope);
      break;
    case NodeKind::SetBlock: {
      Value v(render_body_to_string(node.body, scope));
      if (node.expr) v = apply_filter(*node.expr, std::move(v), scope);
      scope.set(node.targets[0], std::move(v));
      break;
    }
    case NodeKind::Macro:
      scope.set(node.text, Value::callable(std::make_shared<MacroCallable>(node)));
      break;
    case NodeKind::CallBlock:
      exec_call_block(node, scope);
      break;
    case NodeKind::FilterBlock: {
      Value v = apply_filter(*node.expr, Value(render_body_to_string(node.body, scope)), scope);
      emit(v.str(), node.pos);
      break;
    }
    case NodeKind::With: {
      Scope inner;
      inner.parent = &scope;
      for (size_t i = 0; i < node.targets.size(); ++i) inner.set(node.targets[i], eval(*node.values[i], scope));
      return exec_body(node.body, inner);
    }
    case NodeKind::Break:
      return Flow::Break;
    case NodeKind::Continue:
      return Flow::Continue;
    case NodeKind::Do:
      eval(*node.expr, scope);
      break;
    case NodeKind::Generation:
      return exec_body(node.body, scope);
  }
  return Flow::Normal;
}

void Interpreter::assign_targets(const std::vector<std::string>& targets, Value value, Scope& scope,
                                 const SourcePos& pos) {
  if (targets.size() == 1) {
    scope.set(targets[0], std::move(value));
    return;
  }
  std::vector<Value> items = iterate(value, pos);
  if (items.size() != targets.size())
    throw_template_error(pos, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], std::move(items[i]));
}

void Interpreter::exec_for(const Node& node, Scope& scope, Flow& flow) {
  Value iterable = eval(*node.expr, scope);
  if (iterable.is_none() || iterable.is_number() || iterable.is_callable() || iterable.is_namespace())
    throw_template_error(node.expr->pos, fmt::format("'{}' object is not iterable", iterable.type_name()));
  std::vector<Value> items = iterate(iterable, node.expr->pos);
  Scope loop_scope;
  loop_scope.parent = &scope;
  if (node.cond) {
    std::vector<Value> kept;
    for (auto& item : items) {
      tick(node.pos);
      assign_targets(node.targets, item, loop_scope, node.pos);
      if (eval(*node.cond, loop_scope).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
    loop_scope.vars.clear();
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    // Jinja runs each iteration in a fresh scope: a `set` in one iteration is gone in the next.
    loop_scope.vars.clear();
    tick(node.pos);  // an empty body must still count, or nested loops could run unbounded
    if (node.uses_loop) set_loop_variable(loop_scope, items, i);
    assign_targets(node.targets, items[i], loop_scope, node.pos);
    Flow f = exec_body(node.body, loop_scope);
    if (f == Flow::Break) break;
  }
  if (n == 0) flow = exec_body(node.else_body, scope);
}

void Interpreter::set_loop_variable(Scope& loop_scope, const std::vector<Value>& items, int64_t i) {
  const int64_t n = static_cast<int64_t>(items.size());
  {
    auto loop = std::make_shared<DictData>();
    loop->items.reserve(12);
    loop->items.emplace_back("index", Value(i + 1));
    loop->items.emplace_back("index0", Value(i));
    loop->items.emplace_back("revindex", Value(n - i));
    loop->items.emplace_back("revindex0", Value(n - i - 1));
    loop->items.emplace_back("first", Value(i == 0));
    loop->items.emplace_back("last", Value(i == n - 1));
    loop->items.emplace_back("length", Value(n));
    loop->items.emplace_back("depth", Value(1));
    loop->items.emplace_back("depth0", Value(0));
    if (i > 0) loop->items.emplace_back("previtem", items[i - 1]);
    if (i + 1 < n) loop->items.emplace_back("nextitem", items[i + 1]);
    loop->items.emplace_back("cycle", Value::callable(std::make_shared<LoopCycle>(i)));
    if (i > 0) loop->depth = std::max(loop->depth, 1 + items[i - 1].depth());
    if (i + 1 < n) loop->depth = std::max(loop->depth, 1 + items[i + 1].depth());
    loop_scope.set("loop", Value::namespace_(std::move(loop)));
  }
}

void Interpreter::exec_set(const Node& node, Scope& scope) {
  Value v = eval(*node.expr, scope);
  if (!node.attribute_target) {
    assign_targets(node.targets, std::move(v), scope, node.pos);
    return;
  }
  const Value* target = scope.find(node.targets[0]);
  if (!target || !target->is_namespace())
    throw_template_error(node.pos, fmt::format("cannot assign attribute '{}' on '{}': it is not a namespace()",
                                               node.text, node.targets[0]));
  target->as_dict().set(node.text, std::move(v));
}

void Interpreter::exec_call_block(const Node& node, Scope& scope) {
  auto caller = std::make_shared<MacroCallable>(node, &node, &scope);
  const Expr& call = *node.expr;
  Value callee = eval(*call.object, scope);
  CallArgs args;
  eval_args(call, scope, args);
  args.keyword.emplace_back("caller", Value::callable(caller));
  Value result;
  try {
    result = this->call(callee, args, call.pos);
  } catch (...) {
    caller->expire();
    throw;
  }
  caller->expire();
  emit(result.str(), node.pos);
}

// ---------------------------------------------------------------- expressions

Value Interpreter::eval(const Expr& e, Scope& scope) {
  tick(e.pos);
  DepthGuard guard(eval_depth_, kMaxEvalDepth, e.pos, "expressions");
  switch (e.kind) {
    case ExprKind::Literal:
      return e.value;
    case ExprKind::Name: {
      if (const Value* v = scope.find(e.name)) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return Value::list(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      Value d = Value::dict();
      for (size_t i = 0; i < e.keys.size(); ++i) {
        Value k = eval(*e.keys[i], scope);
        if (!k.is_string())
          throw_template_error(e.keys[i]->pos, fmt::format("dict keys must be strings, not {}", k.type_name()));
        d.as_dict().set(k.as_string(), eval(*e.args[i], scope));
      }
      return d;
    }
    case ExprKind::Attr:
      return get_attr(eval(*e.object, scope), e.name);
    case ExprKind::Item:
      return get_item(eval(*e.object, scope), eval(*e.args[0], scope), e.pos);
    case ExprKind::Slice:
      return eval_slice(e, scope);
    case ExprKind::Call:
      return eval_call(e, scope);
    case ExprKind::Filter:
      return apply_filter(e, eval(*e.object, scope), scope);
    case ExprKind::Test: {
      Value operand = eval(*e.object, scope);
      CallArgs args;
      eval_args(e, scope, args);
      bool r = e.test(*this, operand, args, e.pos);
      return Value(e.negated ? !r : r);
    }
    case ExprKind::Unary: {
      Value v = eval(*e.object, scope);
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_int() || v.is_bool()) return e.name == "-" ? Value(-v.to_int()) : Value(v.to_int());
      if (v.is_float()) return e.name == "-" ? Value(-v.as_float()) : v;
      throw_template_error(e.pos, fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
    }
    case ExprKind::Binary:
      return eval_binary(e, scope);
    case ExprKind::Compare:
      return eval_compare(e, scope);
    case ExprKind::Condition: {
      if (eval(*e.object, scope).truthy()) return eval(*e.args[0], scope);
      if (e.args[1]) return eval(*e.args[1], scope);
      return Value::undefined("the inline if expression has no else branch");
    }
  }
  return Value();
}

void Interpreter::eval_args(const Expr& e, Scope& scope, CallArgs& args) {
  args.positional.reserve(e.args.size());
  for (const auto& a : e.args) args.positional.push_back(eval(*a, scope));
  for (size_t i = 0; i < e.kwargs.size(); ++i) args.keyword.emplace_back(e.kwnames[i], eval(*e.kwargs[i], scope));
}

Value Interpreter::apply_filter(const Expr& e, Value operand, Scope& scope) {
  if (e.object && e.object->kind == ExprKind::Filter && !e.object->object) {
    // A {% filter a | b %} chain: apply the inner filters first.
    operand = apply_filter(*e.object, std::move(operand), scope);
  }
  CallArgs args;
  eval_args(e, scope, args);
  return e.filter(*this, operand, args, e.pos);
}

Value Interpreter::eval_call(const Expr& e, Scope& scope) {
  const Expr& target = *e.object;
  if (target.kind == ExprKind::Attr) {
    // obj.method(...) without building a bound-method object.
    Value self = eval(*target.object, scope);
    if ((self.is_string() || self.is_dict() || self.is_list()) && has_method(self, target.name)) {
      CallArgs args;
      eval_args(e, scope, args);
      auto r = call_method(self, target.name, args, e.pos);
      if (r) return std::move(*r);
    }
    Value callee = get_attr(self, target.name);
    CallArgs args;
    eval_args(e, scope, args);
    return call(callee, args, e.pos);
  }
  Value callee = eval(target, scope);
  CallArgs args;
  eval_args(e, scope, args);
  return call(callee, args, e.pos);
}

Value Interpreter::call(const Value& callee, CallArgs& args, const SourcePos& pos) {
  if (callee.is_callable()) return callee.as_callable().call(*this, args, pos);
  if (callee.is_undefined())
    throw_template_error(pos, callee.undefined_hint().empty() ? "called an undefined value" : callee.undefined_hint());
  throw_template_error(pos, fmt::format("'{}' object is not callable", callee.type_name()));
}

Value Interpreter::get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (has_method(obj, name)) return Value::callable(std::make_shared<BoundMethod>(obj, std::string(name)));
      [[fallthrough]];
    case Value::Kind::Namespace:
      if (const Value* v = obj.as_dict().find(name)) return *v;
      break;
    case Value::Kind::String:
    case Value::Kind::List:
      if (has_method(obj, name)) return Value::callable(std::make_shared<BoundMethod>(obj, std::string(name)));
      break;
    case Value::Kind::Undefined:
      return obj;
    default:
      break;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", obj.type_name(), name));
}

Value Interpreter::get_item(const Value& obj, const Value& key, const SourcePos& pos) {
  if (obj.is_dict() || obj.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      if (obj.is_dict() && has_method(obj, key.as_string())) return get_attr(obj, key.as_string());
    }
    return Value::undefined(fmt::format("'{}' has no key {}", obj.type_name(), key.repr()));
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.to_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else {
      auto chars = utf8_chars(obj.as_string());
      int64_t n = static_cast<int64_t>(chars.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(chars[static_cast<size_t>(i)]);
    }
    return Value::undefined(fmt::format("{} index {} out of range", obj.type_name(), key.to_int()));
  }
  if (key.is_string() && !obj.is_undefined()) return get_attr(obj, key.as_string());
  if (obj.is_undefined()) return obj;
  return Value::undefined(fmt::format("'{}' object has no item {}", obj.type_name(), key.repr()));
}

std::vector<Value> Interpreter::iterate(const Value& v, const SourcePos& pos) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::List:
      return v.as_list().items;
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().items.size());
      for (const auto& kv : v.as_dict().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      for (auto c : utf8_chars(v.as_string())) chars.emplace_back(c);
      return chars;
    }
    default:
      throw_template_error(pos, fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

Value Interpreter::eval_slice(const Expr& e, Scope& scope) {
  Value obj = eval(*e.object, scope);
  std::optional<int64_t> parts[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.args[i]) continue;
    Value p = eval(*e.args[i], scope);
    if (p.is_none()) continue;
    if (!p.is_int() && !p.is_bool())
      throw_template_error(e.args[i]->pos,
                           fmt::format("slice indices must be integers or none, not {}", p.type_name()));
    parts[i] = p.to_int();
  }
  int64_t step = parts[2].value_or(1);
  if (step == 0) throw_template_error(e.pos, "slice step cannot be zero");
  if (obj.is_undefined()) return obj;
  std::vector<std::string_view> chars;
  int64_t n;
  if (obj.is_string()) {
    chars = utf8_chars(obj.as_string());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.as_list().items.size());
  } else {
    return Value::undefined(fmt::format("'{}' object cannot be sliced", obj.type_name()));
  }
  // Python's slice.indices().
  int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    return x < lower ? lower : (x > upper ? upper : x);
  };
  int64_t start = clamp(parts[0], step > 0 ? lower : upper);
  int64_t stop = clamp(parts[1], step > 0 ? upper : lower);
  if (obj.is_string()) {
    std::string out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out += chars[static_cast<size_t>(i)];
    return Value(std::move(out));
  }
  std::vector<Value> out;
  const auto& items = obj.as_list().items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(items[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.as_list().is_tuple);
}

Value Interpreter::eval_binary(const Expr& e, Scope& scope) {
  Value a = eval(*e.object, scope);
  if (e.name == "and") return a.truthy() ? eval(*e.args[0], scope) : a;
  if (e.name == "or") return a.truthy() ? a : eval(*e.args[0], scope);
  Value b = eval(*e.args[0], scope);
  return binary_op(*this, e.name, a, b, e.pos);
}

Value Interpreter::eval_compare(const Expr& e, Scope& scope) {
  Value left = eval(*e.object, scope);
  for (size_t i = 0; i < e.args.size(); ++i) {
    Value right = eval(*e.args[i], scope);
    const std::string& op = e.kwnames[i];
    bool r;
    if (op == "==") {
      r = values_equal(left, right);
    } else if (op == "!=") {
      r = !values_equal(left, right);
    } else if (op == "in") {
      r = contains(right, left, e.args[i]->pos);
    } else if (op == "not in") {
      r = !contains(right, left, e.args[i]->pos);
    } else {
      bool ok;
      int c = compare_values(left, right, ok);
      if (!ok)
        throw_template_error(e.args[i]->pos, fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                                                         left.type_name(), right.type_name()));
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

bool contains(const Value& container, const Value& item, const SourcePos& pos) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string())
        throw_template_error(pos,
                             fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const auto& v : container.as_list().items)
        if (values_equal(v, item)) return true;
      return false;
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    case Value::Kind::Undefined:
      return false;
    default:
      throw_template_error(pos, fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

Value binary_op(Interpreter& interp, std::string_view op, const Value& a, const Value& b, const SourcePos& pos) {
  auto unsupported = [&]() -> Value {
    if (a.is_undefined() || b.is_undefined()) {
      const Value& u = a.is_undefined() ? a : b;
      throw_template_error(pos, u.undefined_hint().empty() ? "operation on an undefined value" : u.undefined_hint());
    }
    throw_template_error(
        pos, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
  };
  if (op == "~") {
    std::string s = a.str();
    std::string t = b.str();
    interp.check_string_size(s.size() + t.size(), pos);
    return Value(s + t);
  }
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.to_int(), b.to_int(), &r)) throw_template_error(pos, "integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string()) {
      interp.check_string_size(a.as_string().size() + b.as_string().size(), pos);
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      std::vector<Value> items = a.as_list().items;
      interp.check_list_size(items.size() + b.as_list().items.size(), pos);
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple && b.as_list().is_tuple);
    }
    return unsupported();
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.to_int(), b.to_int(), &r)) throw_template_error(pos, "integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() - b.to_double());
    return unsupported();
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.to_int(), b.to_int(), &r)) throw_template_error(pos, "integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() * b.to_double());
    const Value* seq = (a.is_string() || a.is_list()) ? &a : ((b.is_string() || b.is_list()) ? &b : nullptr);
    const Value* count = seq == &a ? &b : &a;
    if (seq && (count->is_int() || count->is_bool())) {
      int64_t k = std::max<int64_t>(0, count->to_int());
      if (seq->is_string()) {
        const std::string& s = seq->as_string();
        if (!s.empty()) interp.check_string_size(static_cast<size_t>(std::min<int64_t>(k, INT32_MAX)) * s.size(), pos);
        std::string out;
        for (int64_t i = 0; i < k; ++i) out += s;
        return Value(std::move(out));
      }
      const auto& items = seq->as_list().items;
      if (!items.empty())
        interp.check_list_size(static_cast<size_t>(std::min<int64_t>(k, INT32_MAX)) * items.size(), pos);
      std::vector<Value> out;
      for (int64_t i = 0; i < k; ++i) out.insert(out.end(), items.begin(), items.end());
      return Value::list(std::move(out), seq->as_list().is_tuple);
    }
    return unsupported();
  }
  if (op == "/" || op == "//" || op == "%") {
    if (!nums) return unsupported();
    if (b.to_double() == 0.0) throw_template_error(pos, op == "%" ? "modulo by zero" : "division by zero");
    if (op == "/") return Value(a.to_double() / b.to_double());
    if (ints) {
      int64_t x = a.to_int(), y = b.to_int();
      if (x == INT64_MIN && y == -1) throw_template_error(pos, "integer overflow");
      int64_t q = floor_div(x, y);
      return op == "//" ? Value(q) : Value(x - q * y);
    }
    double x = a.to_double(), y = b.to_double();
    double q = std::floor(x / y);
    return op == "//" ? Value(q) : Value(x - q * y);
  }
  if (op == "**") {
    if (!nums) return unsupported();
    if (ints && b.to_int() >= 0) {
      int64_t base = a.to_int(), exp = b.to_int(), r = 1;
      if (base == 0) return Value(int64_t{exp == 0 ? 1 : 0});
      if (base == 1) return Value(int64_t{1});
      if (base == -1) return Value(int64_t{exp % 2 ? -1 : 1});
      while (exp-- > 0)  // |base| >= 2 overflows within 63 steps
        if (__builtin_mul_overflow(r, base, &r)) throw_template_error(pos, "integer overflow");
      return Value(r);
    }
    return Value(std::pow(a.to_double(), b.to_double()));
  }
  throw_template_error(pos, fmt::format("unknown operator '{}'", op));
}

}  // namespace cypris::jinja
