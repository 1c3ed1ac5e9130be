// GGUF files (llama.cpp's model format, versions 2 and 3, little-endian) read through mmap: the
// metadata (every value type, arrays nested to any sane depth) and the tensor infos, with every
// count, length, size and offset range-checked against the file before it is used, so a truncated
// or malformed file is an Error naming the file and the field, never a crash or a huge allocation.
// GgufModel joins the files of a split model (name-00001-of-00003.gguf ...).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/loader/mapped_file.h"
#include "kernels/common/ggml_types.h"

namespace cypris {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
  String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// One metadata value. Strings point into the mapping (valid while the file is open); numeric
// arrays keep their raw little-endian bytes there and are decoded on access.
class GgufValue {
 public:
  GgufType type = GgufType::U8;

  bool is_integer() const;
  bool is_number() const { return is_integer() || type == GgufType::F32 || type == GgufType::F64; }
  // Any integer type, as int64 (a U64 above INT64_MAX is an Error from the caller's check).
  int64_t as_int() const;
  double as_double() const;  // any number
  bool as_bool() const { return u_ != 0; }
  std::string_view as_string() const { return str_; }

  // Arrays.
  GgufType elem_type() const { return elem_type_; }
  uint64_t size() const { return count_; }
  int64_t int_at(uint64_t i) const;
  double double_at(uint64_t i) const;
  std::string_view string_at(uint64_t i) const { return strs_[i]; }
  const GgufValue& array_at(uint64_t i) const { return items_[i]; }

 private:
  friend class GgufParser;
  uint64_t u_ = 0;  // integer bits (sign-extended for signed types) or bool
  double f_ = 0;
  std::string_view str_;
  GgufType elem_type_ = GgufType::U8;
  uint64_t count_ = 0;
  const uint8_t* raw_ = nullptr;         // numeric array elements
  std::vector<std::string_view> strs_;   // string array
  std::vector<GgufValue> items_;         // array of arrays
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;     // ggml order: ne[0] is the row length
  std::vector<int64_t> shape;  // row-major (Cypris/HF) order: ne reversed
  uint64_t offset = 0;         // from the start of the data section
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  int64_t numel() const;
};

class GgufFile {
 public:
  // Maps and validates the whole file. Throws Error naming the file and field.
  explicit GgufFile(const std::filesystem::path& path);
  // Validates bytes already in memory (not copied: they must outlive the object); `name` stands
  // for the file in messages. For tests and the fuzzer.
  GgufFile(std::string name, const void* data, size_t size);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  // In file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

 private:
  friend class GgufParser;
  std::filesystem::path path_;
  MappedFile map_;  // empty for in-memory bytes
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<GgufTensorInfo> tensors_;
};

// The files of one model: a single .gguf, or all the splits when path names one of
// PREFIX-0000i-of-0000N.gguf (metadata from the first split; tensors from all of them).
class GgufModel {
 public:
  explicit GgufModel(const std::filesystem::path& path);
  // One file already opened (no split parts are looked for).
  explicit GgufModel(std::unique_ptr<GgufFile> file);

  const GgufFile& main() const { return *files_.front(); }
  const std::vector<std::unique_ptr<GgufFile>>& files() const { return files_; }
  std::string describe() const;  // the path of the first file (and the split count)
  const GgufValue* find(std::string_view key) const { return main().find(key); }
  const GgufTensorInfo* tensor(std::string_view name, const GgufFile** file = nullptr) const;
  const std::map<std::string, std::pair<const GgufTensorInfo*, const GgufFile*>, std::less<>>& tensors() const {
    return index_;
  }

  // Typed metadata access; Error naming the file and key when the key is missing (required
  // forms) or holds another type.
  std::optional<int64_t> get_int(std::string_view key) const;
  int64_t require_int(std::string_view key) const;
  std::optional<double> get_double(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  // An array key whose elements have type elem (or any integer / number for the int / double
  // helpers); nullptr when absent.
  const GgufValue* get_array(std::string_view key, std::optional<GgufType> elem) const;

 private:
  void build_index();
  std::vector<std::unique_ptr<GgufFile>> files_;
  std::map<std::string, std::pair<const GgufTensorInfo*, const GgufFile*>, std::less<>> index_;
};

// True for a path that names a GGUF file (by its magic when it exists, else by the .gguf suffix).
bool is_gguf_path(const std::filesystem::path& path);

// "Q4_K: 193 tensors, Q6_K: 33, F32: 65": tensor counts by type, most frequent first.
std::string gguf_type_mix(const GgufModel& model);

}  // namespace cypris
