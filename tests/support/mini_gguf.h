// A minimal GGUF tensor locator for tests of the quantized kernels: header, metadata skipped
// (except general.alignment), tensor infos, aligned data offset. The engine's real reader lives in
// engine/loader; this one exists so kernel tests do not depend on it.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/common/dtype.h"

namespace cypris::test {

struct GgufTensor {
  uint32_t type = 0;
  std::vector<uint64_t> ne;
  uint64_t offset = 0;  // from the start of the data section
};

// Reads just enough of a GGUF file to find its tensors. Test-only: trusts the file (it is one of
// the reference files in testdata/gguf).
class MiniGguf {
 public:
  explicit MiniGguf(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(f), {});
    if (bytes_.size() < 24 || std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
      throw std::runtime_error(path + " is not a GGUF file");
    }
    pos_ = 8;  // magic, version
    const uint64_t n_tensors = u64(), n_kv = u64();
    uint64_t alignment = 32;
    for (uint64_t i = 0; i < n_kv; ++i) {
      const std::string key = str();
      const uint32_t type = u32();
      if (key == "general.alignment" && type == 4) {
        alignment = u32();
      } else {
        skip_value(type);
      }
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      const std::string name = str();
      GgufTensor t;
      const uint32_t nd = u32();
      for (uint32_t d = 0; d < nd; ++d) t.ne.push_back(u64());
      t.type = u32();
      t.offset = u64();
      tensors_[name] = t;
    }
    data_ = (pos_ + alignment - 1) / alignment * alignment;
  }

  const GgufTensor& tensor(const std::string& name) const { return tensors_.at(name); }
  const uint8_t* data(const GgufTensor& t) const { return bytes_.data() + data_ + t.offset; }
  size_t size() const { return bytes_.size(); }
  size_t data_start() const { return data_; }

 private:
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32() { return get<uint32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }
  std::string str() {
    const uint64_t n = u64();
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  void skip_value(uint32_t type) {
    static const int kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
      str();
    } else if (type == 9) {
      const uint32_t et = u32();
      const uint64_t n = u64();
      for (uint64_t i = 0; i < n; ++i) skip_value(et);
    } else {
      pos_ += kSize[type];
    }
  }

  std::vector<uint8_t> bytes_;
  size_t pos_ = 0;
  size_t data_ = 0;
  std::map<std::string, GgufTensor> tensors_;
};

// ggml type id -> DType for the types these tests meet (U8 for any other).
inline DType dtype_of_ggml(uint32_t id) {
  switch (id) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 30: return DType::BF16;
    case 2: return DType::Q4_0;
    case 3: return DType::Q4_1;
    case 6: return DType::Q5_0;
    case 7: return DType::Q5_1;
    case 8: return DType::Q8_0;
    case 10: return DType::Q2_K;
    case 11: return DType::Q3_K;
    case 12: return DType::Q4_K;
    case 13: return DType::Q5_K;
    case 14: return DType::Q6_K;
    case 20: return DType::IQ4_NL;
    case 23: return DType::IQ4_XS;
    default: return DType::U8;
  }
}

}  // namespace cypris::test
