// The value model of the chat-template (Jinja) interpreter: a dynamically typed Value with
// Python semantics (truthiness, equality, ordering, str() and repr()), lists and insertion-ordered
// dicts shared by reference like Python objects, and callables (globals, macros, bound methods).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace cypris::jinja {

struct SourcePos {
  int line = 0;
  int column = 0;
};

class Value;
class Interpreter;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  // Made by select/reject/map: Jinja returns a lazy generator there, which is always truthy
  // (so `{% if xs|select(...) %}` is true even when nothing is selected) and prints as an object.
  bool is_generator = false;
  int depth = 1;  // nesting depth, bounded by kMaxValueDepth
};

// Keys are strings (JSON objects and Jinja dict literals with string keys); order is insertion
// order, as in Python 3.7+ dicts, because templates print tools and arguments in input order.
struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  int depth = 1;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value value);  // throws when the value would nest too deeply
};

// Values nest at most this deep, so printing, comparing and destroying them cannot exhaust the
// stack (a namespace attribute can otherwise wrap a list in a list a million times).
constexpr int kMaxValueDepth = 512;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Argument `index` or keyword `name`, whichever was given; nullptr when neither.
  const Value* get(size_t index, std::string_view name) const;
};

class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string name() const = 0;
  virtual Value call(Interpreter& interp, CallArgs& args, const SourcePos& pos) = 0;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {}) {
    Value v;
    v.data_ = std::move(hint);
    return v;
  }
  static Value none() { return Value(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), data_(b) {}
  Value(int v) : kind_(Kind::Int), data_(int64_t{v}) {}
  Value(int64_t v) : kind_(Kind::Int), data_(v) {}
  Value(double v) : kind_(Kind::Float), data_(v) {}
  Value(std::string s) : kind_(Kind::String), data_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::String), data_(std::string(s)) {}
  Value(std::string_view s) : kind_(Kind::String), data_(std::string(s)) {}
  static Value list(std::vector<Value> items = {}, bool is_tuple = false);
  static Value generator(std::vector<Value> items);
  static Value dict();
  static Value dict(std::shared_ptr<DictData> d) { return Value(Kind::Dict, std::move(d)); }
  static Value namespace_(std::shared_ptr<DictData> d) { return Value(Kind::Namespace, std::move(d)); }
  static Value callable(std::shared_ptr<Callable> c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // Int, Bool or Float as a double / Int or Bool as an integer.
  double to_double() const;
  int64_t to_int() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  // Undefined: the name or expression that was undefined, for error messages.
  const std::string& undefined_hint() const { return std::get<std::string>(data_); }
  ListData& as_list() const { return *std::get<std::shared_ptr<ListData>>(data_); }
  DictData& as_dict() const { return *std::get<std::shared_ptr<DictData>>(data_); }  // Dict or Namespace
  const std::shared_ptr<DictData>& dict_ptr() const { return std::get<std::shared_ptr<DictData>>(data_); }
  Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(data_); }
  bool same_object(const Value& other) const;  // Python `is`

  bool truthy() const;
  // Python str(): what {{ value }} prints.
  std::string str() const;
  // Python repr(): how values print inside a list or dict.
  std::string repr() const;
  int depth() const;  // 0 for scalars
  // Python type name, for error messages ("str", "int", "list", ...).
  std::string type_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  template <class T>
  Value(Kind k, T&& d) : kind_(k), data_(std::forward<T>(d)) {}

  Kind kind_ = Kind::Undefined;
  std::variant<std::string, bool, int64_t, double, std::shared_ptr<ListData>, std::shared_ptr<DictData>,
               std::shared_ptr<Callable>>
      data_;
};

// Python ==, also across int/float/bool; dicts compare regardless of key order.
bool values_equal(const Value& a, const Value& b);
// Python <: -1, 0 or 1; nullopt-like failure is reported by returning false in `ok`.
int compare_values(const Value& a, const Value& b, bool& ok);

// Python's repr() of a float: the shortest string that reads back the same ("0.1", "1e+16").
std::string format_float(double v);
// Python's repr() of a str, with the quote Python would choose.
std::string repr_string(std::string_view s);

// UTF-8 helpers: strings are indexed, sliced and measured in code points like Python's str.
size_t utf8_length(std::string_view s);
std::vector<std::string_view> utf8_chars(std::string_view s);

}  // namespace cypris::jinja
