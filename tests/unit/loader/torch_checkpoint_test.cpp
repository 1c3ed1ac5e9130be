// PyTorch .bin checkpoints (--load-format pt) through the safe reader: a model saved in torch.save's
// zip+pickle format loads the same weights as its safetensors copy; dtypes and storage views are
// read as torch writes them; pickles that would run code (os.system, eval, a callable in place of
// a storage type) are refused, and nothing runs. Fixtures: tests/tools/make_torch_bin.py.
#include "engine/loader/torch_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/common/error.h"
#include "engine/loader/weights.h"
#include "engine/runtime/model_runner.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const fs::path kDir = fs::path(CYPRIS_FIXTURES_DIR) / "torch_bin";

using test::error_of;

std::vector<float> as_f32(const SafetensorsTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_elements(t.data, *t.dtype, out.data(), DType::F32, t.numel());
  return out;
}

TEST(TorchCheckpoint, LoadsTheSameModelAsItsSafetensors) {
  const fs::path st_dir = fs::path(CYPRIS_FIXTURES_DIR) / "models" / "llama_gqa_tied";
  test::TempDir d("torch_ckpt");
  fs::copy_file(st_dir / "config.json", d.path() / "config.json");
  fs::copy_file(kDir / "llama_gqa_tied" / "pytorch_model.bin", d.path() / "pytorch_model.bin");
  auto run = [](const fs::path& dir, const std::string& format) {
    ModelRunnerOptions o;
    o.model_dir = dir;
    o.load.dtype = "float32";
    o.load.load_format = format;
    o.threads = 1;
    ModelRunner r(o);
    const int32_t ids[] = {5, 9, 3, 17};
    return r.execute(make_single_sequence_batch(ids, 0, r.block_size())).data;
  };
  const auto want = run(st_dir, "auto");
  EXPECT_EQ(run(d.path(), "pt"), want);
  EXPECT_EQ(run(d.path(), "auto"), want);  // no safetensors: auto falls back to the .bin (vLLM's order)
  // k and v of layer 0 are views of one storage (v at an offset), as tied weights are saved.
  TorchFile f(d.path() / "pytorch_model.bin");
  SafetensorsCheckpoint st(st_dir);
  for (const char* name : {"model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"}) {
    const SafetensorsTensor* a = &f.tensors().at(name);
    const SafetensorsTensor* b = st.find(name);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->shape, b->shape);
    ASSERT_EQ(a->nbytes, b->nbytes);
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << name;
  }
  // A truncated file is an error naming it, never a crash.
  const auto bytes = fs::file_size(d.path() / "pytorch_model.bin");
  for (uintmax_t keep : {bytes - 10, bytes / 2, uintmax_t{100}}) {
    fs::copy_file(kDir / "llama_gqa_tied" / "pytorch_model.bin", d.path() / "cut.bin",
                  fs::copy_options::overwrite_existing);
    fs::resize_file(d.path() / "cut.bin", keep);
    EXPECT_THAT(error_of([&] { TorchFile cut(d.path() / "cut.bin"); }), HasSubstr("cut.bin")) << keep;
  }
}

TEST(TorchCheckpoint, ReadsDtypesAndStorageViews) {
  TorchFile f(kDir / "dtypes.bin");
  const auto& t = f.tensors();
  EXPECT_EQ(t.at("f32").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(as_f32(t.at("f32")), (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f}));
  EXPECT_EQ(t.at("f16").dtype, DType::F16);
  EXPECT_EQ(as_f32(t.at("f16")), (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f}));
  EXPECT_EQ(t.at("bf16").dtype, DType::BF16);
  EXPECT_EQ(as_f32(t.at("bf16")), (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f}));
  EXPECT_EQ(as_f32(t.at("tail")), (std::vector<float>{0.25f, 3.0f}));  // offset 2 into the F32 storage
  // Integer tensors are listed, but are not weights (an error names them when loaded).
  EXPECT_EQ(t.at("ids").dtype_name, "I64");
  EXPECT_FALSE(t.at("ids").dtype.has_value());
}

TEST(TorchCheckpoint, NonContiguousTensorsAreRefusedByName) {
  EXPECT_THAT(error_of([] { TorchFile f(kDir / "noncontiguous.bin"); }),
              AllOf(HasSubstr("noncontiguous.bin"), HasSubstr("'t'"), HasSubstr("not contiguous")));
}

TEST(TorchCheckpoint, PicklesThatWouldRunCodeAreRefusedAndNothingRuns) {
  fs::remove("/tmp/cypris-pwned");
  EXPECT_THAT(error_of([] { TorchFile f(kDir / "evil_system.bin"); }),
              AllOf(HasSubstr("evil_system.bin"), HasSubstr("posix.system"), HasSubstr("refuses")));
  EXPECT_THAT(error_of([] { TorchFile f(kDir / "evil_eval.bin"); }),
              AllOf(HasSubstr("__builtin__.eval"), HasSubstr("refuses")));  // protocol 2 spells builtins so
  EXPECT_THAT(error_of([] { TorchFile f(kDir / "evil_global_in_tensor.bin"); }),
              AllOf(HasSubstr("posix.system"), HasSubstr("refuses")));
  EXPECT_FALSE(fs::exists("/tmp/cypris-pwned"));
  // The same through the model loader: the folder's .bin is refused, with --load-format pt or auto.
  test::TempDir d("torch_evil");
  fs::copy_file(fs::path(CYPRIS_FIXTURES_DIR) / "models" / "llama_gqa_tied" / "config.json", d.path() / "config.json");
  fs::copy_file(kDir / "evil_system.bin", d.path() / "pytorch_model.bin");
  ModelRunnerOptions o;
  o.model_dir = d.path();
  o.threads = 1;
  EXPECT_THAT(error_of([&] { ModelRunner r(o); }), HasSubstr("posix.system"));
}

TEST(TorchCheckpoint, LegacyAndForeignFilesAreErrors) {
  EXPECT_THAT(error_of([] { TorchFile f(kDir / "legacy.bin"); }), HasSubstr("legacy"));
  // A file that is not a zip archive, and a pickle nested 100000 deep (bounded, not recursed).
  EXPECT_THAT(
      error_of([] { TorchFile f(fs::path(CYPRIS_FIXTURES_DIR) / "models" / "llama_gqa_tied" / "config.json"); }),
      HasSubstr("config.json"));
  EXPECT_THAT(error_of([] { TorchFile f(kDir / "deep.bin"); }), HasSubstr("nests deeper"));
}

}  // namespace
}  // namespace cypris
