// The memory estimate before loading; see memory_estimate.h.
#include "engine/core/memory_estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/backend/backend_factory.h"
#include "engine/common/dtype.h"
#include "engine/common/error.h"
#include "engine/config/kv_cache_dtype.h"
#include "engine/hub/hub.h"
#include "engine/loader/gguf.h"
#include "engine/loader/gguf_model.h"
#include "engine/loader/model_config.h"
#include "engine/loader/quant_config.h"
#include "engine/loader/quant_label.h"
#include "engine/loader/safetensors.h"
#include "models/registry/registry.h"
#include "engine/loader/weights.h"

namespace cypris {

namespace {

// The decoder layer a tensor belongs to ("model.layers.3.mlp...", "blk.3.attn_q.weight",
// "transformer.h.3..."), or -1.
int layer_of(const std::string& name) {
  for (const char* key : {"layers.", "blk.", "h.", "blocks."}) {
    const std::string k = key;
    size_t pos = 0;
    while ((pos = name.find(k, pos)) != std::string::npos) {
      const bool at_start = pos == 0 || name[pos - 1] == '.';
      size_t i = pos + k.size();
      size_t j = i;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
      if (at_start && j > i && j < name.size() && name[j] == '.' && j - i < 7) return std::stoi(name.substr(i, j - i));
      pos += k.size();
    }
  }
  return -1;
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// Parts of a multimodal checkpoint the text model does not load.
bool not_loaded(const std::string& name) {
  return contains(name, "vision_tower") || contains(name, "vision_model") || contains(name, "multi_modal_projector") ||
         contains(name, "visual.");
}

bool is_embedding(const std::string& name) {
  return contains(name, "embed_tokens") || contains(name, "token_embd") || contains(name, ".wte.") ||
         contains(name, "word_embeddings");
}

bool is_head(const std::string& name) {
  return contains(name, "lm_head") || name == "output.weight" || contains(name, "output_norm") ||
         name == "model.norm.weight" || name == "model.norm.bias" || contains(name, "ln_f.");
}

// The packed tensors (and their scales) of GPTQ / AWQ / compressed-tensors layers keep their
// stored size: the loader repacks them into block types of about the same bytes.
bool is_quant_part(const std::string& name) {
  for (const char* s : {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed", ".weight_scale",
                        ".weight_zero_point", ".weight_shape", ".weight_g_idx"}) {
    if (contains(name, s)) return true;
  }
  return false;
}

void add_tensor(ModelFootprint& fp, const std::string& name, const WeightBytes& w) {
  if (not_loaded(name)) return;
  const int layer = layer_of(name);
  if (layer >= 0 && layer < fp.num_layers) {
    fp.layers[static_cast<size_t>(layer)] += w;
  } else if (is_embedding(name)) {
    fp.embedding += w;
  } else if (is_head(name)) {
    fp.head += w;
  } else {
    fp.other += w;
  }
}

void fill_from_config(ModelFootprint& fp, const ModelConfig& cfg) {
  fp.architecture = cfg.architectures.empty() ? cfg.model_type : cfg.architectures.front();
  fp.num_layers = cfg.num_hidden_layers;
  fp.num_kv_heads = cfg.num_key_value_heads;
  fp.head_dim = cfg.head_dim;
  fp.hidden_size = cfg.hidden_size;
  fp.vocab_size = cfg.vocab_size;
  fp.max_model_len = cfg.max_model_len;
  fp.torch_dtype = cfg.torch_dtype;
  fp.tied_embeddings = cfg.tie_word_embeddings;
  fp.layers.assign(static_cast<size_t>(std::max(0, cfg.num_hidden_layers)), WeightBytes{});
}

std::string dtype_label(const std::string& torch_dtype) {
  if (torch_dtype == "bfloat16") return "BF16";
  if (torch_dtype == "float16") return "F16";
  if (torch_dtype == "float32") return "F32";
  return torch_dtype.empty() ? "unquantized" : torch_dtype;
}

std::string checkpoint_quant_label(const QuantConfig& q) {
  // "EXL2 4.65 bpw": its widths vary per group; "bitsandbytes nf4 double-quant", "bitsandbytes int8"
  if (q.method == "exl2" || q.method == "bitsandbytes") return quant_label(q);
  std::string method = q.method == "gptq" ? "GPTQ" : q.method == "awq" ? "AWQ" : q.method;
  std::string out = fmt::format("{} {}-bit {}", method, q.bits,
                                q.group_size > 0 ? fmt::format("g{}", q.group_size) : std::string("per-channel"));
  if (q.desc_act) out += " act-order";
  return out;
}

std::string gguf_label(const GgufModel& m) {
  if (auto ft = m.get_int("general.file_type")) {
    const std::string name = gguf_file_type_name(*ft);
    if (!name.empty()) return "GGUF " + name;
  }
  // No (known) file type: the most common type among the 2-D tensors.
  std::map<std::string, int> counts;
  for (const auto& [name, entry] : m.tensors()) {
    if (entry.first->ne.size() >= 2) ++counts[std::string(ggml_traits(entry.first->type).name)];
  }
  std::string best;
  int n = 0;
  for (const auto& [t, c] : counts) {
    if (c > n) best = t, n = c;
  }
  return best.empty() ? "GGUF" : "GGUF " + best;
}

int64_t kv_element_size(const std::string& kv_cache_dtype, DType weight_dtype, bool gpu) {
  if (auto d = parse_kv_cache_dtype(kv_cache_dtype)) return static_cast<int64_t>(dtype_size(*d));
  if (!gpu) return 2;  // auto on the CPU: float16 (engine_setup.cpp)
  // auto on a GPU: the activation dtype, the model's 16-bit dtype (model_runner.cpp).
  return weight_dtype == DType::F32 ? 4 : 2;
}

}  // namespace

std::string gguf_file_type_name(int64_t t) {
  static const std::map<int64_t, const char*> kNames = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},     {3, "Q4_1"},    {7, "Q8_0"},    {8, "Q5_0"},    {9, "Q5_1"},
      {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},  {13, "Q3_K_L"}, {14, "Q4_K_S"}, {15, "Q4_K_M"}, {16, "Q5_K_S"},
      {17, "Q5_K_M"}, {18, "Q6_K"},   {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"}, {22, "IQ3_XS"}, {23, "IQ3_XXS"},
      {24, "IQ1_S"},  {25, "IQ4_NL"}, {26, "IQ3_S"},   {27, "IQ3_M"},  {28, "IQ2_S"},  {29, "IQ2_M"},  {30, "IQ4_XS"},
      {31, "IQ1_M"},  {32, "BF16"},   {36, "TQ1_0"},   {37, "TQ2_0"}};
  auto it = kNames.find(t);
  return it == kNames.end() ? std::string() : std::string(it->second);
}

std::string weight_type_label(const std::filesystem::path& path) {
  if (is_gguf_path(path)) return gguf_label(GgufModel(path));
  if (auto q = read_quant_config(path)) return checkpoint_quant_label(*q);
  return dtype_label(load_model_config(model_families(), path).torch_dtype);
}

ModelFootprint read_model_footprint(const std::filesystem::path& path) {
  ModelFootprint fp;
  fp.path = path.string();
  std::error_code ec;
  CYPRIS_CHECK(std::filesystem::exists(path, ec), "model '{}' does not exist", path.string());
  if (is_gguf_path(path)) {
    GgufModel m(path);
    fill_from_config(fp, gguf_model_config(model_families(), m));
    for (const auto& [name, entry] : m.tensors()) {
      const GgufTensorInfo& t = *entry.first;
      WeightBytes w;
      if (t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16) {
        w.float_elems = t.numel();
      } else {
        w.fixed_bytes = static_cast<int64_t>(t.nbytes);
      }
      add_tensor(fp, name, w);
    }
    fp.weight_label = gguf_label(m);
    return fp;
  }
  CYPRIS_CHECK(std::filesystem::is_directory(path, ec), "model '{}' is neither a folder nor a .gguf file",
               path.string());
  const ModelConfig cfg = load_model_config(model_families(), path);
  fill_from_config(fp, cfg);
  const auto quant = read_quant_config(path);
  fp.weight_label = quant ? checkpoint_quant_label(*quant) : dtype_label(cfg.torch_dtype);
  if (SafetensorsCheckpoint::present(path)) {
    SafetensorsCheckpoint ckpt(path);
    for (const std::string& name : ckpt.names()) {
      const SafetensorsTensor* t = ckpt.find(name);
      WeightBytes w;
      if (quant && quant->method == "exl2" && contains(name, ".q_")) {
        // EXL2 linear layers are kept at their bits (engine/loader/exl2_weights.h): each group's inputs
        // in W4G32 blocks (2-4 bits: 20 bytes per 32 values) or W8G32 blocks (5-8 bits: 36 bytes), plus
        // a 4-byte column index per input; the lm_head is dequantized to --dtype ([out, in] values).
        // Counted at q_weight (outputs as padded to 32) from its q_groups; its other q_* nothing.
        const std::string qw = ".q_weight";
        if (name.size() > qw.size() && name.compare(name.size() - qw.size(), qw.size(), qw) == 0) {
          const std::string p = name.substr(0, name.size() - qw.size());
          const SafetensorsTensor* inv = ckpt.find(p + ".q_invperm");
          const SafetensorsTensor* groups = ckpt.find(p + ".q_groups");
          if (inv != nullptr && inv->shape.size() == 1 && t->shape.size() == 2 && is_head(name)) {
            w.float_elems = inv->shape[0] * t->shape[1];
          } else if (inv != nullptr && inv->shape.size() == 1 && t->shape.size() == 2 && groups != nullptr &&
                     groups->dtype_name == "I16" && groups->shape.size() == 1 && groups->shape[0] % 2 == 0) {
            const auto* g = reinterpret_cast<const int16_t*>(groups->data);
            const int64_t n = groups->shape[0] / 2, out = t->shape[1], in = inv->shape[0];
            int64_t rows_seen = 0;
            for (int64_t i = 0; i < n; ++i) {
              const int bits = std::max<int>(1, g[2 * i]);
              const int64_t rows = i + 1 < n ? (g[2 * i + 3] - g[2 * i + 1]) * 32 / bits : in - rows_seen;
              rows_seen += rows;
              w.fixed_bytes += rows * out * (bits <= 4 ? 20 : 36) / 32;
            }
            w.fixed_bytes += 4 * in;
          } else {
            w.fixed_bytes = static_cast<int64_t>(t->nbytes);
          }
        }
      } else if (quant && quant->method == "bitsandbytes" && quant->bits == 8 && t->dtype_name == "I8" &&
                 t->shape.size() == 2 && t->shape[1] % 32 == 0) {
        // LLM.int8 layers are kept in W8 blocks (engine/loader/bnb_weights.h): the int8 values and an
        // fp16 scale and zero point per 128 (or 32) of them, which take the place of the row's SCB.
        w.fixed_bytes = static_cast<int64_t>(
            dtype_nbytes(t->shape[1] % 128 == 0 ? DType::W8G128 : DType::W8G32, t->shape[0] * t->shape[1]));
      } else if (quant && quant->method == "bitsandbytes" && quant->bits == 8 &&
                 (name.ends_with(".SCB") || name.ends_with(".weight_format"))) {
        // In the blocks' scales (SCB), or not loaded (the layout flag).
      } else if (t->dtype && !(quant && is_quant_part(name))) {
        w.float_elems = t->numel();
      } else {
        w.fixed_bytes = static_cast<int64_t>(t->nbytes);
      }
      add_tensor(fp, name, w);
    }
    return fp;
  }
  // No tensor table to read without unpickling (PyTorch .bin): the parameters from the shapes,
  // spread evenly over the layers.
  fp.from_shapes = true;
  const double total = cfg.approx_parameters().total;
  const double embed = static_cast<double>(cfg.vocab_size) * static_cast<double>(cfg.hidden_size);
  fp.embedding.float_elems = static_cast<int64_t>(embed);
  if (!cfg.tie_word_embeddings) fp.head.float_elems = static_cast<int64_t>(embed);
  const double rest = std::max(0.0, total - embed * (cfg.tie_word_embeddings ? 1 : 2));
  for (auto& l : fp.layers) l.float_elems = static_cast<int64_t>(rest / std::max(1, fp.num_layers));
  return fp;
}

std::filesystem::path find_local_model(const ModelOptions& mo) {
  CYPRIS_CHECK(!mo.model.empty(), "choose a model first (--model)");
  std::error_code ec;
  std::filesystem::path base;
  if (std::filesystem::exists(mo.model, ec)) {
    base = mo.model;
  } else {
    try {
      base = hub::resolve_model_dir(mo.model, mo.revision.value_or("main"), mo.download_dir.value_or(""),
                                    /*allow_download=*/false);
    } catch (const std::exception& e) {
      CYPRIS_FAIL("--model '{}' is not downloaded yet (or not a local path): {}", mo.model, e.what());
    }
  }
  if (mo.gguf_file && !mo.gguf_file->empty() && std::filesystem::is_directory(base, ec)) {
    const auto p = base / *mo.gguf_file;
    CYPRIS_CHECK(std::filesystem::is_regular_file(p, ec), "--gguf-file '{}': {} is not downloaded yet", *mo.gguf_file,
                 p.string());
    return p;
  }
  return base;
}

MachineMemory parse_meminfo(const std::string& text) {
  MachineMemory m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    long long kb = 0;
    if (!(ls >> key >> kb) || kb < 0) continue;
    if (key == "MemTotal:") m.ram_total_bytes = static_cast<int64_t>(kb) * 1024;
    if (key == "MemAvailable:") m.ram_available_bytes = static_cast<int64_t>(kb) * 1024;
  }
  return m;
}

MachineMemory read_machine_memory(bool query_gpu) {
  std::ifstream f("/proc/meminfo");
  std::stringstream ss;
  ss << f.rdbuf();
  MachineMemory m = parse_meminfo(ss.str());
  if (query_gpu) {
    if (auto g = cuda_device_memory(0)) {
      m.gpu = GpuMemory{g->name, static_cast<int64_t>(g->total_bytes), static_cast<int64_t>(g->free_bytes)};
    }
  }
  return m;
}

MemoryEstimate estimate_memory(const ModelFootprint& fp, const MemoryChoice& c, const MachineMemory& machine) {
  MemoryEstimate e;
  // Checked first: a bad value is an error whether or not a GPU holds layers.
  plan_weight_offload(c.cpu_offload_gb, {});
  const DType wdtype = resolve_dtype(c.dtype, fp.torch_dtype);
  const int64_t fsize = static_cast<int64_t>(dtype_size(wdtype));
  e.weight_float_size = fsize;
  e.context = c.context > 0 ? c.context : fp.max_model_len;
  const int L = fp.num_layers;
  const bool gpu = c.use_gpu && machine.gpu.has_value();
  const int tp = std::max(1, c.tensor_parallel_size);
  const int64_t per_layer_kv = int64_t{2} * fp.num_kv_heads * fp.head_dim;  // elements per token
  // One GPU's share: its KV heads (replicated when there are fewer heads than GPUs).
  const int64_t kv_heads_rank = (fp.num_kv_heads + tp - 1) / tp;
  const int64_t kv_gpu = int64_t{2} * kv_heads_rank * fp.head_dim * kv_element_size(c.kv_cache_dtype, wdtype, true);
  const int64_t kv_cpu = per_layer_kv * kv_element_size(c.kv_cache_dtype, wdtype, false);
  if (gpu) {
    e.gpu_budget_bytes =
        std::min(static_cast<int64_t>(c.gpu_memory_utilization * machine.gpu->total_bytes), machine.gpu->free_bytes);
  }
  const int64_t embed = fp.embedding.bytes(fsize) + fp.other.bytes(fsize);
  // A tied LM head is the embedding table.
  const int64_t head = fp.tied_embeddings ? fp.head.bytes(fsize) + fp.embedding.bytes(fsize) : fp.head.bytes(fsize);

  auto fill = [&](int g) {
    e.gpu_layers = g;
    int64_t gw = 0, cw = 0;
    for (int i = 0; i < L; ++i) (i < g ? gw : cw) += fp.layers[static_cast<size_t>(i)].bytes(fsize);
    if (g > 0)
      gw += embed;
    else
      cw += embed;
    if (g == L && g > 0) {
      gw += head - (fp.tied_embeddings ? fp.embedding.bytes(fsize) : 0);  // the table is already there
    } else if (g == 0) {
      cw += head - (fp.tied_embeddings ? fp.embedding.bytes(fsize) : 0);
    } else {
      cw += head;
    }
    e.gpus = g > 0 ? tp : 0;
    e.gpu_weight_bytes = (gw + tp - 1) / tp;
    e.ram_weight_bytes = cw;
    e.gpu_kv_bytes = int64_t{g} * kv_gpu * e.context;
    e.gpu_overhead_bytes = g > 0 ? kGpuOverheadBytes + c.max_num_seqs * fp.vocab_size * 8 : 0;
    e.kv_bytes_per_token = int64_t{g} * kv_gpu * tp + int64_t{L - g} * kv_cpu;
    e.ram_kv_bytes = g < L ? static_cast<int64_t>(c.cpu_kvcache_space_gib * (1 << 30)) : 0;
    e.ram_overhead_bytes = kRamOverheadBytes;
    // --cpu-offload-gb: each GPU's offloaded layers move to pinned RAM, their staging slots stay.
    e.offload = {};
    if (g > 0 && c.cpu_offload_gb != 0) {
      std::vector<int64_t> per_gpu;
      for (int i = 0; i < g; ++i) per_gpu.push_back((fp.layers[static_cast<size_t>(i)].bytes(fsize) + tp - 1) / tp);
      e.offload = plan_weight_offload(c.cpu_offload_gb, per_gpu);
      e.gpu_weight_bytes += e.offload.staging_bytes() - e.offload.offloaded_bytes;
      e.ram_weight_bytes += e.offload.offloaded_bytes * tp;
    }
  };

  int g = 0;
  if (gpu) {
    if (c.gpu_layers >= 0) {
      g = std::min(c.gpu_layers, L);
    } else {
      // Auto: the most layers whose weights, one full-length sequence of KV and the overhead fit.
      for (g = L; g > 0; --g) {
        fill(g);
        if (e.gpu_total() <= e.gpu_budget_bytes) break;
      }
    }
  }
  fill(g);
  e.fits_gpu = !gpu || g == 0 || e.gpu_total() <= e.gpu_budget_bytes;
  e.fits_ram = machine.ram_available_bytes <= 0 || e.ram_total() <= machine.ram_available_bytes;
  const int64_t seq_gpu = int64_t{g} * kv_gpu * e.context;
  if (g > 0 && seq_gpu > 0) {
    const int64_t left = e.gpu_budget_bytes - e.gpu_weight_bytes - e.gpu_overhead_bytes;
    e.sequences_gpu = std::min(c.max_num_seqs, std::max<int64_t>(0, left / seq_gpu));
  }
  const int64_t seq_cpu = int64_t{L - g} * kv_cpu * e.context;
  if (g < L && seq_cpu > 0) e.sequences_ram = std::min(c.max_num_seqs, e.ram_kv_bytes / seq_cpu);
  return e;
}

}  // namespace cypris
