#include "engine/loader/checkpoint_shards.h"

#include <fnmatch.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cypris {

const std::string* ignored_by(const std::string& file, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (::fnmatch(p.c_str(), file.c_str(), 0) == 0) return &p;
  }
  return nullptr;
}

ShardList list_shards(const std::filesystem::path& dir, const ShardNaming& naming,
                      const std::vector<std::string>& ignore_patterns) {
  ShardList out;
  const auto index_path = dir / naming.index_name;
  if (std::filesystem::exists(index_path)) {
    std::ifstream in(index_path);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
      CYPRIS_FAIL("{}: malformed JSON: {}", index_path.string(), e.what());
    }
    CYPRIS_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                 "{}: missing 'weight_map' object", index_path.string());
    for (const auto& [name, file] : j["weight_map"].items()) {
      CYPRIS_CHECK(file.is_string(), "{}: weight_map['{}'] must be a file name", index_path.string(), name);
      const std::string f = file.get<std::string>();
      const std::filesystem::path fp(f);
      // A shard name is a plain file in the folder: no absolute paths or parent references.
      CYPRIS_CHECK(!f.empty() && !fp.is_absolute() && f.find("..") == std::string::npos && !fp.has_parent_path(),
                   "{}: weight_map['{}'] names '{}', which is not a file in the model folder", index_path.string(),
                   name, f);
      const std::string* pattern = ignored_by(f, ignore_patterns);
      CYPRIS_CHECK(pattern == nullptr, "{}: shard '{}' holds tensor '{}' but --ignore-patterns '{}' skips it",
                   index_path.string(), f, name, *pattern);
      out.weight_map[name] = f;
      if (std::find(out.paths.begin(), out.paths.end(), dir / f) == out.paths.end()) out.paths.push_back(dir / f);
    }
  } else if (std::filesystem::exists(dir / naming.single_name) && !ignored_by(naming.single_name, ignore_patterns)) {
    out.paths.push_back(dir / naming.single_name);
  } else {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (naming.accepts(e.path()) && !ignored_by(e.path().filename().string(), ignore_patterns)) {
        out.paths.push_back(e.path());
      }
    }
    std::sort(out.paths.begin(), out.paths.end());
  }
  CYPRIS_CHECK(!out.paths.empty(), "{}: no {} found{} (use --load-format dummy for random weights)", dir.string(),
               naming.what, ignore_patterns.empty() ? "" : " that --ignore-patterns leaves");
  return out;
}

}  // namespace cypris
