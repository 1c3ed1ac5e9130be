// Jinja's built-in filters and tests, with Jinja2 3.1 behaviour (see filters.h). `tojson` is
// transformers' version: json.dumps(ensure_ascii=False, sort_keys=False), no HTML escaping.
#include "engine/chat/jinja/filters.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "engine/chat/jinja/interpreter.h"
#include "engine/chat/jinja/lexer.h"
#include "engine/chat/jinja/methods.h"
#include "engine/chat/jinja/strings.h"

namespace cypris::jinja {
namespace {

using Args = CallArgs;

const Value* arg(const Args& a, size_t i, std::string_view name) {
  return a.get(i, name);
}

bool arg_bool(const Args& a, size_t i, std::string_view name, bool dflt) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : dflt;
}

int64_t arg_int(const Args& a, size_t i, std::string_view name, int64_t dflt, const SourcePos& pos) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) throw_template_error(pos, fmt::format("argument '{}' must be an integer", name));
  return v->to_int();
}

std::string arg_str(const Args& a, size_t i, std::string_view name, std::string dflt) {
  const Value* v = a.get(i, name);
  return v && !v->is_none() ? v->str() : dflt;
}

std::vector<Value> as_items(Interpreter& in, const Value& v, const SourcePos& pos) {
  return in.iterate(v, pos);
}

// `attribute` arguments of map/sort/selectattr/...: dotted path, integer parts index lists.
Value get_path(Interpreter& in, const Value& v, const std::string& path, const SourcePos& pos) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = numeric ? in.get_item(cur, Value(int64_t{std::stoll(part)}), pos) : in.get_item(cur, Value(part), pos);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// Sort key comparison with Jinja's case-insensitive default for strings.
bool less_for_sort(const Value& a, const Value& b, bool case_sensitive, const SourcePos& pos) {
  bool ok;
  int c;
  if (!case_sensitive && a.is_string() && b.is_string()) {
    c = compare_values(Value(ascii_lower(a.as_string())), Value(ascii_lower(b.as_string())), ok);
  } else {
    c = compare_values(a, b, ok);
  }
  if (!ok)
    throw_template_error(
        pos, fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
  return c < 0;
}

// ---------------------------------------------------------------- filters

Value f_length(Interpreter&, const Value& v, Args&, const SourcePos& pos) {
  switch (v.kind()) {
    case Value::Kind::String:
      return Value(static_cast<int64_t>(utf8_length(v.as_string())));
    case Value::Kind::List:
      return Value(static_cast<int64_t>(v.as_list().items.size()));
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      return Value(static_cast<int64_t>(v.as_dict().items.size()));
    case Value::Kind::Undefined:
      return Value(int64_t{0});
    default:
      throw_template_error(pos, fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

Value f_trim(Interpreter&, const Value& v, Args& a, const SourcePos&) {
  const Value* chars = arg(a, 0, "chars");
  return Value(py_strip(v.str(), chars && !chars->is_none() ? chars->str() : std::string(), true, true,
                        !chars || chars->is_none()));
}

Value f_tojson(Interpreter&, const Value& v, Args& a, const SourcePos& pos) {
  const Value* indent = arg(a, 0, "indent");
  int ind = -1;
  if (indent && !indent->is_none()) {
    if (!indent->is_int()) throw_template_error(pos, "tojson: indent must be an integer");
    ind = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
  }
  std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
  if (const Value* seps = a.get(99, "separators"); seps && seps->is_list() && seps->as_list().items.size() == 2) {
    item_sep = seps->as_list().items[0].str();
    key_sep = seps->as_list().items[1].str();
  }
  return Value(to_json(v, ind, arg_bool(a, 99, "ensure_ascii", false), arg_bool(a, 99, "sort_keys", false), pos,
                       item_sep, key_sep));
}

Value f_items(Interpreter&, const Value& v, Args&, const SourcePos& pos) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict() && !v.is_namespace())
    throw_template_error(pos, fmt::format("items filter needs a mapping, not {}", v.type_name()));
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::list({Value(k), val}, true));
  return Value::list(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  std::string sep = arg_str(a, 0, "d", "");
  const Value* attr = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& item : as_items(in, v, pos)) {
    if (!first) out += sep;
    first = false;
    out += attr ? get_path(in, item, attr->str(), pos).str() : item.str();
    in.check_string_size(out.size(), pos);
  }
  return Value(std::move(out));
}

Value f_default(Interpreter&, const Value& v, Args& a, const SourcePos&) {
  const Value* d = arg(a, 0, "default_value");
  bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) return d ? *d : Value(std::string());
  return v;
}

Value f_upper(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return Value(ascii_upper(v.str()));
}
Value f_lower(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return Value(ascii_lower(v.str()));
}
Value f_title(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return Value(jinja_title(v.str()));
}
Value f_capitalize(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return Value(py_capitalize(v.str()));
}

Value f_replace(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  const Value* old = arg(a, 0, "old");
  const Value* neu = arg(a, 1, "new");
  if (!old || !neu) throw_template_error(pos, "replace needs the old and new strings");
  std::string out = py_replace(v.str(), old->str(), neu->str(), arg_int(a, 2, "count", -1, pos));
  in.check_string_size(out.size(), pos);
  return Value(std::move(out));
}

Value f_first(Interpreter& in, const Value& v, Args&, const SourcePos& pos) {
  auto items = as_items(in, v, pos);
  return items.empty() ? Value::undefined("first of an empty sequence") : items.front();
}

Value f_last(Interpreter& in, const Value& v, Args&, const SourcePos& pos) {
  auto items = as_items(in, v, pos);
  return items.empty() ? Value::undefined("last of an empty sequence") : items.back();
}

// select/reject/selectattr/rejectattr share this: keep items whose (attribute's) test result is `want`.
Value select_impl(Interpreter& in, const Value& v, Args& a, const SourcePos& pos, bool by_attr, bool want) {
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty()) throw_template_error(pos, "selectattr/rejectattr need an attribute name");
    attr = a.positional[0].str();
    next = 1;
  }
  TestFn test = nullptr;
  Args test_args;
  if (a.positional.size() > next) {
    std::string name = a.positional[next].str();
    test = find_test(name);
    if (!test) throw_template_error(pos, fmt::format("unknown test '{}'", name));
    test_args.positional.assign(a.positional.begin() + static_cast<long>(next) + 1, a.positional.end());
  }
  std::vector<Value> out;
  if (!v.truthy()) return Value::generator({});  // Jinja: `if seq:` before iterating
  for (const auto& item : as_items(in, v, pos)) {
    Value x = by_attr ? get_path(in, item, attr, pos) : item;
    bool r = test ? test(in, x, test_args, pos) : x.truthy();
    if (r == want) out.push_back(item);
  }
  return Value::generator(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, Args& a, const SourcePos& p) {
  return select_impl(in, v, a, p, false, true);
}
Value f_reject(Interpreter& in, const Value& v, Args& a, const SourcePos& p) {
  return select_impl(in, v, a, p, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, Args& a, const SourcePos& p) {
  return select_impl(in, v, a, p, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, Args& a, const SourcePos& p) {
  return select_impl(in, v, a, p, true, false);
}

Value f_map(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  std::vector<Value> out;
  if (!v.truthy()) return Value::generator({});
  if (const Value* attr = a.get(99, "attribute")) {
    const Value* dflt = a.get(99, "default");
    for (const auto& item : as_items(in, v, pos)) {
      Value x = get_path(in, item, attr->str(), pos);
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::generator(std::move(out));
  }
  if (a.positional.empty()) throw_template_error(pos, "map needs a filter name or attribute=");
  std::string name = a.positional[0].str();
  FilterFn f = find_filter(name);
  if (!f) throw_template_error(pos, fmt::format("unknown filter '{}'", name));
  Args rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const auto& item : as_items(in, v, pos)) {
    Args copy = rest;
    out.push_back(f(in, item, copy, pos));
  }
  return Value::generator(std::move(out));
}

Value f_indent(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  const Value* w = arg(a, 0, "width");
  std::string indention =
      w && w->is_string() ? w->as_string()
                          : std::string(static_cast<size_t>(std::clamp<int64_t>(w ? w->to_int() : 4, 0, 1024)), ' ');
  bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
  std::vector<std::string> lines = py_splitlines(v.str() + "\n");
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      rv += "\n";
      if (blank || !lines[i].empty()) rv += indention;
    }
    rv += lines[i];
    in.check_string_size(rv.size(), pos);
  }
  if (first) rv = indention + rv;
  return Value(std::move(rv));
}

Value f_string(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return Value(v.str());
}
Value f_safe(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_string() ? v : Value(v.str());
}

Value f_escape(Interpreter&, const Value& v, Args&, const SourcePos&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value(std::move(out));
}

Value f_int(Interpreter&, const Value& v, Args& a, const SourcePos& pos) {
  int64_t dflt = arg_int(a, 0, "default", 0, pos);
  if (v.is_int() || v.is_bool()) return Value(v.to_int());
  if (v.is_float()) return std::isfinite(v.as_float()) ? Value(static_cast<int64_t>(v.as_float())) : Value(dflt);
  if (v.is_string()) {
    auto r = parse_py_int(v.as_string());
    if (r) return Value(*r);
    auto f = parse_py_float(v.as_string());
    if (f && std::isfinite(*f)) return Value(static_cast<int64_t>(*f));
  }
  return Value(dflt);
}

Value f_float(Interpreter&, const Value& v, Args& a, const SourcePos&) {
  const Value* d = arg(a, 0, "default");
  double dflt = d ? d->to_double() : 0.0;
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    auto f = parse_py_float(v.as_string());
    if (f) return Value(*f);
  }
  return Value(dflt);
}

Value f_list(Interpreter& in, const Value& v, Args&, const SourcePos& pos) {
  return Value::list(as_items(in, v, pos));
}

Value f_unique(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Value* attr = arg(a, 1, "attribute");
  std::vector<Value> out, seen;
  for (const auto& item : as_items(in, v, pos)) {
    Value key = attr ? get_path(in, item, attr->str(), pos) : item;
    if (!cs && key.is_string()) key = Value(ascii_lower(key.as_string()));
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); });
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  bool reverse = arg_bool(a, 0, "reverse", false), cs = arg_bool(a, 1, "case_sensitive", false);
  const Value* attr = arg(a, 2, "attribute");
  std::vector<Value> items = as_items(in, v, pos);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(attr ? get_path(in, item, attr->str(), pos) : item, item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less_for_sort(y.first, x.first, cs, pos) : less_for_sort(x.first, y.first, cs, pos);
  });
  std::vector<Value> out;
  for (auto& k : keyed) out.push_back(std::move(k.second));
  return Value::list(std::move(out));
}

Value f_dictsort(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  std::string by = arg_str(a, 1, "by", "key");
  bool reverse = arg_bool(a, 2, "reverse", false);
  if (!v.is_dict()) throw_template_error(pos, "dictsort needs a mapping");
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.as_dict().items) pairs.push_back(Value::list({Value(k), val}, true));
  size_t idx = by == "value" ? 1 : 0;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const Value& kx = x.as_list().items[idx];
    const Value& ky = y.as_list().items[idx];
    return reverse ? less_for_sort(ky, kx, cs, pos) : less_for_sort(kx, ky, cs, pos);
  });
  return Value::list(std::move(pairs));
}

Value f_reverse(Interpreter& in, const Value& v, Args&, const SourcePos& pos) {
  if (v.is_string()) {
    auto chars = utf8_chars(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  auto items = as_items(in, v, pos);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_abs(Interpreter&, const Value& v, Args&, const SourcePos& pos) {
  if (v.is_int() || v.is_bool()) return Value(v.to_int() < 0 ? -v.to_int() : v.to_int());
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  throw_template_error(pos, fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_round(Interpreter&, const Value& v, Args& a, const SourcePos& pos) {
  if (!v.is_number()) throw_template_error(pos, fmt::format("round needs a number, not {}", v.type_name()));
  int64_t precision = arg_int(a, 0, "precision", 0, pos);
  std::string method = arg_str(a, 1, "method", "common");
  // Python's round() of an int (or bool) with precision >= 0 is that int.
  if ((v.is_int() || v.is_bool()) && precision >= 0 && method == "common") return Value(v.to_int());
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.to_double() * scale;
  // "common" is Python's round(): halves go to the even neighbour (nearbyint's default mode).
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
  if (method != "common" && method != "ceil" && method != "floor")
    throw_template_error(pos, "round: method must be 'common', 'ceil' or 'floor'");
  return Value(r / scale);
}

Value f_batch(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  int64_t size = arg_int(a, 0, "linecount", 1, pos);
  if (size <= 0) throw_template_error(pos, "batch size must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  std::vector<Value> out, cur;
  for (auto& item : as_items(in, v, pos)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == size) out.push_back(Value::list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none()) {
      in.check_list_size(static_cast<size_t>(size), pos);
      while (static_cast<int64_t>(cur.size()) < size) cur.push_back(*fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, Args&, const SourcePos&) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : v.str()) {
    bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_attr(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  const Value* name = arg(a, 0, "name");
  if (!name) throw_template_error(pos, "attr needs a name");
  // Only attributes: a dict's keys are items, not attributes, so d|attr('key') is undefined.
  if (v.is_dict() && !has_method(v, name->str()))
    return Value::undefined(fmt::format("no attribute '{}'", name->str()));
  return in.get_attr(v, name->str());
}

Value minmax(Interpreter& in, const Value& v, Args& a, const SourcePos& pos, bool want_max) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Value* attr = arg(a, 1, "attribute");
  auto items = as_items(in, v, pos);
  if (items.empty()) return Value::undefined("no items for min/max");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    Value x = attr ? get_path(in, items[i], attr->str(), pos) : items[i];
    Value b = attr ? get_path(in, items[best], attr->str(), pos) : items[best];
    if (want_max ? less_for_sort(b, x, cs, pos) : less_for_sort(x, b, cs, pos)) best = i;
  }
  return items[best];
}
Value f_max(Interpreter& in, const Value& v, Args& a, const SourcePos& p) {
  return minmax(in, v, a, p, true);
}
Value f_min(Interpreter& in, const Value& v, Args& a, const SourcePos& p) {
  return minmax(in, v, a, p, false);
}

Value f_sum(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  const Value* attr = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value total = start ? *start : Value(int64_t{0});
  for (const auto& item : as_items(in, v, pos))
    total = binary_op(in, "+", total, attr ? get_path(in, item, attr->str(), pos) : item, pos);
  return total;
}

Value f_center(Interpreter&, const Value& v, Args& a, const SourcePos& pos) {
  std::string s = v.str();
  int64_t width = std::min<int64_t>(arg_int(a, 0, "width", 80, pos), 1 << 20);
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value(s);
  int64_t total = width - len, left = total / 2 + (total & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

Value f_truncate(Interpreter&, const Value& v, Args& a, const SourcePos& pos) {
  std::string s = v.str();
  int64_t length = arg_int(a, 0, "length", 255, pos);
  bool killwords = arg_bool(a, 1, "killwords", false);
  std::string end = arg_str(a, 2, "end", "...");
  int64_t leeway = arg_int(a, 3, "leeway", 5, pos);
  auto chars = utf8_chars(s);
  int64_t n = static_cast<int64_t>(chars.size());
  if (n <= length + leeway) return Value(s);
  int64_t keep = std::max<int64_t>(0, length - static_cast<int64_t>(utf8_length(end)));
  std::string head;
  for (int64_t i = 0; i < keep; ++i) head += chars[static_cast<size_t>(i)];
  if (!killwords) {
    size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head.resize(sp);
  }
  return Value(head + end);
}

// Python's printf-style `fmt % args`: %s %r %d %i %f %F %e %g %x %o %c %%, with flags, width,
// precision and %(name)s fields taken from keyword arguments.
Value f_format(Interpreter& in, const Value& v, Args& a, const SourcePos& pos) {
  const std::string f = v.str();
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) throw_template_error(pos, "format: incomplete format");
    const Value* arg_v = nullptr;
    if (f[i] == '(') {
      size_t close = f.find(')', i);
      if (close == std::string::npos) throw_template_error(pos, "format: missing ')' in %(name)");
      std::string key = f.substr(i + 1, close - i - 1);
      for (const auto& [k, val] : a.keyword)
        if (k == key) arg_v = &val;
      if (!arg_v) throw_template_error(pos, fmt::format("format: no argument named '{}'", key));
      i = close + 1;
    }
    std::string spec = "%";
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) spec += f[i++];
    while (i < f.size() && (std::isdigit(static_cast<unsigned char>(f[i])) || f[i] == '.')) spec += f[i++];
    if (i >= f.size()) throw_template_error(pos, "format: incomplete format");
    char conv = f[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!arg_v) {
      if (next >= a.positional.size()) throw_template_error(pos, "format: not enough arguments for format string");
      arg_v = &a.positional[next++];
    }
    const Value& x = *arg_v;
    char buf[512];
    auto need_number = [&]() {
      if (!x.is_number())
        throw_template_error(pos, fmt::format("format: %{} needs a number, not {}", conv, x.type_name()));
    };
    switch (conv) {
      case 's':
      case 'r': {
        std::string str = conv == 's' ? x.str() : x.repr();
        std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), "");  // validates the spec
        std::string padded = str;
        int width = 0;
        bool left = spec.find('-') != std::string::npos;
        size_t d = spec.find_first_of("123456789");
        if (d != std::string::npos) width = std::atoi(spec.c_str() + d);
        int len = static_cast<int>(utf8_length(str));
        if (width > len) padded = left ? str + std::string(width - len, ' ') : std::string(width - len, ' ') + str;
        out += padded;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o':
        need_number();
        std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(),
                      static_cast<long long>(x.is_float() ? static_cast<int64_t>(x.as_float()) : x.to_int()));
        out += buf;
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        need_number();
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), x.to_double());
        out += buf;
        break;
      case 'c':
        out += x.is_string() ? x.as_string() : std::string(1, static_cast<char>(x.to_int()));
        break;
      default:
        throw_template_error(pos, fmt::format("format: unsupported format character '{}'", conv));
    }
    in.check_string_size(out.size(), pos);
  }
  return Value(std::move(out));
}

// ---------------------------------------------------------------- tests

bool t_defined(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_float();
}
bool t_number(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_dict();
}
// Jinja's Undefined is iterable (empty) and a sequence (len 0), so these are true for it.
bool t_iterable(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_sequence(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_callable(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_callable();
}
bool t_escaped(Interpreter&, const Value&, Args&, const SourcePos&) {
  return false;
}

const Value& test_arg(const Args& a, const SourcePos& pos) {
  if (a.positional.empty() && a.keyword.empty()) throw_template_error(pos, "this test needs an argument");
  return a.positional.empty() ? a.keyword[0].second : a.positional[0];
}
bool t_eq(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  return values_equal(v, test_arg(a, p));
}
bool t_ne(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  return !values_equal(v, test_arg(a, p));
}
int cmp(const Value& v, const Args& a, const SourcePos& p) {
  bool ok;
  int c = compare_values(v, test_arg(a, p), ok);
  if (!ok)
    throw_template_error(p, fmt::format("cannot compare '{}' and '{}'", v.type_name(), test_arg(a, p).type_name()));
  return c;
}
bool t_lt(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  return cmp(v, a, p) < 0;
}
bool t_le(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  return cmp(v, a, p) <= 0;
}
bool t_gt(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  return cmp(v, a, p) > 0;
}
bool t_ge(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  return cmp(v, a, p) >= 0;
}
bool t_sameas(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  return v.same_object(test_arg(a, p));
}
bool t_in(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  return contains(test_arg(a, p), v, p);
}

int64_t int_operand(const Value& v, const SourcePos& p) {
  if (!v.is_int() && !v.is_bool()) throw_template_error(p, fmt::format("expected an integer, not {}", v.type_name()));
  return v.to_int();
}
bool t_odd(Interpreter&, const Value& v, Args&, const SourcePos& p) {
  return int_operand(v, p) % 2 != 0;
}
bool t_even(Interpreter&, const Value& v, Args&, const SourcePos& p) {
  return int_operand(v, p) % 2 == 0;
}
bool t_divisibleby(Interpreter&, const Value& v, Args& a, const SourcePos& p) {
  int64_t d = int_operand(test_arg(a, p), p);
  if (d == 0) throw_template_error(p, "divisibleby 0");
  return int_operand(v, p) % d == 0;
}
// Jinja: str(value).islower() / isupper(): at least one cased character, none of the other case.
bool t_lower(Interpreter&, const Value& v, Args&, const SourcePos&) {
  std::string s = v.str();
  return ascii_lower(s) == s && ascii_upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, Args&, const SourcePos&) {
  std::string s = v.str();
  return ascii_upper(s) == s && ascii_lower(s) != s;
}
bool t_filter(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, Args&, const SourcePos&) {
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"abs", f_abs},           {"attr", f_attr},
      {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},
      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"forceescape", f_escape},
      {"format", f_format},     {"indent", f_indent},
      {"int", f_int},           {"items", f_items},
      {"join", f_join},         {"last", f_last},
      {"length", f_length},     {"list", f_list},
      {"lower", f_lower},       {"map", f_map},
      {"max", f_max},           {"min", f_min},
      {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse},
      {"round", f_round},       {"safe", f_safe},
      {"select", f_select},     {"selectattr", f_selectattr},
      {"sort", f_sort},         {"string", f_string},
      {"sum", f_sum},           {"title", f_title},
      {"tojson", f_tojson},     {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  auto it = kFilters.find(name);
  return it == kFilters.end() ? nullptr : it->second;
}

TestFn find_test(std::string_view name) {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"sameas", t_sameas},
      {"in", t_in},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"lower", t_lower},
      {"upper", t_upper},
      {"filter", t_filter},
      {"test", t_test},
  };
  auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

}  // namespace cypris::jinja
