// Safetensors checkpoints read through mmap: one file, or shards listed in
// model.safetensors.index.json. Every header, offset and size is validated on open, so a
// truncated or malformed file is an Error naming the file and the tensor, never a crash.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/dtype.h"
#include "engine/loader/mapped_file.h"

namespace cypris {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;      // as written in the header: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;  // set for the dtypes weights may use (F32, F16, BF16)
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping
  size_t nbytes = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps the file and validates its header. Throws Error naming the file (and tensor).
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }

 private:
  std::filesystem::path path_;
  MappedFile map_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// All the safetensors files of a model folder: model.safetensors.index.json when present (its
// weight_map says which shard holds each tensor), else model.safetensors, else every *.safetensors.
// Files whose name matches one of ignore_patterns (--ignore-patterns: fnmatch globs) are skipped;
// a shard the index needs that a pattern skips is an error naming both.
class SafetensorsCheckpoint {
 public:
  using File = SafetensorsFile;
  explicit SafetensorsCheckpoint(const std::filesystem::path& dir,
                                 const std::vector<std::string>& ignore_patterns = {});

  // The tensor and the file holding it; nullptr when no file has it.
  const SafetensorsTensor* find(const std::string& name, const SafetensorsFile** file = nullptr) const;
  std::vector<std::string> names() const;
  static bool present(const std::filesystem::path& dir);

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsTensor*, const SafetensorsFile*>> index_;
};

}  // namespace cypris
