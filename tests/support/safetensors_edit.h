// Reading a safetensors file's tensors as raw bytes and writing them back, for tests that build a
// malformed copy of a checkpoint by changing one tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/loader/safetensors.h"

namespace cypris::testing_support {

struct RawTensor {
  std::string dtype;  // safetensors spelling: F32, I32, ...
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::map<std::string, RawTensor> read_tensors(const std::filesystem::path& file) {
  SafetensorsFile f(file);
  std::map<std::string, RawTensor> out;
  for (const auto& [name, t] : f.tensors()) {
    out[name] = {t.dtype_name, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
  }
  return out;
}

// Writes the tensors as given, back to back (a byte count that does not fit the shape stays wrong).
inline void write_tensors(const std::filesystem::path& file, const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h << data;
}

// Replaces the files in `to` with those of the checkpoint folder `from` and returns the copy's
// model.safetensors tensors, for a test that edits one of them and writes them back (write_tensors).
inline std::map<std::string, RawTensor> copy_checkpoint(const std::filesystem::path& from,
                                                       const std::filesystem::path& to) {
  for (const auto& e : std::filesystem::directory_iterator(to)) std::filesystem::remove(e.path());
  for (const auto& e : std::filesystem::directory_iterator(from)) {
    std::filesystem::copy(e.path(), to / e.path().filename());
  }
  return read_tensors(to / "model.safetensors");
}

}  // namespace cypris::testing_support
