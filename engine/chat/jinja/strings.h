// Python str operations the chat-template interpreter needs (strip, split, replace, title, ...),
// on UTF-8 strings with code-point semantics where Python's differ from bytes. Case mapping is
// ASCII-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cypris::jinja {

std::string ascii_lower(std::string_view s);
std::string ascii_upper(std::string_view s);
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_title(std::string_view s);       // str.title()
std::string jinja_title(std::string_view s);    // the |title filter (words split at whitespace, - ( { [ <)

// str.strip / lstrip / rstrip: `whitespace` strips Python whitespace, else any code point in `chars`.
std::string py_strip(std::string_view s, std::string_view chars, bool left, bool right, bool whitespace);
// str.split(sep, maxsplit); an empty optional sep splits on runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old, std::string_view neu, int64_t count);
int64_t py_count(std::string_view s, std::string_view sub);
// str.find / rfind in code points; -1 when absent.
int64_t py_find(std::string_view s, std::string_view sub, bool reverse);

std::optional<int64_t> parse_py_int(std::string_view s);
std::optional<double> parse_py_float(std::string_view s);

uint32_t utf8_decode(std::string_view s, size_t& i);  // code point at i, advances i
bool is_py_space(uint32_t cp);

}  // namespace cypris::jinja
