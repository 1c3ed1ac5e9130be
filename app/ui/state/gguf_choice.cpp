#include "app/ui/state/gguf_choice.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>

namespace cypris {
namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Bits per weight of a quant name, roughly, to rank them ("IQ4_XS" -> 4, "F16" -> 16).
int bits_of(const std::string& q) {
  static const std::regex kBits(R"((?:I?Q|F|BF)(\d+))");
  std::smatch m;
  return std::regex_search(q, m, kBits) ? std::stoi(m[1].str()) : 0;
}

}  // namespace

std::string gguf_quant_from_name(const std::string& file_name) {
  // llama.cpp's file type names: F32, F16, BF16, Q8_0, Q4_K_M, IQ4_XS, IQ2_XXS, Q3_K_L, TQ1_0, ...
  static const std::regex kQuant(R"((?:^|[-._])((?:B?F(?:16|32))|(?:T?I?Q\d(?:_[A-Z0-9]+)*))(?=[-._]|$))",
                                 std::regex::icase);
  std::string stem = file_name.substr(file_name.find_last_of('/') + 1);
  if (stem.size() > 5 && upper(stem.substr(stem.size() - 5)) == ".GGUF") stem.resize(stem.size() - 5);
  static const std::regex kSplit(R"(-\d{5}-of-\d{5}$)");
  stem = std::regex_replace(stem, kSplit, "");
  std::string found;
  for (std::sregex_iterator it(stem.begin(), stem.end(), kQuant), end; it != end; ++it) found = (*it)[1].str();
  return upper(found);  // the last match: names like "Q8_0-model-Q4_K_M" mean the final one
}

std::vector<GgufChoice> gguf_choices(const std::vector<HubFile>& files) {
  static const std::regex kPart(R"((.*)-(\d{5})-of-(\d{5})\.gguf)", std::regex::icase);
  std::map<std::string, GgufChoice> by_key;  // the path, or the split prefix
  for (const auto& f : files) {
    if (f.path.size() < 5 || upper(f.path.substr(f.path.size() - 5)) != ".GGUF") continue;
    std::smatch m;
    const bool part = std::regex_match(f.path, m, kPart);
    const std::string key = part ? m[1].str() + "-of-" + m[3].str() : f.path;
    GgufChoice& c = by_key[key];
    if (c.files.empty()) {
      c.size = 0;
      c.parts = part ? std::stoi(m[3].str()) : 1;
    }
    c.files.push_back(f.path);
    if (c.size >= 0) c.size = f.size < 0 ? -1 : c.size + f.size;
  }
  std::vector<GgufChoice> out;
  for (auto& [key, c] : by_key) {
    std::sort(c.files.begin(), c.files.end());
    c.path = c.files.front();
    c.quant = gguf_quant_from_name(c.path);
    // A split model with parts missing from the listing cannot load; it is not offered.
    if (static_cast<int>(c.files.size()) == c.parts) out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const GgufChoice& a, const GgufChoice& b) {
    if ((a.size < 0) != (b.size < 0)) return b.size < 0;
    return a.size < b.size;
  });
  return out;
}

int default_gguf_choice(const std::vector<GgufChoice>& choices) {
  if (choices.empty()) return -1;
  for (size_t i = 0; i < choices.size(); ++i)
    if (choices[i].quant == "Q4_K_M") return static_cast<int>(i);
  for (size_t i = 0; i < choices.size(); ++i)
    if (bits_of(choices[i].quant) >= 4) return static_cast<int>(i);
  return 0;
}

}  // namespace cypris
