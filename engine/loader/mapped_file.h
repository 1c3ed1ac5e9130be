// A file mapped read-only into memory: the storage that GGUF and safetensors tensors point into,
// so weights are read straight from the page cache. The mapping lives as long as the object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace cypris {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps the whole regular file at path; an empty file maps to no bytes. Throws Error naming the
  // file: it cannot be opened, is not a regular file, or cannot be mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cypris
