// The shard files of a checkpoint folder, shared by the safetensors and PyTorch .bin readers: the
// index file's weight_map when present (which shard holds each tensor), else the single-file name,
// else every file the naming accepts, in name order. Files that --ignore-patterns (fnmatch globs)
// match are left out.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/common/error.h"
#include "engine/loader/safetensors.h"

namespace cypris {

struct ShardNaming {
  std::string index_name;                         // model.safetensors.index.json
  std::string single_name;                        // model.safetensors
  bool (*accepts)(const std::filesystem::path&);  // a shard file without an index
  std::string what;                               // "*.safetensors files", named when none is found
};

struct ShardList {
  std::vector<std::filesystem::path> paths;
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name; empty without an index
};

// The first pattern of --ignore-patterns that matches a file name, or nullptr.
const std::string* ignored_by(const std::string& file, const std::vector<std::string>& patterns);

ShardList list_shards(const std::filesystem::path& dir, const ShardNaming& naming,
                      const std::vector<std::string>& ignore_patterns);

// Opens each shard as a File and indexes its tensors. With an index a tensor counts only in the
// shard the index names, and every tensor the index lists must be found.
template <typename File>
void index_shards(const std::filesystem::path& dir, const ShardNaming& naming, const ShardList& shards,
                  std::vector<std::unique_ptr<File>>& files,
                  std::map<std::string, std::pair<const SafetensorsTensor*, const File*>>& index) {
  for (const auto& path : shards.paths) {
    CYPRIS_CHECK(std::filesystem::is_regular_file(path), "{}: shard listed in {} is missing", path.string(),
                 naming.index_name);
    files.push_back(std::make_unique<File>(path));
    const File* f = files.back().get();
    for (const auto& [name, t] : f->tensors()) {
      if (!shards.weight_map.empty()) {
        auto it = shards.weight_map.find(name);
        if (it == shards.weight_map.end() || dir / it->second != path) continue;  // the index decides
      }
      auto [pos, inserted] = index.emplace(name, std::make_pair(&t, f));
      CYPRIS_CHECK(inserted, "tensor '{}' appears in both {} and {}", name, pos->second.second->path().string(),
                   path.string());
    }
  }
  for (const auto& [name, file] : shards.weight_map) {
    CYPRIS_CHECK(index.count(name), "{}: tensor '{}' is listed in {} but missing", (dir / file).string(), name,
                 naming.index_name);
  }
}

}  // namespace cypris
