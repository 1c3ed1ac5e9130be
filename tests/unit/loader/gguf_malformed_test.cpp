// Malformed GGUF files: each defect is an Error that names the file and the field, never a crash
// or a huge allocation. Cases are built with the test writer, then broken byte by byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/common/error.h"
#include "engine/loader/gguf.h"
#include "engine/loader/gguf_model.h"
#include "tests/support/gguf_writer.h"
#include "models/registry/registry.h"

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using W = test::GgufWriter;

std::string error_of(const std::string& bytes) {
  try {
    GgufModel m(std::make_unique<GgufFile>("bad.gguf", bytes.data(), bytes.size()));
    gguf_model_config(model_families(), m);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A valid file: one tensor, header fields at known offsets.
W base_writer() {
  W w;
  w.kv_str("general.architecture", "llama");
  w.kv_u32("llama.context_length", 64);
  w.kv_u32("llama.embedding_length", 32);
  w.kv_u32("llama.block_count", 1);
  w.kv_u32("llama.feed_forward_length", 64);
  w.kv_u32("llama.attention.head_count", 2);
  w.tensor("token_embd.weight", {32, 4}, 0, std::string(32 * 4 * 4, '\0'));
  return w;
}

void put_u32(std::string& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void put_u64(std::string& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

// The byte offset of the tensor info (its name's length field).
size_t tensor_info_offset(const std::string& b) { return b.find("token_embd.weight") - 8; }

TEST(GgufMalformed, TheBaseFileIsValid) { EXPECT_EQ(error_of(base_writer().bytes()), ""); }

TEST(GgufMalformed, HeaderFields) {
  std::string b = base_writer().bytes();
  std::string x = b;
  x[0] = 'X';
  EXPECT_THAT(error_of(x), AllOf(HasSubstr("bad.gguf"), HasSubstr("not a GGUF file")));
  x = b;
  put_u32(x, 4, 1);
  EXPECT_THAT(error_of(x), HasSubstr("GGUF version 1 is not supported (supported: 2, 3)"));
  put_u32(x, 4, 4);
  EXPECT_THAT(error_of(x), HasSubstr("GGUF version 4 is not supported"));
  put_u32(x, 4, 0x03000000);
  EXPECT_THAT(error_of(x), HasSubstr("big-endian"));
  x = b;
  put_u64(x, 8, 1ull << 60);  // tensor count
  EXPECT_THAT(error_of(x), HasSubstr("tensor count 1152921504606846976 cannot fit"));
  x = b;
  put_u64(x, 16, ~0ull);  // metadata count
  EXPECT_THAT(error_of(x), HasSubstr("metadata count 18446744073709551615 cannot fit"));
  EXPECT_THAT(error_of(b.substr(0, 10)), HasSubstr("truncated GGUF file (10 bytes"));
}

TEST(GgufMalformed, EveryTruncationIsAnError) {
  const std::string b = base_writer().bytes();
  for (size_t n = 0; n < b.size(); ++n) {
    const std::string msg = error_of(b.substr(0, n));
    ASSERT_THAT(msg, HasSubstr("bad.gguf")) << "cut at " << n;
  }
}

TEST(GgufMalformed, MetadataValues) {
  const std::string b = base_writer().bytes();
  // general.architecture's type field follows its key.
  const size_t key = b.find("general.architecture");
  const size_t type_at = key + std::strlen("general.architecture");
  std::string x = b;
  put_u32(x, type_at, 13);
  EXPECT_THAT(error_of(x), HasSubstr("metadata 'general.architecture': unknown value type 13"));
  x = b;
  put_u64(x, type_at + 4, 1ull << 62);  // the string's length
  EXPECT_THAT(error_of(x), AllOf(HasSubstr("metadata 'general.architecture'"), HasSubstr("runs past the end")));
  x = b;
  put_u64(x, key - 8, ~0ull);  // the key's length
  EXPECT_THAT(error_of(x), HasSubstr("metadata #0 key"));

  W w = base_writer();
  std::string arr;
  W::u32(arr, 6);
  W::u64(arr, 1ull << 61);  // 2^61 floats
  w.kv_raw("huge", 9, arr);
  EXPECT_THAT(error_of(w.bytes()), HasSubstr("metadata 'huge': 2305843009213693952 elements of 4 bytes cannot fit"));
  W s = base_writer();
  arr.clear();
  W::u32(arr, 8);
  W::u64(arr, 1ull << 40);
  s.kv_raw("strs", 9, arr);
  EXPECT_THAT(error_of(s.bytes()), HasSubstr("metadata 'strs': 1099511627776 strings cannot fit"));
  W n = base_writer();
  arr.clear();
  for (int i = 0; i < 20; ++i) {  // arrays of arrays, 20 deep
    W::u32(arr, 9);
    W::u64(arr, 1);
  }
  n.kv_raw("deep", 9, arr);
  EXPECT_THAT(error_of(n.bytes()), HasSubstr("metadata 'deep': arrays nested deeper than 8 levels"));
  W bl = base_writer();
  bl.kv_raw("flag", 7, std::string(1, '\x07'));
  EXPECT_THAT(error_of(bl.bytes()), HasSubstr("metadata 'flag': a bool must be 0 or 1"));
  W dup = base_writer();
  dup.kv_u32("llama.block_count", 2);
  EXPECT_THAT(error_of(dup.bytes()), HasSubstr("metadata key 'llama.block_count' appears twice"));
  W al = base_writer();
  al.kv_u32("general.alignment", 48);
  EXPECT_THAT(error_of(al.bytes()), HasSubstr("'general.alignment' is 48; must be a power of two"));
  W al0 = base_writer();
  al0.kv_u32("general.alignment", 0);
  EXPECT_THAT(error_of(al0.bytes()), HasSubstr("'general.alignment' is 0"));
  W alt = base_writer();
  alt.kv_str("general.alignment", "32");
  EXPECT_THAT(error_of(alt.bytes()), HasSubstr("'general.alignment' must be a u32"));
}

TEST(GgufMalformed, TensorInfos) {
  const std::string b = base_writer().bytes();
  const size_t t = tensor_info_offset(b);
  const size_t dims_at = t + 8 + std::strlen("token_embd.weight");
  const size_t ne_at = dims_at + 4, type_at = ne_at + 16, offset_at = type_at + 4;
  std::string x = b;
  put_u32(x, dims_at, 5);
  EXPECT_THAT(error_of(x), HasSubstr("tensor 'token_embd.weight': 5 dimensions (allowed: 1 to 4)"));
  put_u32(x, dims_at, 0);
  EXPECT_THAT(error_of(x), HasSubstr("0 dimensions"));
  x = b;
  put_u64(x, ne_at, 0);
  EXPECT_THAT(error_of(x), HasSubstr("tensor 'token_embd.weight': dimension 0 is 0 (must be positive)"));
  x = b;
  put_u64(x, ne_at, ~0ull);
  EXPECT_THAT(error_of(x), HasSubstr("dimension 0 is -1"));
  x = b;
  put_u64(x, ne_at, 1ull << 40);
  put_u64(x, ne_at + 8, 1ull << 40);
  EXPECT_THAT(error_of(x), HasSubstr("the element count overflows"));
  x = b;
  put_u32(x, type_at, 31);  // a retired ggml type
  EXPECT_THAT(error_of(x), HasSubstr("tensor 'token_embd.weight': unknown ggml type id 31"));
  put_u32(x, type_at, 1000);
  EXPECT_THAT(error_of(x), HasSubstr("unknown ggml type id 1000"));
  x = b;
  put_u32(x, type_at, 8);  // Q8_0: rows of 32 are one block, so 4 rows need 136 bytes: fits
  EXPECT_EQ(error_of(x).find("blocks"), std::string::npos);
  put_u64(x, ne_at, 16);  // rows of 16 are not whole 32-element blocks
  EXPECT_THAT(error_of(x), HasSubstr("type Q8_0 stores blocks of 32 elements but its rows have 16"));
  x = b;
  put_u64(x, offset_at, 4);
  EXPECT_THAT(error_of(x), HasSubstr("offset 4 is not a multiple of the alignment 32"));
  put_u64(x, offset_at, 1ull << 62);
  EXPECT_THAT(error_of(x), AllOf(HasSubstr("tensor 'token_embd.weight'"), HasSubstr("run past the end of the file")));
  put_u64(x, offset_at, ~0ull & ~31ull);
  EXPECT_THAT(error_of(x), HasSubstr("run past the end of the file"));
  // Data cut short.
  EXPECT_THAT(error_of(b.substr(0, b.size() - 1)), HasSubstr("truncated?"));
  W dup = base_writer();
  dup.tensor("token_embd.weight", {4}, 0, std::string(16, '\0'));
  EXPECT_THAT(error_of(dup.bytes()), HasSubstr("tensor 'token_embd.weight' appears twice"));
}

TEST(GgufMalformed, ConfigKeys) {
  W w;
  w.kv_str("general.architecture", "gpt-neox");
  EXPECT_THAT(error_of(w.bytes()), HasSubstr("GGUF architecture 'gpt-neox' is not supported (supported: llama, qwen2, qwen2moe, qwen3, qwen3moe, phi3, command-r, cohere2, gemma2, gemma3)"));
  W m;
  m.kv_str("general.architecture", "llama");
  m.kv_u32("llama.context_length", 64);
  EXPECT_THAT(error_of(m.bytes()), HasSubstr("required metadata 'llama.embedding_length' is missing"));
  W t = base_writer();
  t.kv_str("llama.rope.scaling.type", "weird");
  EXPECT_THAT(error_of(t.bytes()), HasSubstr("'llama.rope.scaling.type' is 'weird'"));
  W s = base_writer();
  s.kv_str("llama.rope.freq_base", "high");
  EXPECT_THAT(error_of(s.bytes()), HasSubstr("metadata 'llama.rope.freq_base' must be a number, got string"));
  W h = base_writer();
  h.kv_u32("llama.attention.head_count_kv", 3);
  EXPECT_THAT(error_of(h.bytes()), HasSubstr("num_key_value_heads 3 must be positive and divide"));
  W p;
  p.kv_str("general.architecture", "llama");
  p.kv_u32("llama.context_length", 64);
  p.kv_u32("llama.embedding_length", 32);
  p.kv_u32("llama.block_count", 2);
  p.kv_u32("llama.feed_forward_length", 64);
  p.kv_i32s("llama.attention.head_count", {2, 4});  // per-layer counts that differ
  EXPECT_THAT(error_of(p.bytes()), HasSubstr("'llama.attention.head_count' differs between layers (2 and 4)"));
}

TEST(GgufMalformed, FilesOnDisk) {
  const auto dir = std::filesystem::temp_directory_path() / ("cypris_gguf_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "empty.gguf";
  { std::ofstream(path, std::ios::binary) << "GGUF"; }
  try {
    GgufModel m(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(path.string()), HasSubstr("truncated GGUF file (4 bytes")));
  }
  EXPECT_THROW(GgufModel m(dir / "missing.gguf"), Error);
  EXPECT_THROW(GgufModel m(dir), Error);  // a folder
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cypris
