// JSON Schema front end (see json_schema.h).
#include "engine/guided/json_schema.h"

#include <cmath>
#include <limits>
#include <set>

#include "engine/common/error.h"
#include "engine/guided/regex_grammar.h"

namespace cypris::guided {

using nlohmann::json;

namespace {

// Annotation keywords: they do not constrain the value.
const std::set<std::string> kAnnotations = {
    "title",    "description", "$schema",   "$id",        "$comment",         "examples",        "default",
    "deprecated", "readOnly",  "writeOnly", "$defs",      "definitions",      "contentMediaType", "contentEncoding",
    "$anchor"};

const std::set<std::string> kSupported = {
    "type",      "enum",      "const",     "properties", "required",  "additionalProperties", "items",
    "minItems",  "maxItems",  "anyOf",     "oneOf",      "allOf",     "$ref",                 "pattern",
    "format",    "minLength", "maxLength", "minimum",    "maximum",   "exclusiveMinimum",     "exclusiveMaximum",
    "uniqueItems"};

// Unbounded numbers have at most this many digits in each of their integer part, fraction and
// exponent (llama.cpp's JSON-schema grammar allows 16 integer digits): a model that starts a
// number cannot loop on digits until max_tokens. Bounds in the schema widen it where needed.
constexpr int kMaxNumberDigits = 16;
// The default whitespace between JSON tokens: nothing, one space, or one newline plus at most this
// much indentation (spaces or tabs), as llama.cpp's JSON grammars do and pretty-printed JSON needs.
constexpr int kMaxIndent = 20;
constexpr long long kNoBound = std::numeric_limits<long long>::min();

std::string digits_str(long long v) { return std::to_string(v); }

// ---- integer ranges as digit strings ------------------------------------------------------------

ExprPtr digit_range(char lo, char hi) {
  ByteSet s;
  for (char c = lo; c <= hi; ++c) s.set(static_cast<uint8_t>(c));
  return bytes(s);
}

// Digit strings of equal length n with lo <= s <= hi (lexicographic = numeric at equal length).
ExprPtr same_len(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return empty();
  if (lo == hi) return literal(lo);
  size_t n = lo.size() - 1;
  // The rest spans every digit string: one class then n free digits (keeps this linear in n).
  if (lo.find_first_not_of('0', 1) == std::string::npos && hi.find_first_not_of('9', 1) == std::string::npos)
    return seq({digit_range(lo[0], hi[0]), repeat(digit_range('0', '9'), static_cast<int>(n), static_cast<int>(n))});
  if (lo[0] == hi[0]) return seq({byte(lo[0]), same_len(lo.substr(1), hi.substr(1))});
  std::vector<ExprPtr> alts;
  alts.push_back(seq({byte(lo[0]), same_len(lo.substr(1), std::string(n, '9'))}));
  if (hi[0] - lo[0] > 1) alts.push_back(seq({digit_range(lo[0] + 1, hi[0] - 1), repeat(digit_range('0', '9'), n, n)}));
  alts.push_back(seq({byte(hi[0]), same_len(std::string(n, '0'), hi.substr(1))}));
  return alt(std::move(alts));
}

long long pow10(int d) {
  long long p = 1;
  for (int i = 0; i < d; ++i) p *= 10;
  return p;
}

// Non-negative integers in [a, b] without leading zeros; b = kNoBound means no upper bound in the
// schema, which is read as "at most kMaxNumberDigits digits" (or the digits of a, if more).
ExprPtr nonneg_range(long long a, long long b) {
  std::vector<ExprPtr> alts;
  int da = static_cast<int>(digits_str(a).size());
  int db = b == kNoBound ? std::max(da, kMaxNumberDigits) : static_cast<int>(digits_str(b).size());
  for (int d = da; d <= db; ++d) {
    long long lo = std::max(a, d == 1 ? 0 : pow10(d - 1));
    long long hi = d >= 19 ? std::numeric_limits<long long>::max() : pow10(d) - 1;
    if (b != kNoBound) hi = std::min(hi, b);
    if (lo > hi) continue;
    alts.push_back(same_len(digits_str(lo), digits_str(hi)));
  }
  if (alts.empty()) return bytes(ByteSet{});
  return alt(std::move(alts));
}

// Integers in [lo, hi]; either may be kNoBound.
ExprPtr int_range(long long lo, long long hi) {
  std::vector<ExprPtr> alts;
  if (lo == kNoBound || lo < 0) {
    // -k with k in [max(1, -hi), -lo]
    long long kmin = (hi != kNoBound && hi < 0) ? -hi : 1;
    long long kmax = lo == kNoBound ? kNoBound : -lo;
    if (kmax == kNoBound || kmin <= kmax) alts.push_back(seq({byte('-'), nonneg_range(kmin, kmax)}));
  }
  if (hi == kNoBound || hi >= 0) alts.push_back(nonneg_range(lo == kNoBound ? 0 : std::max(lo, 0LL), hi));
  if (alts.empty()) return bytes(ByteSet{});
  return alt(std::move(alts));
}

ExprPtr bounded_digits() { return repeat(digit_range('0', '9'), 1, kMaxNumberDigits); }
ExprPtr frac() { return seq({byte('.'), bounded_digits()}); }
ExprPtr zero_frac() { return opt(seq({byte('.'), repeat(byte('0'), 1, kMaxNumberDigits)})); }

// The number of JSON values in v (counting stops above `stop_above`), without recursion.
size_t json_nodes(const json& v, size_t stop_above) {
  size_t n = 0;
  std::vector<const json*> stack{&v};
  while (!stack.empty() && n <= stop_above) {
    const json* x = stack.back();
    stack.pop_back();
    ++n;
    if (x->is_structured())
      for (const auto& c : *x) stack.push_back(&c);
  }
  return n;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, const JsonSchemaOptions& o) : root_(root), o_(o) {}

  Grammar compile_root() {
    int r = b_.rule("root");
    b_.define(r, value(root_, ""));
    return b_.build(r, o_.what);
  }

  Grammar compile_any_object() {
    int r = b_.rule("root");
    b_.define(r, any_object());
    return b_.build(r, o_.what);
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    // A deep path is quoted by its end: the message must stay short however deep the schema.
    constexpr size_t kQuote = 160;
    const std::string where =
        path.empty() ? "/" : path.size() <= kQuote ? path : "..." + path.substr(path.size() - kQuote);
    CYPRIS_FAIL("{}: {} (at schema path '{}')", o_.what, msg, where);
  }

  // Whitespace is a fresh rule at every site so each site knows what may follow it (the token
  // mask's cache then rejects more tokens without looking at the stack).
  ExprPtr ws() {
    if (o_.whitespace_pattern) return regex_to_expr(*o_.whitespace_pattern, "guided_whitespace_pattern");
    // Bounded by default: free whitespace lets a model loop on newlines until max_tokens (a known
    // failure of `[ \n\t]*`, and `[ \n\t]{0,4}` at every site still grows `{ \n"k" \n\n\n: ...`);
    // compact and pretty-printed JSON both fit `( |\n[ \t]{0,20})?`. Clients wanting other layouts
    // set guided_whitespace_pattern.
    // The indentation is one shared rule: a copy at every site would make a grammar ~20 elements
    // per site larger (a 10,000-property schema has ~30,000 sites).
    if (indent_rule_ < 0) {
      ByteSet indent;
      indent.set(' ');
      indent.set('\t');
      indent_rule_ = b_.rule("ws-indent");
      b_.define(indent_rule_, repeat(bytes(indent), 0, kMaxIndent));
    }
    return opt(alt({byte(' '), seq({byte('\n'), ref(indent_rule_)})}));
  }

  // One expression for every string of the schema: lowering then makes one rule (and one
  // repetition rule) of it instead of ~60 elements per string.
  ExprPtr json_char() {
    if (!json_char_) json_char_ = make_json_char();
    return json_char_;
  }
  ExprPtr make_json_char() {
    ByteSet esc;
    for (char c : std::string("\"\\/bfnrt")) esc.set(static_cast<uint8_t>(c));
    ExprPtr hex = codepoints({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    // \uXXXX outside the surrogates: a lone surrogate is not a character.
    ExprPtr u = seq({byte('u'), alt({seq({codepoints({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}}), hex,
                                          hex, hex}),
                                     seq({codepoints({{'D', 'D'}, {'d', 'd'}}), codepoints({{'0', '7'}}), hex, hex})})});
    return alt({plain_char(), seq({byte('\\'), alt({bytes(esc), u})})});
  }
  ExprPtr plain_char() {
    CodepointRanges r = complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    return codepoints(r);
  }

  int any_value_rule() {
    if (any_value_ >= 0) return any_value_;
    any_value_ = b_.rule("any-value");
    int obj = b_.rule("any-object"), arr = b_.rule("any-array");
    ExprPtr str = any_string();
    b_.define(any_value_, alt({ref(obj), ref(arr), str, number_expr(), literal("true"), literal("false"),
                               literal("null")}));
    ExprPtr member = seq({any_string(), ws(), byte(':'), ws(), ref(any_value_)});
    b_.define(obj, seq({byte('{'), ws(),
                        opt(seq({member, star(seq({ws(), byte(','), ws(), member})), ws()})), byte('}')}));
    b_.define(arr, seq({byte('['), ws(),
                        opt(seq({ref(any_value_), star(seq({ws(), byte(','), ws(), ref(any_value_)})), ws()})),
                        byte(']')}));
    return any_value_;
  }
  ExprPtr any_object() {
    any_value_rule();
    return ref(b_.rule("any-object"));
  }
  ExprPtr any_string() { return seq({byte('"'), star(json_char()), byte('"')}); }
  ExprPtr number_expr() {
    return seq({int_range(kNoBound, kNoBound), opt(frac()),
                opt(seq({codepoints({{'E', 'E'}, {'e', 'e'}}), opt(codepoints({{'+', '+'}, {'-', '-'}})),
                         bounded_digits()}))});
  }

  const json& resolve(const std::string& r, const std::string& path) {
    if (r.empty() || r[0] != '#') fail(path + "/$ref", "only local references (\"#...\") are supported, got '" + r + "'");
    try {
      json::json_pointer ptr(r.substr(1));
      return root_.at(ptr);
    } catch (const std::exception&) {
      fail(path + "/$ref", "reference '" + r + "' does not resolve");
    }
  }

  ExprPtr reference(const std::string& r, const std::string& path) {
    auto it = refs_.find(r);
    if (it != refs_.end()) return ref(it->second);
    const json& target = resolve(r, path);
    int rule = b_.new_rule(hint("ref", r.substr(1)));
    refs_[r] = rule;  // before compiling: the target may refer to itself
    b_.define(rule, value(target, r.substr(1)));
    return ref(rule);
  }

  static void merge_into(json& into, const json& part, const std::string& path, const SchemaCompiler& self) {
    for (auto& [k, v] : part.items()) {
      if (!into.contains(k)) {
        into[k] = v;
      } else if (k == "properties") {
        for (auto& [pk, pv] : v.items()) {
          if (into[k].contains(pk) && into[k][pk] != pv)
            self.fail(path + "/allOf", "property '" + pk + "' is given two different schemas");
          into[k][pk] = pv;
        }
      } else if (k == "required") {
        for (auto& name : v) into[k].push_back(name);
      } else if (into[k] != v && !kAnnotations.count(k)) {
        self.fail(path + "/allOf", "keyword '" + k + "' appears in several parts with different values");
      }
    }
  }

  // Counts the schemas being compiled inside each other: value() recurses once per level
  // (properties, items, anyOf branches, $ref chains, allOf merges).
  class Nesting {
   public:
    Nesting(SchemaCompiler& c, const std::string& path) : c_(c) {
      if (++c_.depth_ > kMaxNestingDepth) {
        --c_.depth_;
        c_.fail(path, fmt::format("schemas are nested more than {} levels deep (the limit; properties, items, "
                                  "anyOf/oneOf/allOf branches and chains of $ref each count a level)",
                                  kMaxNestingDepth));
      }
    }
    ~Nesting() { --c_.depth_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    SchemaCompiler& c_;
  };

  // A property name as a path segment: long names are shortened, so paths (and the rule names
  // made from them) stay short however deep and wide the schema is.
  static std::string segment(const std::string& name) {
    constexpr size_t kMax = 48;
    if (name.size() <= kMax) return name;
    return name.substr(0, kMax / 2) + "..." + name.substr(name.size() - kMax / 2 + 3);
  }
  // A rule name from a path: its tail, for dumps and messages; uniqueness is new_rule's job.
  static std::string hint(const char* prefix, const std::string& path) {
    constexpr size_t kMax = 64;
    return prefix + (path.size() <= kMax ? path : "..." + path.substr(path.size() - kMax));
  }

  ExprPtr value(const json& s, const std::string& path) {
    Nesting nesting(*this, path);
    CompileBudget::charge(1 + s.size());
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema 'false' allows no value");
      return ref(any_value_rule());
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (auto& [k, v] : s.items()) {
      if (kAnnotations.count(k) || kSupported.count(k)) continue;
      fail(path + "/" + k, "keyword '" + k + "' is not supported by guided decoding");
    }
    if (s.contains("uniqueItems") && s["uniqueItems"] != false)
      fail(path + "/uniqueItems", "keyword 'uniqueItems' is not supported by guided decoding");
    if (s.contains("allOf")) {
      const json& parts = s["allOf"];
      if (!parts.is_array() || parts.empty()) fail(path + "/allOf", "'allOf' must be a non-empty array");
      json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < parts.size(); ++i) {
        json part = parts[i];
        for (int hops = 0; part.is_object() && part.contains("$ref"); ++hops) {  // merge the referenced keywords
          const std::string at = path + "/allOf/" + std::to_string(i);
          if (hops >= kMaxNestingDepth)
            fail(at, fmt::format("the chain of $ref is longer than {} (the limit), or refers to itself",
                                 kMaxNestingDepth));
          if (!part["$ref"].is_string()) fail(at + "/$ref", "'$ref' must be a string");
          const json& ref_target = resolve(part["$ref"].get<std::string>(), at);
          CompileBudget::charge(json_nodes(ref_target, kMaxSchemaNodes));  // the copy below
          json target = ref_target;
          part.erase("$ref");
          merge_into(part, target, path, *this);
        }
        if (!part.is_object()) fail(path + "/allOf/" + std::to_string(i), "must be a schema object");
        merge_into(merged, part, path, *this);
      }
      return value(merged, path);
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) fail(path + "/$ref", "'$ref' must be a string");
      for (auto& [k, v] : s.items())
        if (k != "$ref" && !kAnnotations.count(k))
          fail(path + "/" + k, "keyword '" + k + "' next to '$ref' is not supported (wrap them in allOf)");
      return reference(s["$ref"].get<std::string>(), path);
    }
    if (s.contains("const")) return literal(s["const"].dump());
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) fail(path + "/enum", "'enum' must be a non-empty array");
      std::vector<ExprPtr> alts;
      for (auto& v : e) alts.push_back(literal(v.dump()));
      return alt(std::move(alts));
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      const json& parts = s[k];
      if (!parts.is_array() || parts.empty()) fail(path + "/" + k, std::string("'") + k + "' must be a non-empty array");
      std::vector<ExprPtr> alts;
      json rest = s;
      rest.erase(k);
      bool has_rest = false;
      for (auto& [rk, rv] : rest.items())
        if (!kAnnotations.count(rk)) has_rest = true;
      for (size_t i = 0; i < parts.size(); ++i) {
        std::string p = path + "/" + k + "/" + std::to_string(i);
        if (has_rest) {  // shared keywords apply to every branch
          json m = rest;
          if (!parts[i].is_object()) fail(p, "must be a schema object");
          merge_into(m, parts[i], p, *this);
          alts.push_back(value(m, p));
        } else {
          alts.push_back(value(parts[i], p));
        }
      }
      return alt(std::move(alts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array()) for (auto& x : t) types.push_back(x.is_string() ? x.get<std::string>() : "?");
      else fail(path + "/type", "'type' must be a string or an array of strings");
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum")) {
      types.push_back("number");
    } else {
      return ref(any_value_rule());
    }
    std::vector<ExprPtr> alts;
    for (auto& t : types) {
      if (t == "string") alts.push_back(string_value(s, path));
      else if (t == "integer") alts.push_back(integer_value(s, path));
      else if (t == "number") alts.push_back(number_value(s, path));
      else if (t == "boolean") alts.push_back(alt({literal("true"), literal("false")}));
      else if (t == "null") alts.push_back(literal("null"));
      else if (t == "object") alts.push_back(object_value(s, path));
      else if (t == "array") alts.push_back(array_value(s, path));
      else fail(path + "/type", "unknown type '" + t + "' (allowed: string, integer, number, boolean, null, object, array)");
    }
    return alt(std::move(alts));
  }

  long long int_keyword(const json& s, const char* k, const std::string& path, bool* fractional = nullptr) {
    if (!s.contains(k)) return kNoBound;
    const json& v = s[k];
    if (!v.is_number()) fail(path + "/" + k, std::string("'") + k + "' must be a number");
    double d = v.get<double>();
    if (std::abs(d) > 1e17) fail(path + "/" + k, std::string("'") + k + "' is out of the supported range (|x| <= 1e17)");
    if (d != std::floor(d)) {
      if (!fractional) fail(path + "/" + k, std::string("'") + k + "' with a fractional value is not supported by guided decoding");
      *fractional = true;
    }
    return static_cast<long long>(d);
  }

  ExprPtr integer_value(const json& s, const std::string& path) {
    bool frac_min = false, frac_max = false;
    long long lo = int_keyword(s, "minimum", path, &frac_min), hi = int_keyword(s, "maximum", path, &frac_max);
    if (frac_min) lo = static_cast<long long>(std::ceil(s["minimum"].get<double>()));
    if (frac_max) hi = static_cast<long long>(std::floor(s["maximum"].get<double>()));
    bool fx = false;
    long long xlo = int_keyword(s, "exclusiveMinimum", path, &fx), xhi = int_keyword(s, "exclusiveMaximum", path, &fx);
    if (s.contains("exclusiveMinimum")) {
      long long v = static_cast<long long>(std::floor(s["exclusiveMinimum"].get<double>())) + 1;
      lo = lo == kNoBound ? v : std::max(lo, v);
    }
    if (s.contains("exclusiveMaximum")) {
      long long v = static_cast<long long>(std::ceil(s["exclusiveMaximum"].get<double>())) - 1;
      hi = hi == kNoBound ? v : std::min(hi, v);
    }
    (void)xlo;
    (void)xhi;
    if (lo != kNoBound && hi != kNoBound && lo > hi) fail(path, "no integer lies between the bounds");
    return int_range(lo, hi);
  }

  ExprPtr number_value(const json& s, const std::string& path) {
    for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) fail(path + "/" + k, std::string("keyword '") + k + "' on type number is not supported by guided decoding (use minimum/maximum)");
    long long lo = int_keyword(s, "minimum", path), hi = int_keyword(s, "maximum", path);
    if (lo == kNoBound && hi == kNoBound) return number_expr();
    if (lo != kNoBound && hi != kNoBound && lo > hi) fail(path, "minimum is above maximum");
    // Bounded numbers have no exponent. A value k.f lies in [lo, hi] when its integer part does
    // and, at the top of the range, the fraction is zero.
    std::vector<ExprPtr> alts;
    if (hi == kNoBound || hi >= 0) {
      long long a = lo == kNoBound ? 0 : std::max(lo, 0LL);
      if (hi == kNoBound) {
        alts.push_back(seq({nonneg_range(a, kNoBound), opt(frac())}));
      } else {
        if (a <= hi - 1) alts.push_back(seq({nonneg_range(a, hi - 1), opt(frac())}));
        if (a <= hi) alts.push_back(seq({literal(std::to_string(hi)), zero_frac()}));
      }
    }
    if (lo == kNoBound || lo < 0) {
      // -k.f with k.f in [max(0, -hi), -lo]
      long long kmin = (hi != kNoBound && hi < 0) ? -hi : 0;
      if (lo == kNoBound) {
        alts.push_back(seq({byte('-'), nonneg_range(kmin, kNoBound), opt(frac())}));
      } else {
        if (kmin <= -lo - 1) alts.push_back(seq({byte('-'), nonneg_range(kmin, -lo - 1), opt(frac())}));
        alts.push_back(seq({byte('-'), literal(std::to_string(-lo)), zero_frac()}));
      }
    }
    return alt(std::move(alts));
  }

  ExprPtr string_value(const json& s, const std::string& path) {
    int min = 0, max = -1;
    if (s.contains("minLength")) {
      if (!s["minLength"].is_number_unsigned()) fail(path + "/minLength", "'minLength' must be a non-negative integer");
      min = static_cast<int>(std::min<uint64_t>(s["minLength"].get<uint64_t>(), kMaxRepeatBound + 1));
    }
    if (s.contains("maxLength")) {
      if (!s["maxLength"].is_number_unsigned()) fail(path + "/maxLength", "'maxLength' must be a non-negative integer");
      max = static_cast<int>(std::min<uint64_t>(s["maxLength"].get<uint64_t>(), kMaxRepeatBound + 1));
    }
    if (min > kMaxRepeatBound || max > kMaxRepeatBound)
      fail(path, "minLength/maxLength above " + std::to_string(kMaxRepeatBound) + " are not supported");
    if (max >= 0 && max < min) fail(path, "maxLength is below minLength");
    bool has_len = s.contains("minLength") || s.contains("maxLength");
    ExprPtr body;
    if (s.contains("pattern")) {
      if (has_len) fail(path + "/pattern", "'pattern' together with minLength/maxLength is not supported");
      if (!s["pattern"].is_string()) fail(path + "/pattern", "'pattern' must be a string");
      body = regex_to_expr(s["pattern"].get<std::string>(), o_.what + ": pattern at '" + path + "/pattern'",
                           RegexOptions{.json_string = true});
    } else if (s.contains("format")) {
      if (has_len) fail(path + "/format", "'format' together with minLength/maxLength is not supported");
      body = format(s["format"], path);
    } else {
      body = repeat(json_char(), min, max);
    }
    return seq({byte('"'), body, byte('"')});
  }

  ExprPtr format(const json& f, const std::string& path) {
    std::string name = f.is_string() ? f.get<std::string>() : "?";
    static const std::string kDate =
        "[1-9][0-9]{3}-(((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01]))|((0[469]|11)-(0[1-9]|[12][0-9]|30))|"
        "(02-(0[1-9]|1[0-9]|2[0-8])))";
    static const std::string kTime = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    std::string re;
    if (name == "date") re = kDate;
    else if (name == "time") re = kTime;
    else if (name == "date-time") re = kDate + "T" + kTime;
    else if (name == "uuid") re = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
    else if (name == "email") re = "[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\\.[a-zA-Z0-9-]{1,63}){1,4}";
    else if (name == "ipv4") re = "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    else fail(path + "/format", "format '" + name + "' is not supported (supported: date, time, date-time, uuid, email, ipv4)");
    return regex_to_expr(re, "format", RegexOptions{.json_string = true});
  }

  int count_keyword(const json& s, const char* k, const std::string& path) {
    if (!s.contains(k)) return -1;
    if (!s[k].is_number_unsigned()) fail(path + "/" + k, std::string("'") + k + "' must be a non-negative integer");
    uint64_t v = s[k].get<uint64_t>();
    if (v > kMaxRepeatBound) fail(path + "/" + k, std::string("'") + k + "' above " + std::to_string(kMaxRepeatBound) + " is not supported");
    return static_cast<int>(v);
  }

  ExprPtr array_value(const json& s, const std::string& path) {
    int min = std::max(count_keyword(s, "minItems", path), 0), max = count_keyword(s, "maxItems", path);
    if (max >= 0 && max < min) fail(path, "maxItems is below minItems");
    if (s.contains("items") && s["items"].is_array()) fail(path + "/items", "'items' as an array (tuple form) is not supported");
    // Each array's item schema gets its own rule so recursive schemas terminate.
    int item_rule = b_.new_rule(hint("item", path));
    b_.define(item_rule, s.contains("items") ? value(s["items"], path + "/items") : ref(any_value_rule()));
    ExprPtr item = ref(item_rule);
    if (max == 0) return seq({byte('['), ws(), byte(']')});
    auto more = [&](int lo, int hi) { return repeat(seq({ws(), byte(','), ws(), item}), lo, hi); };
    if (min == 0) return seq({byte('['), ws(), opt(seq({item, more(0, max < 0 ? -1 : max - 1), ws()})), byte(']')});
    return seq({byte('['), ws(), item, more(min - 1, max < 0 ? -1 : max - 1), ws(), byte(']')});
  }

  ExprPtr object_value(const json& s, const std::string& path) {
    struct Prop {
      std::string name;
      ExprPtr member;
      bool required;
    };
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path + "/required", "'required' must be an array of strings");
      for (auto& r : s["required"]) {
        if (!r.is_string()) fail(path + "/required", "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    std::vector<Prop> props;
    std::set<std::string> seen;
    auto member = [&](const std::string& name, ExprPtr v) {
      return seq({literal(json(name).dump()), ws(), byte(':'), ws(), std::move(v)});
    };
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail(path + "/properties", "'properties' must be an object");
      for (auto& [name, sub] : s["properties"].items()) {
        int r = b_.new_rule(hint("prop", path + "/" + segment(name)));
        b_.define(r, value(sub, path + "/properties/" + segment(name)));
        props.push_back({name, member(name, ref(r)), required.count(name) != 0});
        seen.insert(name);
      }
    }
    for (auto& name : required)
      if (!seen.count(name)) props.push_back({name, member(name, ref(any_value_rule())), true});
    ExprPtr extra;
    if (s.contains("additionalProperties")) {
      const json& ap = s["additionalProperties"];
      if (ap.is_object() || (ap.is_boolean() && ap.get<bool>())) {
        int r = b_.new_rule(hint("extra", path));
        b_.define(r, ap.is_object() ? value(ap, path + "/additionalProperties") : ref(any_value_rule()));
        extra = seq({any_string(), ws(), byte(':'), ws(), ref(r)});
      } else if (!ap.is_boolean()) {
        fail(path + "/additionalProperties", "'additionalProperties' must be a boolean or a schema");
      }
    }
    // F_i: at least one of members i.. with none written yet; T_i: members i.. after one was
    // written (comma first). F_i is never empty, so an empty object is `{ ws }`: two whitespace
    // sites side by side would let `{\n\n}` through.
    size_t n = props.size();
    std::vector<int> F(n + 1, -1), T(n + 1);
    for (size_t i = 0; i <= n; ++i) T[i] = b_.new_rule(hint("then", path));
    ExprPtr sep = seq({ws(), byte(','), ws()});
    if (extra) {
      b_.define(T[n], star(seq({sep, extra})));
      F[n] = b_.new_rule(hint("first", path));
      b_.define(F[n], seq({extra, ref(T[n])}));
    } else {
      b_.define(T[n], empty());
    }
    bool any_required = false;
    for (size_t i = n; i-- > 0;) {
      any_required = any_required || props[i].required;
      ExprPtr with = seq({seq({ws(), byte(','), ws()}), props[i].member, ref(T[i + 1])});
      b_.define(T[i], props[i].required ? with : alt({with, ref(T[i + 1])}));
      ExprPtr first = seq({props[i].member, ref(T[i + 1])});
      F[i] = b_.new_rule(hint("first", path));
      b_.define(F[i], props[i].required || F[i + 1] < 0 ? first : alt({first, ref(F[i + 1])}));
    }
    if (F[0] < 0) return seq({byte('{'), ws(), byte('}')});
    if (any_required) return seq({byte('{'), ws(), ref(F[0]), ws(), byte('}')});
    return seq({byte('{'), ws(), opt(seq({ref(F[0]), ws()})), byte('}')});
  }

  const json& root_;
  JsonSchemaOptions o_;
  GrammarBuilder b_;
  std::map<std::string, int> refs_;
  int any_value_ = -1;
  int indent_rule_ = -1;  // the default whitespace's indentation (ws())
  int depth_ = 0;  // schemas being compiled inside each other (Nesting)
  ExprPtr json_char_;
};

}  // namespace

Grammar json_schema_grammar(const json& schema, const JsonSchemaOptions& opts) {
  const size_t nodes = json_nodes(schema, kMaxSchemaNodes);
  CYPRIS_CHECK(nodes <= kMaxSchemaNodes, "{}: the schema has more than {} JSON values (the limit)", opts.what,
               kMaxSchemaNodes);
  CompileBudget budget(opts.what);
  return SchemaCompiler(schema, opts).compile_root();
}

Grammar json_object_grammar(const JsonSchemaOptions& opts) {
  CompileBudget budget(opts.what);
  json empty_schema = json::object();
  return SchemaCompiler(empty_schema, opts).compile_any_object();
}

}  // namespace cypris::guided
