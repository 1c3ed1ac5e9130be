// Python str operations for the chat-template interpreter (see strings.h).
#include "engine/chat/jinja/strings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "engine/chat/jinja/value.h"

namespace cypris::jinja {

uint32_t utf8_decode(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  size_t j = i + 1;
  for (int k = 1; k < len && j < s.size(); ++k, ++j) cp = (cp << 6) | (static_cast<unsigned char>(s[j]) & 0x3F);
  i = j;
  return cp;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    bool alpha = std::isalpha(u);
    if (alpha) c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
    prev_cased = alpha;
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    bool sep = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out += c;
      word_start = true;
    } else {
      out += static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
      word_start = false;
    }
  }
  return out;
}

std::string py_strip(std::string_view s, std::string_view chars, bool left, bool right, bool whitespace) {
  std::vector<uint32_t> set;
  for (size_t i = 0; i < chars.size();) set.push_back(utf8_decode(chars, i));
  auto strip_cp = [&](uint32_t cp) {
    return whitespace ? is_py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t j = begin;
      if (!strip_cp(utf8_decode(s, j))) break;
      begin = j;
    }
  }
  if (right) {
    while (end > begin) {
      size_t k = end - 1;
      while (k > begin && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      size_t j = k;
      if (!strip_cp(utf8_decode(s, j))) break;
      end = k;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

namespace {
// Splits on runs of whitespace, at most maxsplit times (negative: unlimited).
std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    while (i < s.size()) {  // skip whitespace
      size_t j = i;
      if (!is_py_space(utf8_decode(s, j))) break;
      i = j;
    }
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      std::string rest(s.substr(i));
      out.push_back(py_strip(rest, "", false, true, true));
      break;
    }
    size_t start = i;
    while (i < s.size()) {
      size_t j = i;
      if (is_py_space(utf8_decode(s, j))) break;
      i = j;
    }
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}
}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (!sep) return split_whitespace(s, maxsplit);
  std::vector<std::string> out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t k = s.find(*sep, start);
    if (k == std::string_view::npos) break;
    out.emplace_back(s.substr(start, k - start));
    start = k + sep->size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (!sep || maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  size_t end = s.size();
  while (static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t k = s.rfind(*sep, end - sep->size());
    if (k == std::string_view::npos) break;
    out.emplace_back(s.substr(k + sep->size(), end - k - sep->size()));
    end = k;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.emplace_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view neu, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `neu` around every character
    auto chars = utf8_chars(s);
    int64_t done = 0;
    for (auto c : chars) {
      if (count < 0 || done < count) out += neu, ++done;
      out += c;
    }
    if (count < 0 || done < count) out += neu;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t k = s.find(old, start);
    if (k == std::string_view::npos) break;
    out += s.substr(start, k - start);
    out += neu;
    start = k + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t k = s.find(sub); k != std::string_view::npos; k = s.find(sub, k + sub.size())) ++n;
  return n;
}

int64_t py_find(std::string_view s, std::string_view sub, bool reverse) {
  size_t k = reverse ? s.rfind(sub) : s.find(sub);
  if (k == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, k)));
}

std::optional<int64_t> parse_py_int(std::string_view s) {
  std::string t = py_strip(s, "", true, true, true);
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  if (!t.empty() && t[0] == '+') t.erase(0, 1);
  int64_t v = 0;
  auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_py_float(std::string_view s) {
  std::string t = py_strip(s, "", true, true, true);
  // strtod also reads hex ("0x1"), which Python's float() rejects.
  if (t.empty() || t.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

}  // namespace cypris::jinja
