#include "engine/loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/loader/checkpoint_shards.h"

namespace cypris {
namespace {

using json = nlohmann::json;

// The safetensors reference implementation refuses headers above 100 MB as well.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;

struct DTypeInfo {
  const char* name;
  size_t size;
  std::optional<DType> dtype;
};

const DTypeInfo* find_dtype(const std::string& name) {
  static const DTypeInfo kTypes[] = {
      {"F32", 4, DType::F32}, {"F16", 2, DType::F16}, {"BF16", 2, DType::BF16}, {"F64", 8, {}},
      {"I64", 8, {}},         {"I32", 4, {}},         {"I16", 2, {}},           {"I8", 1, {}},
      {"U64", 8, {}},         {"U32", 4, {}},         {"U16", 2, {}},           {"U8", 1, {}},
      {"BOOL", 1, {}},        {"F8_E4M3", 1, {}},     {"F8_E5M2", 1, {}},
  };
  for (const auto& t : kTypes) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path), map_(path) {
  const std::string p = path.string();
  const size_t size = map_.size();
  CYPRIS_CHECK(size >= 8, "{}: truncated safetensors file ({} bytes; the 8-byte header length is missing)", p, size);
  const uint8_t* base = map_.data();
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian
  CYPRIS_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} is too big (limit {} bytes)", p, header_len,
               kMaxHeaderBytes);
  CYPRIS_CHECK(8 + header_len <= size, "{}: header length {} runs past the end of the file ({} bytes): truncated?", p,
               header_len, size);
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(base + 8), reinterpret_cast<const char*>(base + 8 + header_len));
  } catch (const json::exception& e) {
    CYPRIS_FAIL("{}: malformed safetensors header JSON: {}", p, e.what());
  }
  CYPRIS_CHECK(header.is_object(), "{}: safetensors header must be a JSON object", p);
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    CYPRIS_CHECK(entry.is_object(), "{}: tensor '{}': header entry must be an object", p, name);
    CYPRIS_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), "{}: tensor '{}': missing dtype", p, name);
    CYPRIS_CHECK(entry.contains("shape") && entry["shape"].is_array(), "{}: tensor '{}': missing shape", p, name);
    CYPRIS_CHECK(
        entry.contains("data_offsets") && entry["data_offsets"].is_array() && entry["data_offsets"].size() == 2,
        "{}: tensor '{}': data_offsets must be [begin, end]", p, name);
    SafetensorsTensor t;
    t.name = name;
    t.dtype_name = entry["dtype"].get<std::string>();
    const DTypeInfo* info = find_dtype(t.dtype_name);
    CYPRIS_CHECK(info != nullptr, "{}: tensor '{}': unknown dtype '{}'", p, name, t.dtype_name);
    t.dtype = info->dtype;
    CYPRIS_CHECK(entry["shape"].size() <= 16, "{}: tensor '{}': shape has {} dimensions (at most 16)", p, name,
                 entry["shape"].size());
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      CYPRIS_CHECK(d.is_number_unsigned(), "{}: tensor '{}': shape entries must be non-negative integers", p, name);
      const uint64_t v = d.get<uint64_t>();
      CYPRIS_CHECK(v == 0 || numel <= (uint64_t{1} << 62) / v, "{}: tensor '{}': shape is too large", p, name);
      numel *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = entry["data_offsets"];
    CYPRIS_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                 "{}: tensor '{}': data_offsets must be non-negative integers", p, name);
    const uint64_t begin = off[0].get<uint64_t>();
    const uint64_t end = off[1].get<uint64_t>();
    CYPRIS_CHECK(begin <= end && end <= data_size,
                 "{}: tensor '{}': data_offsets [{}, {}] are outside the data section ({} bytes): truncated or "
                 "corrupt file",
                 p, name, begin, end, data_size);
    // numel * size could wrap past 2^64 (shape [2^62] of F64 "needs" 0 bytes): compare by division.
    CYPRIS_CHECK(numel <= data_size / info->size,
                 "{}: tensor '{}': shape holds {} elements of {}, more than the data section ({} bytes) can", p, name,
                 numel, t.dtype_name, data_size);
    CYPRIS_CHECK(end - begin == numel * info->size,
                 "{}: tensor '{}': shape and dtype {} need {} bytes but data_offsets give {}", p, name, t.dtype_name,
                 numel * info->size, end - begin);
    t.data = data + begin;
    t.nbytes = static_cast<size_t>(end - begin);
    tensors_.emplace(name, std::move(t));
  }
}

SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

bool SafetensorsCheckpoint::present(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") return true;
  }
  return std::filesystem::exists(dir / "model.safetensors.index.json");
}

namespace {

const ShardNaming kSafetensorsShards{"model.safetensors.index.json", "model.safetensors",
                                     [](const std::filesystem::path& p) { return p.extension() == ".safetensors"; },
                                     "*.safetensors files"};

}  // namespace

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& dir,
                                             const std::vector<std::string>& ignore_patterns) {
  index_shards(dir, kSafetensorsShards, list_shards(dir, kSafetensorsShards, ignore_patterns), files_, index_);
}

const SafetensorsTensor* SafetensorsCheckpoint::find(const std::string& name, const SafetensorsFile** file) const {
  auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  if (file) *file = it->second.second;
  return it->second.first;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : index_) out.push_back(name);
  return out;
}

}  // namespace cypris
