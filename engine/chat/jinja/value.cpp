// Value semantics for the chat-template interpreter (see value.h).
#include "engine/chat/jinja/value.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "engine/common/error.h"

namespace cypris::jinja {

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value* DictData::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

namespace {
int checked_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw Error(fmt::format("chat template: value nested more than {} levels", kMaxValueDepth));
  return depth;
}

// repr() of a namespace that contains itself would not end; deeper than this prints "...".
constexpr int kMaxReprDepth = kMaxValueDepth + 8;
std::string repr_at(const Value& v, int level);
}  // namespace

void DictData::set(std::string key, Value value) {
  depth = std::max(depth, checked_depth(1 + value.depth()));
  if (Value* v = find(key)) {
    *v = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto d = std::make_shared<ListData>();
  int depth = 0;
  for (const auto& v : items) depth = std::max(depth, v.depth());
  d->depth = checked_depth(depth + 1);
  d->items = std::move(items);
  d->is_tuple = is_tuple;
  return Value(Kind::List, std::move(d));
}

Value Value::generator(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.as_list().is_generator = true;
  return v;
}

Value Value::dict() {
  return Value(Kind::Dict, std::make_shared<DictData>());
}

Value Value::callable(std::shared_ptr<Callable> c) {
  return Value(Kind::Callable, std::move(c));
}

double Value::to_double() const {
  switch (kind_) {
    case Kind::Bool:
      return as_bool() ? 1.0 : 0.0;
    case Kind::Int:
      return static_cast<double>(as_int());
    case Kind::Float:
      return as_float();
    default:
      return 0.0;
  }
}

int64_t Value::to_int() const {
  switch (kind_) {
    case Kind::Bool:
      return as_bool() ? 1 : 0;
    case Kind::Int:
      return as_int();
    case Kind::Float:
      return static_cast<int64_t>(as_float());
    default:
      return 0;
  }
}

bool Value::same_object(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::List:
      return &as_list() == &other.as_list();
    case Kind::Dict:
    case Kind::Namespace:
      return &as_dict() == &other.as_dict();
    case Kind::Callable:
      return &as_callable() == &other.as_callable();
    default:
      return values_equal(*this, other);
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return as_bool();
    case Kind::Int:
      return as_int() != 0;
    case Kind::Float:
      return as_float() != 0.0;
    case Kind::String:
      return !as_string().empty();
    case Kind::List:
      return as_list().is_generator || !as_list().items.empty();
    case Kind::Dict:
      return !as_dict().items.empty();
    case Kind::Namespace:
    case Kind::Callable:
      return true;
  }
  return false;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined:
      return {};
    case Kind::String:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  return repr_at(*this, 0);
}

int Value::depth() const {
  switch (kind_) {
    case Kind::List:
      return as_list().depth;
    case Kind::Dict:
    case Kind::Namespace:
      return as_dict().depth;
    default:
      return 0;
  }
}

namespace {
std::string repr_at(const Value& v, int level) {
  using Kind = Value::Kind;
  if (level > kMaxReprDepth) return "...";
  switch (v.kind()) {
    case Kind::Undefined:
      return level == 0 ? std::string() : std::string("Undefined");  // str() is "", inside a list "Undefined"
    case Kind::None:
      return "None";
    case Kind::Bool:
      return v.as_bool() ? "True" : "False";
    case Kind::Int:
      return std::to_string(v.as_int());
    case Kind::Float:
      return format_float(v.as_float());
    case Kind::String:
      return repr_string(v.as_string());
    case Kind::List: {
      const ListData& l = v.as_list();
      if (l.is_generator) return "<generator object>";
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += repr_at(l.items[i], level + 1);
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      out += l.is_tuple ? ")" : "]";
      return out;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      std::string out = v.kind() == Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, val] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k);
        out += ": ";
        out += repr_at(val, level + 1);
      }
      out += v.kind() == Kind::Namespace ? "}>" : "}";
      return out;
    }
    case Kind::Callable:
      return "<function " + v.as_callable().name() + ">";
  }
  return {};
}
}  // namespace

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return as_list().is_tuple ? "tuple" : "list";
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Callable:
      return "function";
  }
  return "object";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    return a.to_int() == b.to_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const auto& x = a.as_list().items;
      const auto& y = b.as_list().items;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::Namespace:
      return a.same_object(b);  // Python compares namespaces by identity
    case Value::Kind::Dict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !values_equal(v, *w)) return false;
      }
      return true;
    }
    case Value::Kind::Callable:
      return a.same_object(b);
    default:
      return false;
  }
}

int compare_values(const Value& a, const Value& b, bool& ok) {
  ok = true;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.to_double(), y = b.to_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.to_int(), y = b.to_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 is code point order, which is what Python compares.
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(x[i], y[i], ok);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  ok = false;
  return 0;
}

std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  // s looks like "-d.ddde+XX": split into sign, digits and decimal exponent.
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  size_t e = s.find('e');
  int exp = std::stoi(s.substr(e + 1));
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return sign + out;
}

std::string repr_string(std::string_view s) {
  char quote = '\'';
  if (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) quote = '"';
  std::string out(1, quote);
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i + 1;
    while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace cypris::jinja
