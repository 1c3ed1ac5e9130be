// A small GGUF writer for tests: metadata of any type (arrays nested) and tensors, laid out as
// llama.cpp's gguf writer does (version 3, little-endian, data aligned). Written from the format
// description, independently of the reader under test; byte-level mutations of its output build
// the malformed-file cases.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cypris::test {

class GgufWriter {
 public:
  // Raw encoders (for hand-built values).
  static void u32(std::string& o, uint32_t v) { append(o, &v, 4); }
  static void u64(std::string& o, uint64_t v) { append(o, &v, 8); }
  static void str(std::string& o, const std::string& s) {
    u64(o, s.size());
    o += s;
  }

  void kv_raw(const std::string& key, uint32_t type, const std::string& value_bytes) {
    str(kv_, key);
    u32(kv_, type);
    kv_ += value_bytes;
    ++n_kv_;
  }
  void kv_u32(const std::string& key, uint32_t v) {
    std::string b;
    u32(b, v);
    kv_raw(key, 4, b);
  }
  void kv_i32(const std::string& key, int32_t v) {
    std::string b;
    append(b, &v, 4);
    kv_raw(key, 5, b);
  }
  void kv_f32(const std::string& key, float v) {
    std::string b;
    append(b, &v, 4);
    kv_raw(key, 6, b);
  }
  void kv_bool(const std::string& key, bool v) { kv_raw(key, 7, std::string(1, v ? '\1' : '\0')); }
  void kv_str(const std::string& key, const std::string& v) {
    std::string b;
    str(b, v);
    kv_raw(key, 8, b);
  }
  void kv_strs(const std::string& key, const std::vector<std::string>& v) {
    std::string b;
    u32(b, 8);
    u64(b, v.size());
    for (const auto& s : v) str(b, s);
    kv_raw(key, 9, b);
  }
  void kv_f32s(const std::string& key, const std::vector<float>& v) {
    std::string b;
    u32(b, 6);
    u64(b, v.size());
    append(b, v.data(), v.size() * 4);
    kv_raw(key, 9, b);
  }
  void kv_i32s(const std::string& key, const std::vector<int32_t>& v) {
    std::string b;
    u32(b, 5);
    u64(b, v.size());
    append(b, v.data(), v.size() * 4);
    kv_raw(key, 9, b);
  }

  // A SentencePiece-style "llama" vocabulary as llama.cpp writes it, with bos 1, eos 2, unk 0.
  void kv_llama_vocab(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                      const std::vector<int32_t>& types) {
    kv_str("tokenizer.ggml.model", "llama");
    kv_strs("tokenizer.ggml.tokens", tokens);
    kv_f32s("tokenizer.ggml.scores", scores);
    kv_i32s("tokenizer.ggml.token_type", types);
    kv_u32("tokenizer.ggml.bos_token_id", 1);
    kv_u32("tokenizer.ggml.eos_token_id", 2);
    kv_u32("tokenizer.ggml.unknown_token_id", 0);
  }

  // ne in ggml order (ne[0] = row length); data must have the right size for type.
  void tensor(const std::string& name, const std::vector<int64_t>& ne, uint32_t type, const std::string& data) {
    tensors_.push_back({name, ne, type, data});
  }

  std::string bytes(uint32_t version = 3, uint64_t alignment = 32) const {
    std::string o = "GGUF";
    u32(o, version);
    u64(o, tensors_.size());
    u64(o, n_kv_);
    o += kv_;
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      str(o, t.name);
      u32(o, static_cast<uint32_t>(t.ne.size()));
      for (int64_t d : t.ne) u64(o, static_cast<uint64_t>(d));
      u32(o, t.type);
      u64(o, offset);
      offsets.push_back(offset);
      offset += pad(t.data.size(), alignment);
    }
    o.resize(pad(o.size(), alignment), '\0');
    for (const auto& t : tensors_) {
      o += t.data;
      o.resize(pad(o.size(), alignment), '\0');
    }
    return o;
  }

  void write(const std::filesystem::path& path, uint32_t version = 3, uint64_t alignment = 32) const {
    std::ofstream out(path, std::ios::binary);
    const std::string b = bytes(version, alignment);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
  }

  static std::string f32_bytes(const std::vector<float>& v) {
    std::string b;
    append(b, v.data(), v.size() * 4);
    return b;
  }

 private:
  struct T {
    std::string name;
    std::vector<int64_t> ne;
    uint32_t type;
    std::string data;
  };
  static void append(std::string& o, const void* p, size_t n) { o.append(static_cast<const char*>(p), n); }
  static uint64_t pad(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
  std::string kv_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

}  // namespace cypris::test
