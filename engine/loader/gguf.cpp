#include "engine/loader/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <regex>

#include "engine/common/dtype.h"
#include "engine/common/error.h"

namespace cypris {

namespace {

// ggml's own limits: a tensor has at most 4 dimensions. Arrays of arrays nest rarely (never
// deeper than 2 in real files); the cap keeps a hostile file from exhausting the stack.
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;
// Elements of one tensor: far beyond any file (2^58), and small enough that bytes never overflow.
constexpr uint64_t kMaxElements = uint64_t{1} << 58;

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// Decodes one little-endian scalar of type t at p into integer bits and a double.
void decode_scalar(GgufType t, const uint8_t* p, uint64_t& u, double& f) {
  const uint64_t raw = load_le(p, scalar_size(t));
  switch (t) {
    case GgufType::I8: u = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(raw))); break;
    case GgufType::I16: u = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(raw))); break;
    case GgufType::I32: u = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(raw))); break;
    default: u = raw;
  }
  if (t == GgufType::F32) {
    float x;
    const uint32_t b = static_cast<uint32_t>(raw);
    std::memcpy(&x, &b, 4);
    f = x;
  } else if (t == GgufType::F64) {
    std::memcpy(&f, &raw, 8);
  } else if (t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64) {
    f = static_cast<double>(static_cast<int64_t>(u));
  } else {
    f = static_cast<double>(u);
  }
}

bool is_int_type(GgufType t) {
  return t == GgufType::U8 || t == GgufType::I8 || t == GgufType::U16 || t == GgufType::I16 || t == GgufType::U32 ||
         t == GgufType::I32 || t == GgufType::U64 || t == GgufType::I64;
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32", "i32", "f32",
                                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

bool GgufValue::is_integer() const { return is_int_type(type); }

int64_t GgufValue::as_int() const { return static_cast<int64_t>(u_); }

double GgufValue::as_double() const { return f_; }

int64_t GgufValue::int_at(uint64_t i) const {
  uint64_t u;
  double f;
  decode_scalar(elem_type_, raw_ + i * scalar_size(elem_type_), u, f);
  return static_cast<int64_t>(u);
}

double GgufValue::double_at(uint64_t i) const {
  uint64_t u;
  double f;
  decode_scalar(elem_type_, raw_ + i * scalar_size(elem_type_), u, f);
  return f;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// Reads the header, metadata and tensor infos with a bounds-checked cursor. Every failure names
// the file, the byte offset and the field being read.
class GgufParser {
 public:
  GgufParser(GgufFile& f, const uint8_t* base, size_t size) : f_(f), base_(base), size_(size) {}

  void parse() {
    where_ = "magic";
    need(4);
    CYPRIS_CHECK(std::memcmp(base_, "GGUF", 4) == 0, "{}: not a GGUF file (the first 4 bytes are not 'GGUF')", file());
    pos_ = 4;
    where_ = "version";
    const uint32_t version = static_cast<uint32_t>(read_uint(4));
    if (version != 2 && version != 3) {
      // A big-endian file reads as a huge version number here.
      CYPRIS_CHECK(!(version & 0xffff) && (version >> 16) != 0,
                   "{}: GGUF version {} is not supported (supported: 2, 3)", file(), version);
      CYPRIS_FAIL("{}: big-endian GGUF files are not supported (version field reads {:#x})", file(), version);
    }
    f_.version_ = version;
    where_ = "tensor count";
    const uint64_t n_tensors = read_uint(8);
    where_ = "metadata count";
    const uint64_t n_kv = read_uint(8);
    // A metadata pair takes at least 12 bytes (key length, value type), a tensor info at least 28
    // (name length, dim count, one dim, type, offset): larger counts cannot fit in the file.
    CYPRIS_CHECK(n_kv <= remaining() / 12, "{}: metadata count {} cannot fit in the {} bytes left of the file", file(),
                 n_kv, remaining());
    CYPRIS_CHECK(n_tensors <= remaining() / 28, "{}: tensor count {} cannot fit in the {} bytes left of the file",
                 file(), n_tensors, remaining());
    for (uint64_t i = 0; i < n_kv; ++i) {
      where_ = fmt::format("metadata #{} key", i);
      std::string key(read_string());
      where_ = "metadata '" + key + "'";
      GgufValue v;
      v.type = read_type();
      read_value(v, 0);
      CYPRIS_CHECK(f_.kv_.emplace(key, std::move(v)).second, "{}: metadata key '{}' appears twice", file(), key);
    }
    if (const GgufValue* a = f_.find("general.alignment")) {
      CYPRIS_CHECK(a->type == GgufType::U32, "{}: metadata 'general.alignment' must be a u32, got {}", file(),
                   gguf_type_name(a->type));
      const uint64_t al = static_cast<uint64_t>(a->as_int());
      CYPRIS_CHECK(al > 0 && (al & (al - 1)) == 0, "{}: metadata 'general.alignment' is {}; must be a power of two",
                   file(), al);
      f_.alignment_ = al;
    }
    f_.tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) read_tensor_info(i);
    // The data section starts at the next multiple of the alignment.
    const uint64_t al = f_.alignment_;
    const uint64_t data = pos_ % al == 0 ? pos_ : pos_ + (al - pos_ % al);
    f_.data_offset_ = data;
    std::map<std::string_view, int> seen;
    for (auto& t : f_.tensors_) {
      CYPRIS_CHECK(seen.emplace(t.name, 0).second, "{}: tensor '{}' appears twice", file(), t.name);
      CYPRIS_CHECK(t.offset % al == 0, "{}: tensor '{}': offset {} is not a multiple of the alignment {}", file(),
                   t.name, t.offset, al);
      CYPRIS_CHECK(data <= size_ && t.offset <= size_ - data && t.nbytes <= size_ - data - t.offset,
                   "{}: tensor '{}': its {} bytes at offset {} of the data section (which starts at byte {}) run past "
                   "the end of the file ({} bytes): truncated?",
                   file(), t.name, t.nbytes, t.offset, data, size_);
      t.data = base_ + data + t.offset;
    }
  }

 private:
  std::string file() const { return f_.path_.string(); }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n) {
    CYPRIS_CHECK(n <= remaining(), "{}: truncated at byte {} while reading {} ({} bytes needed, {} left)", file(), pos_,
                 where_, n, remaining());
  }
  uint64_t read_uint(size_t n) {
    need(n);
    const uint64_t v = load_le(base_ + pos_, n);
    pos_ += n;
    return v;
  }
  std::string_view read_string() {
    const uint64_t len = read_uint(8);
    CYPRIS_CHECK(len <= remaining(), "{}: {}: string length {} at byte {} runs past the end of the file ({} bytes left)",
                 file(), where_, len, pos_ - 8, remaining());
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }
  GgufType read_type() {
    const uint32_t t = static_cast<uint32_t>(read_uint(4));
    CYPRIS_CHECK(known_type(t), "{}: {}: unknown value type {} (known: 0-12)", file(), where_, t);
    return static_cast<GgufType>(t);
  }

  void read_value(GgufValue& v, int depth) {
    if (v.type == GgufType::String) {
      v.str_ = read_string();
      return;
    }
    if (v.type != GgufType::Array) {
      const size_t n = scalar_size(v.type);
      need(n);
      decode_scalar(v.type, base_ + pos_, v.u_, v.f_);
      if (v.type == GgufType::Bool) {
        CYPRIS_CHECK(v.u_ <= 1, "{}: {}: a bool must be 0 or 1, got {}", file(), where_, v.u_);
      }
      pos_ += n;
      return;
    }
    CYPRIS_CHECK(depth < kMaxArrayDepth, "{}: {}: arrays nested deeper than {} levels", file(), where_, kMaxArrayDepth);
    v.elem_type_ = read_type();
    const uint64_t count = read_uint(8);
    v.count_ = count;
    if (v.elem_type_ == GgufType::String) {
      CYPRIS_CHECK(count <= remaining() / 8, "{}: {}: {} strings cannot fit in the {} bytes left of the file", file(),
                   where_, count, remaining());
      v.strs_.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) v.strs_.push_back(read_string());
    } else if (v.elem_type_ == GgufType::Array) {
      CYPRIS_CHECK(count <= remaining() / 12, "{}: {}: {} arrays cannot fit in the {} bytes left of the file", file(),
                   where_, count, remaining());
      v.items_.resize(static_cast<size_t>(count));
      for (auto& item : v.items_) {
        item.type = GgufType::Array;
        read_value(item, depth + 1);
      }
    } else {
      const size_t es = scalar_size(v.elem_type_);
      CYPRIS_CHECK(count <= remaining() / es, "{}: {}: {} elements of {} bytes cannot fit in the {} bytes left of the file",
                   file(), where_, count, es, remaining());
      v.raw_ = base_ + pos_;
      if (v.elem_type_ == GgufType::Bool) {
        for (uint64_t i = 0; i < count; ++i) {
          CYPRIS_CHECK(v.raw_[i] <= 1, "{}: {}: element {} of a bool array is {}, not 0 or 1", file(), where_, i,
                       v.raw_[i]);
        }
      }
      pos_ += count * es;
    }
  }

  void read_tensor_info(uint64_t i) {
    GgufTensorInfo t;
    where_ = fmt::format("tensor #{} name", i);
    t.name = std::string(read_string());
    where_ = "tensor '" + t.name + "'";
    const uint32_t n_dims = static_cast<uint32_t>(read_uint(4));
    CYPRIS_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "{}: tensor '{}': {} dimensions (allowed: 1 to {})", file(), t.name,
                 n_dims, kMaxDims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const int64_t ne = static_cast<int64_t>(read_uint(8));
      CYPRIS_CHECK(ne >= 1, "{}: tensor '{}': dimension {} is {} (must be positive)", file(), t.name, d, ne);
      CYPRIS_CHECK(static_cast<uint64_t>(ne) <= kMaxElements / numel,
                   "{}: tensor '{}': the element count overflows (dimension {} is {})", file(), t.name, d, ne);
      numel *= static_cast<uint64_t>(ne);
      t.ne.push_back(ne);
    }
    const uint32_t type = static_cast<uint32_t>(read_uint(4));
    const auto traits = ggml_type_traits(type);
    CYPRIS_CHECK(traits.has_value(), "{}: tensor '{}': unknown ggml type id {}", file(), t.name, type);
    t.type = traits->type;
    CYPRIS_CHECK(t.ne[0] % traits->block_elems == 0,
                 "{}: tensor '{}': type {} stores blocks of {} elements but its rows have {}", file(), t.name,
                 traits->name, traits->block_elems, t.ne[0]);
    // numel <= 2^58 and no type takes more than 8 bytes per element, so this cannot overflow.
    t.nbytes = numel / traits->block_elems * traits->block_bytes;
    t.offset = read_uint(8);
    t.shape.assign(t.ne.rbegin(), t.ne.rend());
    f_.tensors_.push_back(std::move(t));
  }

  GgufFile& f_;
  const uint8_t* base_;
  size_t size_;
  uint64_t pos_ = 0;
  std::string where_;
};

GgufFile::GgufFile(const std::filesystem::path& path) : path_(path), map_(path) {
  size_ = map_.size();
  CYPRIS_CHECK(size_ >= 24, "{}: truncated GGUF file ({} bytes; the header alone takes 24)", path_.string(), size_);
  GgufParser(*this, map_.data(), size_).parse();
}

GgufFile::GgufFile(std::string name, const void* data, size_t size) : path_(std::move(name)), size_(size) {
  CYPRIS_CHECK(size_ >= 24, "{}: truncated GGUF file ({} bytes; the header alone takes 24)", path_.string(), size_);
  GgufParser(*this, static_cast<const uint8_t*>(data), size_).parse();
}

GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

// ---- split models -------------------------------------------------------------------------------

namespace {

struct SplitName {
  std::string prefix;  // path without "-00001-of-00003.gguf"
  int index = 0;       // 1-based
  int count = 0;
};

std::optional<SplitName> parse_split_name(const std::filesystem::path& path) {
  static const std::regex kSplit(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  const std::string s = path.string();
  if (!std::regex_match(s, m, kSplit)) return std::nullopt;
  return SplitName{m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
}

std::optional<int64_t> split_key(const GgufFile& f, const char* key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  CYPRIS_CHECK(v->is_integer(), "{}: metadata '{}' must be an integer, got {}", f.path().string(), key,
               gguf_type_name(v->type));
  return v->as_int();
}

}  // namespace

GgufModel::GgufModel(const std::filesystem::path& path) {
  files_.push_back(std::make_unique<GgufFile>(path));
  const auto count = split_key(*files_.front(), "split.count");
  if (count && *count > 1) {
    const auto name = parse_split_name(path);
    CYPRIS_CHECK(name.has_value(),
                 "{}: metadata 'split.count' is {} but the file name is not of the form NAME-00001-of-{:05d}.gguf, so "
                 "the other parts cannot be found",
                 path.string(), *count, *count);
    CYPRIS_CHECK(name->count == *count && *count <= 9999,
                 "{}: the file name says {} parts but metadata 'split.count' says {}", path.string(), name->count,
                 *count);
    const auto no = split_key(*files_.front(), "split.no").value_or(0);
    if (no != 0) {
      // Opened from a later part: start again from the first, which holds the metadata.
      files_.clear();
      files_.push_back(std::make_unique<GgufFile>(fmt::format("{}-{:05d}-of-{:05d}.gguf", name->prefix, 1, *count)));
      CYPRIS_CHECK(split_key(*files_.front(), "split.no").value_or(0) == 0, "{}: metadata 'split.no' must be 0",
                   files_.front()->path().string());
    }
    for (int i = 2; i <= *count; ++i) {
      const std::filesystem::path part = fmt::format("{}-{:05d}-of-{:05d}.gguf", name->prefix, i, *count);
      CYPRIS_CHECK(std::filesystem::exists(part), "{}: part {} of {} of this split model is missing ({})",
                   path.string(), i, *count, part.string());
      files_.push_back(std::make_unique<GgufFile>(part));
      const auto pno = split_key(*files_.back(), "split.no");
      CYPRIS_CHECK(pno && *pno == i - 1, "{}: metadata 'split.no' is {} but this is part {} (split.no {})",
                   part.string(), pno ? std::to_string(*pno) : "missing", i, i - 1);
    }
  }
  build_index();
}

GgufModel::GgufModel(std::unique_ptr<GgufFile> file) {
  files_.push_back(std::move(file));
  build_index();
}

void GgufModel::build_index() {
  for (const auto& f : files_) {
    for (const auto& t : f->tensors()) {
      CYPRIS_CHECK(index_.emplace(t.name, std::make_pair(&t, f.get())).second,
                   "{}: tensor '{}' appears in two parts of the split model", f->path().string(), t.name);
    }
  }
  if (const auto total = split_key(main(), "split.tensors.count")) {
    CYPRIS_CHECK(*total == static_cast<int64_t>(index_.size()),
                 "{}: metadata 'split.tensors.count' is {} but the {} parts hold {} tensors", describe(), *total,
                 files_.size(), index_.size());
  }
}

std::string GgufModel::describe() const {
  if (files_.size() == 1) return main().path().string();
  return fmt::format("{} (+{} more parts)", main().path().string(), files_.size() - 1);
}

const GgufTensorInfo* GgufModel::tensor(std::string_view name, const GgufFile** file) const {
  auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  if (file) *file = it->second.second;
  return it->second.first;
}

std::optional<int64_t> GgufModel::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  CYPRIS_CHECK(v->is_integer(), "{}: metadata '{}' must be an integer, got {}", describe(), key,
               gguf_type_name(v->type));
  CYPRIS_CHECK(v->type != GgufType::U64 || v->as_int() >= 0, "{}: metadata '{}' is too large", describe(), key);
  return v->as_int();
}

int64_t GgufModel::require_int(std::string_view key) const {
  auto v = get_int(key);
  CYPRIS_CHECK(v.has_value(), "{}: required metadata '{}' is missing", describe(), key);
  return *v;
}

std::optional<double> GgufModel::get_double(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  CYPRIS_CHECK(v->is_number(), "{}: metadata '{}' must be a number, got {}", describe(), key, gguf_type_name(v->type));
  return v->as_double();
}

std::optional<bool> GgufModel::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  CYPRIS_CHECK(v->type == GgufType::Bool, "{}: metadata '{}' must be a bool, got {}", describe(), key,
               gguf_type_name(v->type));
  return v->as_bool();
}

std::optional<std::string> GgufModel::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  CYPRIS_CHECK(v->type == GgufType::String, "{}: metadata '{}' must be a string, got {}", describe(), key,
               gguf_type_name(v->type));
  return std::string(v->as_string());
}

const GgufValue* GgufModel::get_array(std::string_view key, std::optional<GgufType> elem) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  CYPRIS_CHECK(v->type == GgufType::Array, "{}: metadata '{}' must be an array, got {}", describe(), key,
               gguf_type_name(v->type));
  if (elem) {
    const bool ok = *elem == v->elem_type() || (is_int_type(*elem) && is_int_type(v->elem_type())) ||
                    (*elem == GgufType::F32 && (v->elem_type() == GgufType::F64 || is_int_type(v->elem_type())));
    CYPRIS_CHECK(ok, "{}: metadata '{}' must be an array of {}, got an array of {}", describe(), key,
                 gguf_type_name(*elem), gguf_type_name(v->elem_type()));
  }
  return v;
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  }
  return path.extension() == ".gguf";
}

std::string gguf_type_mix(const GgufModel& model) {
  std::map<std::string_view, int> counts;
  for (const auto& [name, entry] : model.tensors()) ++counts[ggml_traits(entry.first->type).name];
  std::vector<std::pair<std::string_view, int>> v(counts.begin(), counts.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    out += fmt::format("{}{}: {}{}", i ? ", " : "", v[i].first, v[i].second, i == 0 ? " tensors" : "");
  }
  return out;
}

}  // namespace cypris
