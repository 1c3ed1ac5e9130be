// Methods of str and dict values (x.strip(), d.get()), the global functions templates call
// (range, dict, namespace, raise_exception, strftime_now) and Python-compatible JSON output.
// Lists have no methods: transformers renders in an immutable sandbox, so append() fails there too.
#include "engine/chat/jinja/methods.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/chat/jinja/globals.h"
#include "engine/chat/jinja/interpreter.h"
#include "engine/chat/jinja/lexer.h"
#include "engine/chat/jinja/strings.h"

namespace cypris::jinja {
namespace {

const std::set<std::string_view, std::less<>> kStrMethods = {
    "strip",   "lstrip",  "rstrip",     "startswith", "endswith", "split",   "rsplit",       "splitlines",  "upper",
    "lower",   "title",   "capitalize", "replace",    "format",   "find",    "rfind",        "count",       "join",
    "isdigit", "isalpha", "isalnum",    "isspace",    "islower",  "isupper", "removeprefix", "removesuffix"};
const std::set<std::string_view, std::less<>> kDictMethods = {"items", "keys", "values", "get"};

std::optional<std::string> opt_str_arg(const CallArgs& a, size_t i, std::string_view name) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return std::nullopt;
  return v->str();
}

int64_t int_arg(const CallArgs& a, size_t i, std::string_view name, int64_t dflt) {
  const Value* v = a.get(i, name);
  return v && (v->is_int() || v->is_bool()) ? v->to_int() : dflt;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start, const SourcePos& pos) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) throw_template_error(pos, "startswith/endswith need a string or a tuple of strings");
    const std::string& a = v.as_string();
    if (a.size() > s.size()) return false;
    return start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.as_list().items.begin(), affix.as_list().items.end(), one);
  return one(affix);
}

template <class Pred>
bool all_chars(const std::string& s, Pred p) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return p(static_cast<unsigned char>(c)); });
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

// str.format with {} / {0} / {name} fields (no format specs).
std::string py_format(Interpreter& in, const std::string& f, const CallArgs& a, const SourcePos& pos) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t end = f.find('}', i);
      if (end == std::string::npos) throw_template_error(pos, "format: single '{' in format string");
      std::string field = f.substr(i + 1, end - i - 1);
      if (field.find_first_of(":!") != std::string::npos)
        throw_template_error(pos, "format: format specs and conversions are not supported");
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < a.positional.size() ? &a.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (auto idx = parse_py_int(field)) {
        v = *idx >= 0 && static_cast<size_t>(*idx) < a.positional.size() ? &a.positional[*idx] : nullptr;
      } else {
        for (const auto& [k, val] : a.keyword)
          if (k == field) v = &val;
      }
      if (!v) throw_template_error(pos, fmt::format("format: no argument for field '{{{}}}'", field));
      out += v->str();
      i = end;
    } else {
      out += c;
    }
    in.check_string_size(out.size(), pos);
  }
  return out;
}

std::optional<Value> string_method(Interpreter& in, const std::string& s, std::string_view name, CallArgs& a,
                                   const SourcePos& pos) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto chars = opt_str_arg(a, 0, "chars");
    return Value(py_strip(s, chars.value_or(""), name != "rstrip", name != "lstrip", !chars));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* affix = a.get(0, "prefix");
    if (!affix) affix = a.get(0, "suffix");
    if (!affix) throw_template_error(pos, fmt::format("{}() needs an argument", name));
    return Value(starts_or_ends(s, *affix, name == "startswith", pos));
  }
  if (name == "split" || name == "rsplit") {
    auto sep = opt_str_arg(a, 0, "sep");
    if (sep && sep->empty()) throw_template_error(pos, "split: empty separator");
    int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
    return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") return str_list(py_splitlines(s));
  if (name == "upper") return Value(ascii_upper(s));
  if (name == "lower") return Value(ascii_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "replace") {
    auto old = opt_str_arg(a, 0, "old");
    auto neu = opt_str_arg(a, 1, "new");
    if (!old || !neu) throw_template_error(pos, "replace() needs the old and new strings");
    std::string out = py_replace(s, *old, *neu, int_arg(a, 2, "count", -1));
    in.check_string_size(out.size(), pos);
    return Value(std::move(out));
  }
  if (name == "format") return Value(py_format(in, s, a, pos));
  if (name == "find" || name == "rfind" || name == "count") {
    auto sub = opt_str_arg(a, 0, "sub");
    if (!sub) throw_template_error(pos, fmt::format("{}() needs a substring", name));
    if (name == "count") return Value(py_count(s, *sub));
    return Value(py_find(s, *sub, name == "rfind"));
  }
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    if (!items) throw_template_error(pos, "join() needs an iterable");
    std::string out;
    bool first = true;
    for (const auto& v : in.iterate(*items, pos)) {
      if (!v.is_string()) throw_template_error(pos, fmt::format("join(): expected str, found {}", v.type_name()));
      if (!first) out += s;
      first = false;
      out += v.as_string();
      in.check_string_size(out.size(), pos);
    }
    return Value(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string affix = opt_str_arg(a, 0, "affix").value_or("");
    bool pre = name == "removeprefix";
    if (starts_or_ends(s, Value(affix), pre, pos))
      return Value(pre ? s.substr(affix.size()) : s.substr(0, s.size() - affix.size()));
    return Value(s);
  }
  if (name == "isdigit") return Value(all_chars(s, [](unsigned char c) { return std::isdigit(c) != 0; }));
  if (name == "isalpha") return Value(all_chars(s, [](unsigned char c) { return std::isalpha(c) != 0; }));
  if (name == "isalnum") return Value(all_chars(s, [](unsigned char c) { return std::isalnum(c) != 0; }));
  if (name == "isspace") return Value(all_chars(s, [](unsigned char c) { return std::isspace(c) != 0; }));
  if (name == "islower") return Value(ascii_lower(s) == s && ascii_upper(s) != s);
  if (name == "isupper") return Value(ascii_upper(s) == s && ascii_lower(s) != s);
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& self, std::string_view name, CallArgs& a, const SourcePos& pos) {
  const DictData& d = self.as_dict();
  if (name == "get") {
    const Value* key = a.get(0, "key");
    if (!key) throw_template_error(pos, "get() needs a key");
    const Value* dflt = a.get(1, "default");
    if (key->is_string())
      if (const Value* v = d.find(key->as_string())) return *v;
    return dflt ? *dflt : Value::none();
  }
  std::vector<Value> out;
  out.reserve(d.items.size());
  for (const auto& [k, v] : d.items) {
    if (name == "items") out.push_back(Value::list({Value(k), v}, true));
    if (name == "keys") out.emplace_back(k);
    if (name == "values") out.push_back(v);
  }
  return Value::list(std::move(out));
}

// ---------------------------------------------------------------- JSON

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      case '\b':
        out += "\\b";
        ++i;
        continue;
      case '\f':
        out += "\\f";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
      ++i;
    } else if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
      ++i;
    } else {
      uint32_t cp = utf8_decode(s, i);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  bool ensure_ascii;
  bool sort_keys;
  const SourcePos& pos;
  std::string_view item_sep;
  std::string_view key_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  }

  void write(const Value& v, int level) {
    if (level > 200) throw_template_error(pos, "tojson: value nested too deeply");
    switch (v.kind()) {
      case Value::Kind::None:
        out += "null";
        return;
      case Value::Kind::Bool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::Int:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::Float: {
        double d = v.as_float();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : format_float(d);
        return;
      }
      case Value::Kind::String:
        json_string(out, v.as_string(), ensure_ascii);
        return;
      case Value::Kind::List: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          write(items[i], level + 1);
        }
        if (indent >= 0) newline(level);
        out += ']';
        return;
      }
      case Value::Kind::Dict: {
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : v.as_dict().items) items.push_back(&kv);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        if (items.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          json_string(out, items[i]->first, ensure_ascii);
          out += key_sep;
          write(items[i]->second, level + 1);
        }
        if (indent >= 0) newline(level);
        out += '}';
        return;
      }
      default:
        throw_template_error(pos, fmt::format("tojson: object of type {} is not JSON serializable", v.type_name()));
    }
  }
};

// ---------------------------------------------------------------- globals

class Builtin : public Callable {
 public:
  using Fn = Value (*)(Interpreter&, CallArgs&, const SourcePos&);
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(fn) {}
  std::string name() const override { return name_; }
  Value call(Interpreter& in, CallArgs& args, const SourcePos& pos) override { return fn_(in, args, pos); }

 private:
  std::string name_;
  Fn fn_;
};

Value g_range(Interpreter& in, CallArgs& a, const SourcePos& pos) {
  std::vector<int64_t> n;
  for (const auto& v : a.positional) {
    if (!v.is_int() && !v.is_bool())
      throw_template_error(pos, fmt::format("range() needs integers, not {}", v.type_name()));
    n.push_back(v.to_int());
  }
  if (n.empty() || n.size() > 3) throw_template_error(pos, "range() takes 1 to 3 integer arguments");
  int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
  if (step == 0) throw_template_error(pos, "range() step must not be zero");
  long double count = std::ceil((static_cast<long double>(stop) - start) / step);
  if (count < 0) count = 0;
  // Jinja's sandbox refuses ranges over 100000 items (MAX_RANGE).
  if (count > 100000) throw_template_error(pos, "range too big: more than 100000 items");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
  return Value::list(std::move(out));
}

Value g_dict(Interpreter& in, CallArgs& a, const SourcePos& pos) {
  Value d = Value::dict();
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().items) d.as_dict().set(k, v);
    } else {
      for (const auto& pair : in.iterate(src, pos)) {
        auto kv = in.iterate(pair, pos);
        if (kv.size() != 2 || !kv[0].is_string()) throw_template_error(pos, "dict() needs (string key, value) pairs");
        d.as_dict().set(kv[0].as_string(), kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.keyword) d.as_dict().set(k, v);
  return d;
}

Value g_namespace(Interpreter& in, CallArgs& a, const SourcePos& pos) {
  Value d = g_dict(in, a, pos);
  in.track_namespace(d.dict_ptr());
  return Value::namespace_(d.dict_ptr());
}

Value g_raise_exception(Interpreter&, CallArgs& a, const SourcePos& pos) {
  const Value* msg = a.get(0, "message");
  throw_template_error(pos, msg ? msg->str() : std::string("raise_exception() called"));
}

Value g_strftime_now(Interpreter& in, CallArgs& a, const SourcePos& pos) {
  const Value* f = a.get(0, "format");
  if (!f || !f->is_string()) throw_template_error(pos, "strftime_now() needs a format string");
  return Value(format_time(f->as_string(), in.now()));
}

}  // namespace

bool has_method(const Value& self, std::string_view name) {
  if (self.is_string()) return kStrMethods.count(name) != 0;
  if (self.is_dict()) return kDictMethods.count(name) != 0;
  return false;
}

std::optional<Value> call_method(Interpreter& interp, const Value& self, std::string_view name, CallArgs& args,
                                 const SourcePos& pos) {
  if (!has_method(self, name)) return std::nullopt;
  if (self.is_string()) return string_method(interp, self.as_string(), name, args, pos);
  return dict_method(self, name, args, pos);
}

std::string to_json(const Value& v, int indent, bool ensure_ascii, bool sort_keys, const SourcePos& pos,
                    std::string_view item_sep, std::string_view key_sep) {
  JsonWriter w{indent, ensure_ascii, sort_keys, pos, item_sep, key_sep, {}};
  w.write(v, 0);
  return std::move(w.out);
}

std::string format_time(std::string_view f, const std::tm& tm) {
  static const char* kDays[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
  static const char* kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                  "July",    "August",   "September", "October", "November", "December"};
  const char* day = kDays[((tm.tm_wday % 7) + 7) % 7];
  const char* month = kMonths[((tm.tm_mon % 12) + 12) % 12];
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size()) {
      out += f[i];
      continue;
    }
    char c = f[++i];
    bool no_pad = false;  // glibc's %-d
    if (c == '-' && i + 1 < f.size()) {
      no_pad = true;
      c = f[++i];
    }
    auto num = [&](int v, int width) { out += no_pad ? std::to_string(v) : fmt::format("{:0{}d}", v, width); };
    switch (c) {
      case 'Y':
        out += std::to_string(tm.tm_year + 1900);
        break;
      case 'y':
        num((tm.tm_year + 1900) % 100, 2);
        break;
      case 'm':
        num(tm.tm_mon + 1, 2);
        break;
      case 'd':
        num(tm.tm_mday, 2);
        break;
      case 'e':
        out += fmt::format("{:2d}", tm.tm_mday);
        break;
      case 'H':
        num(tm.tm_hour, 2);
        break;
      case 'I':
        num(tm.tm_hour % 12 == 0 ? 12 : tm.tm_hour % 12, 2);
        break;
      case 'M':
        num(tm.tm_min, 2);
        break;
      case 'S':
        num(tm.tm_sec, 2);
        break;
      case 'j':
        num(tm.tm_yday + 1, 3);
        break;
      case 'p':
        out += tm.tm_hour < 12 ? "AM" : "PM";
        break;
      case 'a':
        out += std::string(day, 3);
        break;
      case 'A':
        out += day;
        break;
      case 'b':
      case 'h':
        out += std::string(month, 3);
        break;
      case 'B':
        out += month;
        break;
      case 'w':
        out += std::to_string(tm.tm_wday);
        break;
      case 'F':
        out += fmt::format("{}-{:02d}-{:02d}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
        break;
      case 'T':
        out += fmt::format("{:02d}:{:02d}:{:02d}", tm.tm_hour, tm.tm_min, tm.tm_sec);
        break;
      case '%':
        out += '%';
        break;
      default:
        out += '%';
        if (no_pad) out += '-';
        out += c;
    }
  }
  return out;
}

void install_globals(Interpreter& interp) {
  interp.set_methods({has_method, call_method});
  interp.set_global("range", Value::callable(std::make_shared<Builtin>("range", g_range)));
  interp.set_global("dict", Value::callable(std::make_shared<Builtin>("dict", g_dict)));
  interp.set_global("namespace", Value::callable(std::make_shared<Builtin>("namespace", g_namespace)));
  interp.set_global("raise_exception",
                    Value::callable(std::make_shared<Builtin>("raise_exception", g_raise_exception)));
  interp.set_global("strftime_now", Value::callable(std::make_shared<Builtin>("strftime_now", g_strftime_now)));
}

}  // namespace cypris::jinja
