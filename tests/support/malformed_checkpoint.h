// The fixture of the malformed-checkpoint tests: a copy of a quantized checkpoint in a temp folder
// whose tensors (and quantization_config) a test edits and writes back, and the error of loading
// one layer from it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/common/dtype.h"
#include "tests/support/error_of.h"
#include "tests/support/quant_checkpoints.h"
#include "tests/support/safetensors_edit.h"
#include "tests/support/temp_dir.h"

namespace cypris::testing_support {

class MalformedCheckpoint : public ::testing::Test {
 protected:
  explicit MalformedCheckpoint(const std::string& temp_prefix) : dir_(temp_prefix) {}

  // Replaces the copy with the checkpoint folder `fixture`.
  void copy(const std::string& fixture) { tensors_ = copy_checkpoint(fixture, dir_.path()); }
  void save() { write_tensors(dir_.path() / "model.safetensors", tensors_); }
  // Sets quantization_config[key] in the copy's config.json.
  void set_config(const std::string& key, const nlohmann::json& value) {
    std::ifstream in(dir_.path() / "config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["quantization_config"][key] = value;
    std::ofstream(dir_.path() / "config.json") << c.dump();
  }
  // The error of loading layer 0's q_proj ([128, 128]) as `dtype` (unset: its native type).
  std::string load_layer_error(std::optional<DType> dtype) {
    return test::error_of([&] {
      const auto w = test::open_checkpoint(dir_.path().string());
      const std::string layer = q_ + ".weight";
      w->load(layer, {128, 128}, dtype ? *dtype : *w->native_dtype(layer));
    });
  }

  test::TempDir dir_;
  std::map<std::string, RawTensor> tensors_;
  const std::string q_ = "model.layers.0.self_attn.q_proj";
};

}  // namespace cypris::testing_support
