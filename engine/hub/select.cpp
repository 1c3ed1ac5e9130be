// Which files of a repo a download takes: include/exclude globs and the default set.
#include <fnmatch.h>

#include <algorithm>

#include "engine/hub/hub.h"

namespace cypris::hub {
namespace {

// Python's fnmatch semantics ('*' crosses '/'); "dir/" means everything below dir.
bool matches(const std::string& pattern, const std::string& path) {
  std::string p = pattern;
  if (!p.empty() && p.back() == '/') p += "*";
  return ::fnmatch(p.c_str(), path.c_str(), 0) == 0;
}

bool matches_any(const std::vector<std::string>& patterns, const std::string& path) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return matches(p, path); });
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_pickle_weight(const std::string& path) {
  return ends_with(path, ".bin") || ends_with(path, ".pth") || ends_with(path, ".pt");
}

}  // namespace

const std::vector<std::string>& default_include_patterns() {
  static const std::vector<std::string> kDefault = {
      "*.safetensors", "*.bin",      "*.pth", "*.pt",     // weights (pickles dropped when safetensors exist)
      "*.json",                                           // config, generation config, tokenizer, index
      "*.model",       "*.tiktoken", "*.txt", "*.jinja",  // sentencepiece, tiktoken, vocab/merges, templates
  };
  return kDefault;
}

std::vector<RepoFile> select_files(const std::vector<RepoFile>& files, const std::vector<std::string>& include,
                                   const std::vector<std::string>& exclude) {
  const bool use_default = include.empty();
  const auto& inc = use_default ? default_include_patterns() : include;
  std::vector<RepoFile> out;
  for (const auto& f : files) {
    if (matches_any(inc, f.path) && !matches_any(exclude, f.path)) out.push_back(f);
  }
  if (use_default) {
    bool has_safetensors =
        std::any_of(out.begin(), out.end(), [](const RepoFile& f) { return ends_with(f.path, ".safetensors"); });
    if (has_safetensors) {
      out.erase(std::remove_if(out.begin(), out.end(), [](const RepoFile& f) { return is_pickle_weight(f.path); }),
                out.end());
    }
  }
  return out;
}

}  // namespace cypris::hub
