// Jinja parser (see parser.h). The expression grammar mirrors Jinja2's parser.py, from loosest to
// tightest: inline if/else, or, and, not, comparisons (== != < <= > >= in, not in), + -, ~,
// * / // %, **, unary - +, then primary with postfix (.attr [index] [slice] (call)) followed by
// filters (|f), tests (is t) and calls.
#include "engine/chat/jinja/parser.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/chat/jinja/filters.h"

namespace cypris::jinja {
namespace {

constexpr int kMaxNesting = 128;  // expression and block nesting: deeper input is rejected

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::unique_ptr<Template> run() {
    auto tmpl = std::make_unique<Template>();
    std::string end;
    tmpl->body = parse_until({}, end);
    return tmpl;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case TokenType::Text:
        return "template text";
      case TokenType::VarBegin:
        return "'{{'";
      case TokenType::VarEnd:
        return "'}}'";
      case TokenType::BlockBegin:
        return "'{%'";
      case TokenType::BlockEnd:
        return "'%}'";
      case TokenType::Name:
        return "'" + tok.text + "'";
      case TokenType::String:
        return "string literal";
      case TokenType::Int:
      case TokenType::Float:
        return "number " + tok.text;
      case TokenType::Op:
        return "'" + tok.text + "'";
      case TokenType::Eof:
        return "end of template";
    }
    return "token";
  }
  [[noreturn]] void fail_here(const std::string& expected) const {
    throw_template_error(cur().pos, fmt::format("expected {}, got {}", expected, describe(cur())));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_here(fmt::format("'{}'", op));
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) fail_here("a name");
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) fail_here("'%}'");
    advance();
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) throw_template_error(p.cur().pos, "template is nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // ---- statements ----
  // Parses nodes until a block tag whose name is in `ends` (consumed up to its name, returned in
  // `which`) or the end of the template when `ends` is empty.
  Body parse_until(std::initializer_list<std::string_view> ends, std::string& which) {
    Body body;
    while (true) {
      const Token& tok = cur();
      switch (tok.type) {
        case TokenType::Text: {
          auto n = std::make_unique<Node>(NodeKind::Text, tok.pos);
          n->text = tok.text;
          body.push_back(std::move(n));
          advance();
          break;
        }
        case TokenType::VarBegin: {
          auto n = std::make_unique<Node>(NodeKind::Output, tok.pos);
          advance();
          n->expr = parse_tuple_expr();
          if (cur().type != TokenType::VarEnd) fail_here("'}}'");
          advance();
          body.push_back(std::move(n));
          break;
        }
        case TokenType::BlockBegin: {
          const Token& name = peek();
          if (name.type == TokenType::Name &&
              std::find(ends.begin(), ends.end(), std::string_view(name.text)) != ends.end()) {
            which = name.text;
            advance();
            advance();
            return body;
          }
          advance();
          body.push_back(parse_statement());
          break;
        }
        case TokenType::Eof:
          if (ends.size() != 0) {
            std::string names;
            for (auto e : ends) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
            throw_template_error(tok.pos, fmt::format("unexpected end of template, expected {}", names));
          }
          return body;
        default:
          fail_here("template text or a tag");
      }
    }
  }

  NodePtr parse_statement() {
    DepthGuard guard(*this);
    const Token tag = cur();
    if (tag.type != TokenType::Name) fail_here("a tag name");
    const std::string& kw = tag.text;
    advance();
    if (kw == "if") return parse_if(tag.pos);
    if (kw == "for") return parse_for(tag.pos);
    if (kw == "set") return parse_set(tag.pos);
    if (kw == "macro") return parse_macro(tag.pos);
    if (kw == "call") return parse_call_block(tag.pos);
    if (kw == "filter") return parse_filter_block(tag.pos);
    if (kw == "with") return parse_with(tag.pos);
    if (kw == "generation") {
      auto n = std::make_unique<Node>(NodeKind::Generation, tag.pos);
      expect_block_end();
      std::string end;
      n->body = parse_until({"endgeneration"}, end);
      expect_block_end();
      return n;
    }
    if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) throw_template_error(tag.pos, fmt::format("'{}' outside of a for loop", kw));
      auto n = std::make_unique<Node>(kw == "break" ? NodeKind::Break : NodeKind::Continue, tag.pos);
      expect_block_end();
      return n;
    }
    if (kw == "do") {
      auto n = std::make_unique<Node>(NodeKind::Do, tag.pos);
      n->expr = parse_tuple_expr();
      expect_block_end();
      return n;
    }
    static const char* kEndTags[] = {"elif",    "else",      "endif",   "endfor", "endset",       "endmacro",
                                     "endcall", "endfilter", "endwith", "endraw", "endgeneration"};
    for (const char* e : kEndTags)
      if (kw == e) throw_template_error(tag.pos, fmt::format("unexpected '{}' without a matching opening tag", kw));
    throw_template_error(tag.pos, fmt::format("unknown or unsupported tag '{}'", kw));
  }

  NodePtr parse_if(SourcePos pos) {
    auto n = std::make_unique<Node>(NodeKind::If, pos);
    while (true) {
      n->conditions.push_back(parse_tuple_expr());
      expect_block_end();
      std::string which;
      n->bodies.push_back(parse_until({"elif", "else", "endif"}, which));
      if (which == "elif") continue;
      if (which == "else") {
        expect_block_end();
        n->else_body = parse_until({"endif"}, which);
      }
      expect_block_end();
      return n;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    do {
      names.push_back(expect_name());
    } while (skip_op(",") && cur().type == TokenType::Name);
    if (paren) expect_op(")");
    return names;
  }

  NodePtr parse_for(SourcePos pos) {
    auto n = std::make_unique<Node>(NodeKind::For, pos);
    n->targets = parse_targets();
    if (!skip_name("in")) fail_here("'in'");
    n->expr = parse_tuple_expr(/*with_condexpr=*/false);
    if (skip_name("if")) n->cond = parse_expr();
    if (is_name("recursive")) throw_template_error(cur().pos, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string which;
    int loop_refs = loop_refs_;
    n->body = parse_until({"else", "endfor"}, which);
    n->uses_loop = loop_refs_ != loop_refs;
    --loop_depth_;
    if (which == "else") {
      expect_block_end();
      n->else_body = parse_until({"endfor"}, which);
    }
    expect_block_end();
    return n;
  }

  NodePtr parse_set(SourcePos pos) {
    auto n = std::make_unique<Node>(NodeKind::Set, pos);
    std::string first = expect_name();
    if (skip_op(".")) {
      n->attribute_target = true;
      n->targets.push_back(first);
      n->text = expect_name();
    } else {
      n->targets.push_back(first);
      while (skip_op(",")) n->targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      n->expr = parse_tuple_expr();
      expect_block_end();
      return n;
    }
    if (n->attribute_target || n->targets.size() != 1) fail_here("'='");
    n->kind = NodeKind::SetBlock;
    if (skip_op("|")) n->expr = parse_filter_chain(nullptr);
    expect_block_end();
    std::string which;
    n->body = parse_until({"endset"}, which);
    expect_block_end();
    return n;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expr();
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  NodePtr parse_macro(SourcePos pos) {
    auto n = std::make_unique<Node>(NodeKind::Macro, pos);
    n->text = expect_name();
    parse_params(n->params);
    expect_block_end();
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string which;
    n->body = parse_until({"endmacro"}, which);
    loop_depth_ = saved_loop_depth;
    if (cur().type == TokenType::Name) advance();  // {% endmacro name %}
    expect_block_end();
    return n;
  }

  NodePtr parse_call_block(SourcePos pos) {
    auto n = std::make_unique<Node>(NodeKind::CallBlock, pos);
    if (is_op("(")) parse_params(n->params);
    n->expr = parse_expr();
    if (n->expr->kind != ExprKind::Call) throw_template_error(n->expr->pos, "{% call %} needs a macro call");
    expect_block_end();
    std::string which;
    n->body = parse_until({"endcall"}, which);
    expect_block_end();
    return n;
  }

  NodePtr parse_filter_block(SourcePos pos) {
    auto n = std::make_unique<Node>(NodeKind::FilterBlock, pos);
    n->expr = parse_filter_chain(nullptr);
    expect_block_end();
    std::string which;
    n->body = parse_until({"endfilter"}, which);
    expect_block_end();
    return n;
  }

  NodePtr parse_with(SourcePos pos) {
    auto n = std::make_unique<Node>(NodeKind::With, pos);
    while (cur().type != TokenType::BlockEnd) {
      if (!n->targets.empty()) expect_op(",");
      n->targets.push_back(expect_name());
      expect_op("=");
      n->values.push_back(parse_expr());
    }
    expect_block_end();
    std::string which;
    n->body = parse_until({"endwith"}, which);
    expect_block_end();
    return n;
  }

  // ---- expressions ----
  ExprPtr make(ExprKind k, SourcePos pos) { return std::make_unique<Expr>(k, pos); }

  // An expression, or a tuple when commas follow (`{% set a, b = 1, 2 %}`, `{{ a, b }}`).
  ExprPtr parse_tuple_expr(bool with_condexpr = true) {
    SourcePos pos = cur().pos;
    ExprPtr first = with_condexpr ? parse_expr() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = make(ExprKind::Tuple, pos);
    tuple->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokenType::BlockEnd || cur().type == TokenType::VarEnd || is_op(")") || is_name("if")) break;
      tuple->args.push_back(with_condexpr ? parse_expr() : parse_or());
    }
    return tuple;
  }

  ExprPtr parse_expr() {
    DepthGuard guard(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      SourcePos pos = cur().pos;
      advance();
      auto c = make(ExprKind::Condition, pos);
      c->object = parse_or();
      c->args.push_back(std::move(e));
      c->args.push_back(skip_name("else") ? parse_expr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, SourcePos pos) {
    auto b = make(ExprKind::Binary, pos);
    b->name = std::move(op);
    b->object = std::move(l);
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      SourcePos pos = cur().pos;
      advance();
      e = binary("or", std::move(e), parse_and(), pos);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      SourcePos pos = cur().pos;
      advance();
      e = binary("and", std::move(e), parse_not(), pos);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto u = make(ExprKind::Unary, cur().pos);
      advance();
      u->name = "not";
      u->object = parse_not();
      return u;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    SourcePos pos = cur().pos;
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::Compare, pos);
        cmp->object = std::move(e);
      }
      cmp->kwnames.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  template <class Next>
  ExprPtr parse_binary_level(std::initializer_list<std::string_view> ops, Next next) {
    ExprPtr e = (this->*next)();
    while (cur().type == TokenType::Op &&
           std::find(ops.begin(), ops.end(), std::string_view(cur().text)) != ops.end()) {
      std::string op = cur().text;
      SourcePos pos = cur().pos;
      advance();
      e = binary(op, std::move(e), (this->*next)(), pos);
    }
    return e;
  }
  ExprPtr parse_math1() { return parse_binary_level({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_binary_level({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_binary_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_binary_level({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(ExprKind::Unary, cur().pos);
      e->name = cur().text;
      advance();
      e->object = parse_unary(false);
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    SourcePos pos = tok.pos;
    switch (tok.type) {
      case TokenType::Name: {
        auto e = make(ExprKind::Literal, pos);
        const std::string& n = tok.text;
        if (n == "true" || n == "True") {
          e->value = Value(true);
        } else if (n == "false" || n == "False") {
          e->value = Value(false);
        } else if (n == "none" || n == "None") {
          e->value = Value::none();
        } else {
          e->kind = ExprKind::Name;
          e->name = n;
          if (n == "loop") ++loop_refs_;
        }
        advance();
        return e;
      }
      case TokenType::String: {
        std::string s;
        while (cur().type == TokenType::String) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        auto e = make(ExprKind::Literal, pos);
        e->value = Value(std::move(s));
        return e;
      }
      case TokenType::Int: {
        auto e = make(ExprKind::Literal, pos);
        e->value = Value(tok.int_value);
        advance();
        return e;
      }
      case TokenType::Float: {
        auto e = make(ExprKind::Literal, pos);
        e->value = Value(tok.float_value);
        advance();
        return e;
      }
      case TokenType::Op:
        if (tok.text == "(") {
          advance();
          if (skip_op(")")) return make(ExprKind::Tuple, pos);
          ExprPtr inner = parse_tuple_expr();
          expect_op(")");
          return inner;
        }
        if (tok.text == "[") {
          advance();
          auto e = make(ExprKind::List, pos);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expr());
          }
          expect_op("]");
          return e;
        }
        if (tok.text == "{") {
          advance();
          auto e = make(ExprKind::Dict, pos);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->keys.push_back(parse_expr());
            expect_op(":");
            e->args.push_back(parse_expr());
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    fail_here("an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        SourcePos pos = cur().pos;
        advance();
        if (cur().type == TokenType::Int) {  // x.0 is x[0]
          auto item = make(ExprKind::Item, pos);
          item->object = std::move(e);
          auto idx = make(ExprKind::Literal, cur().pos);
          idx->value = Value(cur().int_value);
          item->args.push_back(std::move(idx));
          advance();
          e = std::move(item);
          continue;
        }
        auto a = make(ExprKind::Attr, pos);
        a->object = std::move(e);
        a->name = expect_name();
        e = std::move(a);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    SourcePos pos = cur().pos;
    expect_op("[");
    ExprPtr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = parse_expr();
    while (colons < 2 && skip_op(":")) {
      ++colons;
      if (!is_op(":") && !is_op("]")) parts[colons] = parse_expr();
    }
    expect_op("]");
    auto e = make(colons ? ExprKind::Slice : ExprKind::Item, pos);
    e->object = std::move(obj);
    e->args.push_back(std::move(parts[0]));
    if (colons) {
      e->args.push_back(std::move(parts[1]));
      e->args.push_back(std::move(parts[2]));
    }
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().text == "=") {
        e.kwnames.push_back(cur().text);
        advance();
        advance();
        e.kwargs.push_back(parse_expr());
      } else {
        if (!e.kwargs.empty()) fail_here("a keyword argument (positional argument follows keyword argument)");
        e.args.push_back(parse_expr());
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprKind::Call, cur().pos);
    e->object = std::move(callee);
    parse_call_args(*e);
    return e;
  }

  // One or more `name(args)` filters applied to `operand` (null inside {% filter %}).
  ExprPtr parse_filter_chain(ExprPtr operand) {
    ExprPtr e = parse_one_filter(std::move(operand));
    while (skip_op("|")) e = parse_one_filter(std::move(e));
    return e;
  }

  ExprPtr parse_one_filter(ExprPtr operand) {
    SourcePos pos = cur().pos;
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    FilterFn fn = find_filter(name);
    if (!fn) throw_template_error(pos, fmt::format("unknown filter '{}'", name));
    auto e = make(ExprKind::Filter, pos);
    e->name = name;
    e->filter = fn;
    e->object = std::move(operand);
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (skip_op("|")) {
        e = parse_one_filter(std::move(e));
      } else if (is_name("is")) {
        advance();
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_test(ExprPtr operand) {
    bool negated = skip_name("not");
    SourcePos pos = cur().pos;
    std::string name;
    if (cur().type == TokenType::Name) {
      name = expect_name();
    } else if (cur().type == TokenType::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                               cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      name = cur().text;
      advance();
    } else {
      fail_here("a test name");
    }
    TestFn fn = find_test(name);
    if (!fn) throw_template_error(pos, fmt::format("unknown test '{}'", name));
    auto e = make(ExprKind::Test, pos);
    e->name = name;
    e->test = fn;
    e->negated = negated;
    e->object = std::move(operand);
    if (is_op("(")) {
      parse_call_args(*e);
    } else {
      const Token& t = cur();
      static const char* kStop[] = {"else", "or", "and", "if", "not", "in", "is"};
      bool stop = t.type == TokenType::Name &&
                  std::any_of(std::begin(kStop), std::end(kStop), [&](const char* s) { return t.text == s; });
      bool starts_arg = t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Int ||
                        t.type == TokenType::Float || (t.type == TokenType::Op && (t.text == "[" || t.text == "{"));
      if (starts_arg && !stop) e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int loop_refs_ = 0;  // how many `loop` names were parsed so far
};

}  // namespace

std::unique_ptr<Template> parse_template(std::string_view source, const LexerOptions& opts) {
  return Parser(tokenize(source, opts)).run();
}

}  // namespace cypris::jinja
