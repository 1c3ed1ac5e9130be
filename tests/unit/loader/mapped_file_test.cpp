// MappedFile, the storage GGUF and safetensors tensors point into: it shows a file's bytes, and a
// path it cannot map is an Error naming the path, the same for both readers.
#include "engine/loader/mapped_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>

#include "engine/common/error.h"
#include "engine/loader/gguf.h"
#include "engine/loader/safetensors.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MappedFile, ShowsTheFilesBytes) {
  test::TempDir dir("mapped_file");
  const fs::path p = dir.path() / "bytes.bin";
  std::string bytes;
  for (int i = 0; i < 10000; ++i) bytes.push_back(static_cast<char>((i * 37) & 0xff));
  std::ofstream(p, std::ios::binary) << bytes;
  MappedFile m(p);
  ASSERT_EQ(m.size(), bytes.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), m.size()), bytes);

  MappedFile moved(std::move(m));
  EXPECT_EQ(moved.size(), bytes.size());
  EXPECT_EQ(m.size(), 0u);  // NOLINT(bugprone-use-after-move): the source is left empty
  EXPECT_EQ(moved.data()[9999], bytes[9999]);
}

TEST(MappedFile, AnEmptyFileHasNoBytes) {
  test::TempDir dir("mapped_file");
  const fs::path p = dir.path() / "empty.bin";
  std::ofstream(p, std::ios::binary).flush();
  MappedFile m(p);
  EXPECT_EQ(m.size(), 0u);
}

TEST(MappedFile, WhatCannotBeMappedIsAnErrorNamingThePath) {
  test::TempDir dir("mapped_file");
  const fs::path missing = dir.path() / "missing.bin";
  EXPECT_NE(error_of([&] { MappedFile m(missing); }).find(missing.string() + ": cannot open"), std::string::npos);
  EXPECT_NE(error_of([&] { MappedFile m(dir.path()); }).find(dir.path().string() + ": not a regular file"),
            std::string::npos);
  // Both readers report a folder the same way.
  EXPECT_NE(error_of([&] { GgufFile g(dir.path()); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { SafetensorsFile s(dir.path()); }).find("not a regular file"), std::string::npos);
  // An empty file is truncated for both, each saying what its header needs.
  const fs::path empty = dir.path() / "empty.bin";
  std::ofstream(empty, std::ios::binary).flush();
  EXPECT_NE(error_of([&] { GgufFile g(empty); }).find("truncated GGUF file (0 bytes"), std::string::npos);
  EXPECT_NE(error_of([&] { SafetensorsFile s(empty); }).find("truncated safetensors file (0 bytes"), std::string::npos);
}

}  // namespace
}  // namespace cypris
