// The Engine options panel's Quick view and Advanced table: one config behind both views, the
// memory estimate before loading (checked against hand computations from the fixtures' real
// tensor tables and file sizes), the Advanced table's order and hidden no-effect options, and the
// weight-type labels the Models panel shows.
#include "app/ui/state/quick_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/common/error.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

const std::string kGguf = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/";
const std::string kFixtures = std::string(CYPRIS_FIXTURES_DIR) + "/";

// The bytes of a safetensors file's data section: file size - 8 - header length (the first 8
// bytes, little-endian), read here without the loader.
int64_t safetensors_data_bytes(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  unsigned char b[8] = {};
  f.read(reinterpret_cast<char*>(b), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  return static_cast<int64_t>(fs::file_size(file)) - 8 - static_cast<int64_t>(n);
}

MachineMemory machine_without_gpu() {
  MachineMemory m;
  m.ram_total_bytes = 16 * kGiB;
  m.ram_available_bytes = 8 * kGiB;
  return m;
}

// tiny-random-Q4_0.gguf (../shared/testdata/gguf/README.md): hidden 256, ffn 512, 2 layers, 4 heads
// / 2 KV heads of 64, vocab 512, untied output; every 2-D tensor Q4_0 (18 bytes per 32 values),
// norms F32. The embedding is Q4_0, so --dtype auto reads the norms as float16.
constexpr int64_t kQ4Block = 18;
constexpr int64_t kLayerQuant = (256 * 256 + 128 * 256 + 128 * 256 + 256 * 256 + 3 * 256 * 512) / 32 * kQ4Block;
constexpr int64_t kLayerNorms = 2 * 256;  // attn_norm, ffn_norm
constexpr int64_t kEmbed = 512 * 256 / 32 * kQ4Block;
constexpr int64_t kOutput = 512 * 256 / 32 * kQ4Block;
constexpr int64_t kOutputNorm = 256;

TEST(MemoryEstimate, GgufWeightsAndKvCacheEqualAHandComputation) {
  const ModelFootprint fp = read_model_footprint(kGguf + "tiny-random-Q4_0.gguf");
  ASSERT_EQ(fp.num_layers, 2);
  EXPECT_EQ(fp.num_kv_heads, 2);
  EXPECT_EQ(fp.head_dim, 64);
  EXPECT_FALSE(fp.tied_embeddings);
  EXPECT_EQ(kLayerQuant, 331776);  // the arithmetic above, spelled out
  for (const auto& layer : fp.layers) {
    EXPECT_EQ(layer.fixed_bytes, kLayerQuant);
    EXPECT_EQ(layer.float_elems, kLayerNorms);
  }

  MemoryChoice c;
  c.context = 256;
  c.cpu_kvcache_space_gib = 0.001;  // 1073741 bytes
  const MemoryEstimate e = estimate_memory(fp, c, machine_without_gpu());
  EXPECT_EQ(e.gpu_layers, 0);
  EXPECT_EQ(e.weight_float_size, 2);
  EXPECT_EQ(e.ram_weight_bytes, 2 * (kLayerQuant + 2 * kLayerNorms) + kEmbed + kOutput + 2 * kOutputNorm);
  EXPECT_EQ(e.ram_weight_bytes, 813568);
  // K and V, 2 KV heads of 64, float16 (auto on the CPU), 2 layers.
  EXPECT_EQ(e.kv_bytes_per_token, 2 * 2 * 64 * 2 * 2);
  EXPECT_EQ(e.ram_kv_bytes, 1073741);
  EXPECT_EQ(e.ram_overhead_bytes, 256 * kMiB);
  EXPECT_EQ(e.sequences_ram, 1073741 / (1024 * 256));  // 4 full-length sequences
  EXPECT_EQ(e.gpu_total(), 0);
  EXPECT_TRUE(e.fits_ram);

  // An fp8 cache halves it; --dtype float32 doubles only the float tensors (the norms).
  c.kv_cache_dtype = "fp8";
  c.dtype = "float32";
  const MemoryEstimate e8 = estimate_memory(fp, c, machine_without_gpu());
  EXPECT_EQ(e8.kv_bytes_per_token, 2 * 2 * 64 * 1 * 2);
  EXPECT_EQ(e8.ram_weight_bytes, 2 * (kLayerQuant + 4 * kLayerNorms) + kEmbed + kOutput + 4 * kOutputNorm);
}

TEST(MemoryEstimate, GpuLayersSplitWeightsAndCacheAndAutoTakesTheMostThatFit) {
  const ModelFootprint fp = read_model_footprint(kGguf + "tiny-random-Q4_0.gguf");
  const int64_t layer = kLayerQuant + 2 * kLayerNorms;  // float16
  const int64_t kv_layer_seq = 2 * 2 * 64 * 2 * 256;    // one layer's K/V for 256 tokens, float16
  const int64_t overhead = 512 * kMiB + 256 * 512 * 8;  // + the sampler's [max-num-seqs, vocab] buffers
  MachineMemory m = machine_without_gpu();
  m.gpu = GpuMemory{"test GPU", 10 * kGiB, 10 * kGiB};
  MemoryChoice c;
  c.context = 256;
  c.use_gpu = true;
  c.gpu_layers = 1;
  MemoryEstimate e = estimate_memory(fp, c, m);
  EXPECT_EQ(e.gpu_layers, 1);
  EXPECT_EQ(e.gpu_weight_bytes, layer + kEmbed);  // layer 0 with the embedding
  EXPECT_EQ(e.ram_weight_bytes, layer + kOutput + 2 * kOutputNorm);
  EXPECT_EQ(e.gpu_kv_bytes, kv_layer_seq);
  EXPECT_EQ(e.gpu_overhead_bytes, overhead);
  EXPECT_EQ(e.gpu_budget_bytes, static_cast<int64_t>(0.9 * 10 * kGiB));
  EXPECT_EQ(e.sequences_gpu, 256);  // capped at --max-num-seqs

  // Auto with room for one layer but not two.
  const int64_t one = layer + kEmbed + kv_layer_seq + overhead;
  const int64_t two = 2 * layer + kEmbed + kOutput + 2 * kOutputNorm + 2 * kv_layer_seq + overhead;
  ASSERT_LT(one, two);
  m.gpu->free_bytes = (one + two) / 2;
  c.gpu_layers = -1;
  e = estimate_memory(fp, c, m);
  EXPECT_EQ(e.gpu_layers, 1);
  EXPECT_TRUE(e.fits_gpu);
  m.gpu->free_bytes = two;
  EXPECT_EQ(estimate_memory(fp, c, m).gpu_layers, 2);
  m.gpu->free_bytes = one - 1;
  EXPECT_EQ(estimate_memory(fp, c, m).gpu_layers, 0);
  // Asking for more than fits says so.
  c.gpu_layers = 2;
  e = estimate_memory(fp, c, m);
  EXPECT_EQ(e.gpu_layers, 2);
  EXPECT_FALSE(e.fits_gpu);
  // Two tensor-parallel GPUs: each holds half the weights and one of the two KV heads.
  c.tensor_parallel_size = 2;
  c.gpu_layers = 2;
  m.gpu->free_bytes = 10 * kGiB;
  e = estimate_memory(fp, c, m);
  EXPECT_EQ(e.gpus, 2);
  EXPECT_EQ(e.gpu_weight_bytes, (2 * layer + kEmbed + kOutput + 2 * kOutputNorm + 1) / 2);
  EXPECT_EQ(e.gpu_kv_bytes, 2 * kv_layer_seq / 2);
  EXPECT_EQ(e.kv_bytes_per_token, 2 * 2 * 64 * 2 * 2);  // all ranks together: unchanged
  c.tensor_parallel_size = 1;
  // --device cpu (use_gpu false): nothing on the GPU whatever the slider says.
  c.use_gpu = false;
  EXPECT_EQ(estimate_memory(fp, c, m).gpu_layers, 0);
}

TEST(MemoryEstimate, SafetensorsWeightsEqualTheFilesDataSection) {
  // llama_gqa_tied: float32 in the file, tied embeddings (the table counts once).
  const fs::path dir = kFixtures + "models/llama_gqa_tied";
  const ModelFootprint fp = read_model_footprint(dir);
  EXPECT_TRUE(fp.tied_embeddings);
  EXPECT_EQ(fp.weight_label, "F32");
  const int64_t data = safetensors_data_bytes(dir / "model.safetensors");
  MemoryChoice c;
  c.dtype = "float32";
  EXPECT_EQ(estimate_memory(fp, c, machine_without_gpu()).ram_weight_bytes, data);
  c.dtype = "auto";  // float16 for a float32 checkpoint (Aphrodite's rule)
  EXPECT_EQ(estimate_memory(fp, c, machine_without_gpu()).ram_weight_bytes, data / 2);

  // A GPTQ checkpoint: packed int32 tensors as stored, float16 scales and the rest at --dtype auto.
  const fs::path q = kFixtures + "quant/gptq_w4_g128_v1";
  const ModelFootprint fq = read_model_footprint(q);
  EXPECT_EQ(estimate_memory(fq, MemoryChoice{}, machine_without_gpu()).ram_weight_bytes,
            safetensors_data_bytes(q / "model.safetensors"));

  // A bitsandbytes int8 checkpoint stays in 8 bits: its 7 layers (147456 int8 values: q, o 128 x 128;
  // k, v 64 x 128; gate, up 256 x 128; down 128 x 256) as W8G128 blocks, 4 bytes of scale and zero per
  // 128 values in place of the SCB (fp32 per row: 1024 rows) and the 7 one-byte weight_format flags;
  // the rest (embeddings, lm_head, norms) float16 as stored.
  const fs::path b = kFixtures + "quant/bnb_int8";
  const ModelFootprint fb = read_model_footprint(b);
  EXPECT_EQ(fb.weight_label, "bitsandbytes int8");
  MemoryChoice f16;
  f16.dtype = "float16";
  EXPECT_EQ(estimate_memory(fb, f16, machine_without_gpu()).ram_weight_bytes,
            safetensors_data_bytes(b / "model.safetensors") + 147456 / 128 * 4 - 1024 * 4 - 7);

  // An EXL2 checkpoint keeps its linear layers at their bits: each group's inputs in W4G32 blocks
  // (2-4 bits, 20 bytes per 32 values) or W8G32 (5-8 bits, 36 bytes) and a 4-byte column index per
  // input (the generator's groups, expected.json); the lm_head is dequantized to --dtype.
  // exl2_mixed: 2 layers of q, o, gate, up, down (128 outputs) and k, v (64), 128 inputs each;
  // lm_head and embeddings 64 x 128, 5 norms of 128.
  const ModelFootprint fe = read_model_footprint(kFixtures + "quant/exl2_mixed");
  EXPECT_EQ(fe.weight_label, "EXL2 4.21 bpw");
  std::ifstream ej(kFixtures + "quant/exl2_mixed/expected.json");
  const nlohmann::json groups = nlohmann::json::parse(ej)["groups"];
  int64_t kept = 0;
  for (const auto& [layer, gs] : groups.items()) {
    if (layer == "lm_head") continue;
    const int64_t out = layer.find("k_proj") != std::string::npos || layer.find("v_proj") != std::string::npos ? 64 : 128;
    for (const auto& g : gs) kept += g[1].get<int64_t>() * out * (g[0].get<int>() <= 4 ? 20 : 36) / 32;
    kept += 4 * 128;
  }
  EXPECT_EQ(groups.size(), 15u);
  MemoryChoice f32;
  f32.dtype = "float32";
  EXPECT_EQ(estimate_memory(fe, f32, machine_without_gpu()).ram_weight_bytes,
            kept + 4 * (2 * 64 * 128 + 5 * 128));
}

TEST(MemoryEstimate, MeminfoAndUnreadableModels) {
  const MachineMemory m = parse_meminfo("MemTotal:       24576000 kB\nMemFree: 100 kB\nMemAvailable:   20480000 kB\n");
  EXPECT_EQ(m.ram_total_bytes, int64_t{24576000} * 1024);
  EXPECT_EQ(m.ram_available_bytes, int64_t{20480000} * 1024);
  EXPECT_EQ(parse_meminfo("garbage\n\nMemTotal: -5 kB").ram_total_bytes, 0);
  EXPECT_GT(read_machine_memory(false).ram_total_bytes, 0);

  OptionsForm form;
  QuickOptions quick(form);
  EXPECT_EQ(quick.footprint(), nullptr);  // no model yet
  EXPECT_NE(quick.footprint_error().find("model"), std::string::npos);
  ASSERT_TRUE(form.set_text("model", "/no/such/model-folder"));
  EXPECT_EQ(quick.footprint(), nullptr);
  EXPECT_NE(quick.footprint_error().find("/no/such/model-folder"), std::string::npos) << quick.footprint_error();
  const fs::path bad = fs::temp_directory_path() / "cypris_quick_bad.gguf";
  std::ofstream(bad, std::ios::binary) << "GGUF but not really";
  ASSERT_TRUE(form.set_text("model", bad.string()));
  EXPECT_EQ(quick.footprint(), nullptr);
  EXPECT_NE(quick.footprint_error().find(bad.string()), std::string::npos) << quick.footprint_error();
  fs::remove(bad);
}

TEST(MemoryEstimate, CpuOffloadGbMovesTheGpusLastLayersToRam) {
  const ModelFootprint fp = read_model_footprint(kGguf + "tiny-random-Q4_0.gguf");
  const int64_t layer = kLayerQuant + 2 * kLayerNorms;  // float16
  const int64_t all_weights = 2 * layer + kEmbed + kOutput + 2 * kOutputNorm;
  const int64_t slot = layer + layer / 16 + 64 * 1024;  // a staging slot: the layer, 1/16 and 64 KiB more
  MachineMemory m = machine_without_gpu();
  m.gpu = GpuMemory{"test GPU", 10 * kGiB, 10 * kGiB};
  MemoryChoice c;
  c.context = 256;
  c.use_gpu = true;
  c.gpu_layers = 2;
  const MemoryEstimate base = estimate_memory(fp, c, m);
  EXPECT_TRUE(base.offload.empty());
  EXPECT_EQ(base.gpu_weight_bytes, all_weights);
  EXPECT_EQ(base.ram_weight_bytes, 0);

  // Half a layer's GiB: the last layer (the fewest last layers that cover it) goes to RAM; one slot.
  c.cpu_offload_gb = static_cast<double>(layer / 2) / kGiB;
  MemoryEstimate e = estimate_memory(fp, c, m);
  EXPECT_EQ(e.offload.first_layer, 1);
  EXPECT_EQ(e.offload.num_layers(), 1);
  EXPECT_EQ(e.offload.offloaded_bytes, layer);
  EXPECT_EQ(e.gpu_weight_bytes, all_weights - layer + slot);
  EXPECT_EQ(e.ram_weight_bytes, layer);
  EXPECT_EQ(e.gpu_kv_bytes, base.gpu_kv_bytes);  // the cache stays on the GPU

  // More than the model: every layer, two slots.
  c.cpu_offload_gb = 100;
  e = estimate_memory(fp, c, m);
  EXPECT_EQ(e.offload.num_layers(), 2);
  EXPECT_EQ(e.gpu_weight_bytes, all_weights - 2 * layer + 2 * slot);
  EXPECT_EQ(e.ram_weight_bytes, 2 * layer);

  // With --gpu-layers 1 it applies to the GPU's layer (layer 0); layer 1 is on the CPU anyway.
  c.gpu_layers = 1;
  e = estimate_memory(fp, c, m);
  EXPECT_EQ(e.offload.first_layer, 0);
  EXPECT_EQ(e.offload.end_layer, 1);
  EXPECT_EQ(e.gpu_weight_bytes, layer + kEmbed - layer + slot);
  EXPECT_EQ(e.ram_weight_bytes, layer + kOutput + 2 * kOutputNorm + layer);

  // Nothing on the GPU: nothing offloaded.
  c.gpu_layers = 0;
  EXPECT_TRUE(estimate_memory(fp, c, m).offload.empty());
  c.use_gpu = false;
  c.gpu_layers = 2;
  EXPECT_TRUE(estimate_memory(fp, c, m).offload.empty());

  // Two tensor-parallel GPUs: each offloads its half of the layers; RAM holds both GPUs' copies.
  c.use_gpu = true;
  c.tensor_parallel_size = 2;
  c.cpu_offload_gb = 100;
  e = estimate_memory(fp, c, m);
  const int64_t half = (layer + 1) / 2;
  EXPECT_EQ(e.offload.offloaded_bytes, 2 * half);
  EXPECT_EQ(e.ram_weight_bytes, 2 * 2 * half);

  // A bad value is an error naming the flag, GPU or not.
  c.cpu_offload_gb = -1;
  try {
    estimate_memory(fp, c, machine_without_gpu());
    ADD_FAILURE() << "a negative --cpu-offload-gb was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--cpu-offload-gb"), std::string::npos) << err.what();
  }
}

TEST(QuickOptions, CpuOffloadGbIsPartOfTheChoice) {
  OptionsForm form;
  QuickOptions quick(form);
  ASSERT_TRUE(form.set_text("model", kGguf + "tiny-random-Q4_0.gguf"));
  ASSERT_TRUE(form.set_value("cpu-offload-gb", 100.0));
  MachineMemory with_gpu = machine_without_gpu();
  with_gpu.gpu = GpuMemory{"test GPU", 8 * kGiB, 8 * kGiB};
  quick.set_machine(with_gpu);
  EXPECT_EQ(quick.choice().cpu_offload_gb, 100.0);
  const auto e = quick.estimate();
  ASSERT_TRUE(e.has_value()) << quick.footprint_error() << quick.estimate_error();
  EXPECT_EQ(e->offload.num_layers(), 2);  // the whole model on the GPU, every layer offloaded
  EXPECT_GT(e->ram_weight_bytes, 0);
}

TEST(QuickOptions, QuickFieldsAndTheAdvancedTableAreOneConfig) {
  OptionsForm form;
  QuickOptions quick(form);
  const OptionSpec& len = *find_option("max-model-len");
  ASSERT_TRUE(quick.set_context(2048));
  EXPECT_EQ(form.value(len), 2048);
  ASSERT_TRUE(form.set_text("max-model-len", "512"));
  EXPECT_EQ(quick.context(), 512);
  ASSERT_TRUE(quick.set_context(0));
  EXPECT_TRUE(form.value(len).is_null());
  ASSERT_TRUE(quick.set_context(2048));
  ASSERT_TRUE(quick.set_context(-1));  // 0 or less unsets (the model's own length)
  EXPECT_TRUE(form.value(len).is_null());

  if (const OptionSpec* gl = QuickOptions::gpu_layers_option()) {
    ASSERT_TRUE(quick.set_gpu_layers(3));
    EXPECT_EQ(form.text(*gl), "3");
    ASSERT_TRUE(form.set_text(gl->name, "5"));
    EXPECT_EQ(quick.gpu_layers(), 5);
    EXPECT_EQ(quick.choice().gpu_layers, 5);
    ASSERT_TRUE(quick.set_gpu_layers(-1));
    EXPECT_EQ(quick.gpu_layers(), -1);
    EXPECT_EQ(quick.choice().gpu_layers, -1);
    ASSERT_TRUE(quick.set_gpu_layers(QuickOptions::kGpuLayersUnset));
    EXPECT_TRUE(form.is_default(*gl));
  } else {
    EXPECT_FALSE(quick.gpu_layers().has_value());
    EXPECT_THROW(quick.set_gpu_layers(3), Error);
  }
  // Without the option, or with it unset, the whole model is on --device: all layers when a GPU
  // is there, none without.
  quick.set_machine(machine_without_gpu());
  EXPECT_EQ(quick.choice().gpu_layers, 0);
  MachineMemory with_gpu = machine_without_gpu();
  with_gpu.gpu = GpuMemory{"test GPU", 8 * kGiB, 8 * kGiB};
  quick.set_machine(with_gpu);
  EXPECT_GE(quick.choice().gpu_layers, 1 << 20);
  EXPECT_TRUE(quick.choice().use_gpu);
  ASSERT_TRUE(form.set_value("device", "cpu"));
  EXPECT_FALSE(quick.choice().use_gpu);
  ASSERT_TRUE(form.set_value("device", "auto"));

  // The estimate reads the same values the Advanced rows edit.
  ASSERT_TRUE(form.set_text("model", kGguf + "tiny-random-Q4_0.gguf"));
  ASSERT_TRUE(form.set_value("kv-cache-dtype", "float32"));
  ASSERT_TRUE(form.set_value("max-num-seqs", 8));
  ASSERT_TRUE(form.set_value("device", "cpu"));
  ASSERT_TRUE(quick.set_context(128));
  quick.set_machine(machine_without_gpu());
  auto e = quick.estimate();
  ASSERT_TRUE(e.has_value()) << quick.footprint_error() << quick.estimate_error();
  EXPECT_EQ(e->context, 128);
  EXPECT_EQ(e->kv_bytes_per_token, 2 * 2 * 64 * 4 * 2);
  EXPECT_EQ(e->sequences_ram, 8);  // 4 GiB holds far more than --max-num-seqs 8
  ASSERT_TRUE(form.set_value("dtype", "float32"));
  EXPECT_EQ(quick.estimate()->weight_float_size, 4);
  ASSERT_TRUE(quick.footprint());
  EXPECT_EQ(quick.footprint()->weight_label, "GGUF Q4_0");
}

// The slider's three states map onto whatever type the engine's gpu-layers row has: an int whose
// range starts at -1 ("auto"), unset for the whole model on --device; or a string.
TEST(QuickOptions, GpuLayersValuesForEachOptionType) {
  using Q = QuickOptions;
  EXPECT_EQ(Q::gpu_layers_from_value(nullptr), Q::kGpuLayersUnset);
  EXPECT_EQ(Q::gpu_layers_from_value(-1), -1);
  EXPECT_EQ(Q::gpu_layers_from_value(12), 12);
  EXPECT_EQ(Q::gpu_layers_from_value("auto"), -1);
  EXPECT_EQ(Q::gpu_layers_from_value("7"), 7);
  EXPECT_EQ(Q::gpu_layers_from_value(""), Q::kGpuLayersUnset);

  OptionSpec nullable_int;
  nullable_int.name = "gpu-layers";
  nullable_int.binding.type = OptionType::Int;
  nullable_int.binding.nullable = true;
  nullable_int.min = -1;
  EXPECT_EQ(Q::gpu_layers_value(nullable_int, Q::kGpuLayersUnset), nullptr);
  EXPECT_EQ(Q::gpu_layers_value(nullable_int, -1), -1);
  EXPECT_EQ(Q::gpu_layers_value(nullable_int, 9), 9);
  OptionSpec text;
  text.name = "gpu-layers";
  text.binding.type = OptionType::String;
  text.binding.nullable = true;
  EXPECT_EQ(Q::gpu_layers_value(text, -1), "auto");
  EXPECT_EQ(Q::gpu_layers_value(text, 9), "9");
  EXPECT_EQ(Q::gpu_layers_value(text, Q::kGpuLayersUnset), nullptr);
  for (int n : {Q::kGpuLayersUnset, -1, 0, 9}) {
    EXPECT_EQ(Q::gpu_layers_from_value(Q::gpu_layers_value(nullable_int, n)), n);
    EXPECT_EQ(Q::gpu_layers_from_value(Q::gpu_layers_value(text, n)), n);
  }
}

TEST(OptionsAdvanced, CommonOptionsFirstAndNoEffectOptionsHiddenUnlessAsked) {
  OptionsForm form;
  const auto hidden = form.advanced_sections(false);
  ASSERT_FALSE(hidden.empty());
  EXPECT_EQ(hidden.front().title, "Common options");
  ASSERT_FALSE(hidden.front().options.empty());
  EXPECT_EQ(hidden.front().options.front()->name, "model");
  std::set<std::string> names;
  size_t count = 0;
  for (const auto& sec : hidden) {
    for (const OptionSpec* s : sec.options) {
      EXPECT_NE(s->support, OptionSupport::NoEffect) << s->name;
      names.insert(s->name);
      ++count;
    }
  }
  EXPECT_EQ(names.size(), count);  // each option once
  EXPECT_EQ(names.count("code-revision"), 0u);
  EXPECT_EQ(names.count("trust-remote-code"), 0u);
  EXPECT_GT(OptionsForm::no_effect_count(), 10u);

  // Ticked: every option of the panel, each once, the no-effect ones after the others of their group.
  const auto all = form.advanced_sections(true);
  std::set<std::string> all_names;
  size_t all_count = 0;
  for (const auto& sec : all) {
    bool seen_no_effect = false;
    for (const OptionSpec* s : sec.options) {
      all_names.insert(s->name);
      ++all_count;
      if (sec.title == "Common options") continue;
      if (s->support == OptionSupport::NoEffect)
        seen_no_effect = true;
      else
        EXPECT_FALSE(seen_no_effect) << s->name << " listed after a no-effect option in " << sec.title;
    }
  }
  EXPECT_EQ(all_names.size(), all_count);
  EXPECT_EQ(all_count, option_table().size() - 2);  // all but --no-ui and --config
  EXPECT_EQ(all_count - count, OptionsForm::no_effect_count());
  EXPECT_EQ(all_names.count("trust-remote-code"), 1u);

  // A no-effect option set to something (e.g. by an old profile) stays visible, to be reset.
  ASSERT_TRUE(form.set_value("trust-remote-code", true));
  bool shown = false;
  for (const auto& sec : form.advanced_sections(false)) {
    for (const OptionSpec* s : sec.options) shown = shown || s->name == "trust-remote-code";
  }
  EXPECT_TRUE(shown);
}

TEST(WeightTypeLabel, MethodBitsAndGroupSizeOfQuantizedCheckpoints) {
  EXPECT_EQ(weight_type_label(kFixtures + "quant/gptq_w4_g128_v1"), "GPTQ 4-bit g128");
  EXPECT_EQ(weight_type_label(kFixtures + "quant/gptq_w8_g32_sym_v2"), "GPTQ 8-bit g32");
  EXPECT_EQ(weight_type_label(kFixtures + "quant/gptq_w2_rowgroup_v1"), "GPTQ 2-bit per-channel");
  EXPECT_EQ(weight_type_label(kFixtures + "quant/gptq_w4_g64_act_order"), "GPTQ 4-bit g64 act-order");
  EXPECT_EQ(weight_type_label(kFixtures + "quant/awq_w4_g64"), "AWQ 4-bit g64");
  EXPECT_EQ(weight_type_label(kFixtures + "quant/ct_w4a16_g128_sym"), "compressed-tensors 4-bit g128");
  EXPECT_EQ(weight_type_label(kFixtures + "quant/ct_w8a16_channel_asym"), "compressed-tensors 8-bit per-channel");
  EXPECT_EQ(weight_type_label(kFixtures + "models/llama_gqa_tied_bf16"), "BF16");
  // GGUF: the file's type as llama-quantize named it (README of the files).
  EXPECT_EQ(weight_type_label(kGguf + "tiny-random-Q4_K_M.gguf"), "GGUF Q4_K_M");
  EXPECT_EQ(weight_type_label(kGguf + "tiny-random-Q6_K.gguf"), "GGUF Q6_K");
  EXPECT_EQ(weight_type_label(kGguf + "tiny-random-IQ4_XS.gguf"), "GGUF IQ4_XS");
  EXPECT_EQ(gguf_file_type_name(15), "Q4_K_M");
  EXPECT_EQ(gguf_file_type_name(999), "");
  EXPECT_THROW(weight_type_label("/no/such/model"), Error);
}

TEST(WeightTypeLabel, DownloadedFoldersInTheModelsPanelsCacheList) {
  EXPECT_EQ(folder_weight_label(kFixtures + "quant/awq_w4_g128"), "AWQ 4-bit g128");
  // A GGUF repo's snapshot: no config.json, one model per file, the types from the names.
  const fs::path dir = fs::temp_directory_path() / "cypris_folder_label";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"m-Q8_0.gguf", "m-Q4_K_M.gguf", "m-q8_0.gguf", "README.md"}) std::ofstream(dir / f) << "x";
  EXPECT_EQ(folder_weight_label(dir.string()), "GGUF Q4_K_M, Q8_0");
  fs::remove(dir / "m-Q8_0.gguf");
  fs::remove(dir / "m-q8_0.gguf");
  fs::remove(dir / "m-Q4_K_M.gguf");
  EXPECT_EQ(folder_weight_label(dir.string()), "?");
  EXPECT_EQ(folder_weight_label("/no/such/folder"), "?");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cypris
