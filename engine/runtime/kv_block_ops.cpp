// KV-cache block moves: swap to and from the host pool (--swap-space, preemption by swap), block
// copies (copy-on-write) and the token moves of a context shift by rotation, on every
// tensor-parallel rank (each holds its heads). The backend does the moving: memcpys on the CPU; on
// CUDA one kernel for all copies and async copies between the device cache and a pinned host pool.
#include "engine/common/error.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/mpi_worker.h"
#include "models/rope.h"

#include <algorithm>
#include <string_view>

namespace cypris {

namespace {

std::vector<int64_t> flatten(std::span<const BlockCopy> pairs, int64_t src_limit, int64_t dst_limit,
                             const char* what) {
  std::vector<int64_t> out;
  out.reserve(pairs.size() * 2);
  for (const auto& p : pairs) {
    CYPRIS_CHECK(p.src >= 0 && p.src < src_limit && p.dst >= 0 && p.dst < dst_limit, "{} pair ({}, {}) is out of range",
                 what, p.src, p.dst);
    out.push_back(p.src);
    out.push_back(p.dst);
  }
  return out;
}

}  // namespace

void ModelRunner::allocate_swap_space(int64_t num_cpu_blocks) {
  CYPRIS_CHECK(num_cpu_blocks >= 0, "swap space of {} blocks", num_cpu_blocks);
  if (drives_processes_) send_to_mpi_workers(StepMessage::kAllocateSwap, encode_int64(num_cpu_blocks));
  for_each_rank([&](Rank& r) {
    r.swap_k.clear();
    r.swap_v.clear();
    for (auto& layer : r.kv_cache) {
      std::vector<int64_t> shape = layer.k.view.shape;  // [num_blocks, block_size, kv_heads, head_dim]
      shape[0] = num_cpu_blocks;
      r.swap_k.push_back(r.backend->empty_host(layer.k.view.dtype, shape));
      r.swap_v.push_back(r.backend->empty_host(layer.v.view.dtype, shape));
    }
  });
  num_swap_blocks_ = num_cpu_blocks;
}

void ModelRunner::swap_out(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_blocks_, num_swap_blocks_, "swap-out");
  if (drives_processes_) send_to_mpi_workers(StepMessage::kSwapOut, encode_block_copies(pairs));
  for_each_rank([&](Rank& r) {
    for (size_t l = 0; l < r.kv_cache.size(); ++l) {
      r.backend->swap_blocks(r.kv_cache[l].k.view, r.swap_k[l].view, sd);
      r.backend->swap_blocks(r.kv_cache[l].v.view, r.swap_v[l].view, sd);
    }
  });
}

void ModelRunner::swap_in(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_swap_blocks_, num_blocks_, "swap-in");
  if (drives_processes_) send_to_mpi_workers(StepMessage::kSwapIn, encode_block_copies(pairs));
  for_each_rank([&](Rank& r) {
    for (size_t l = 0; l < r.kv_cache.size(); ++l) {
      r.backend->swap_blocks(r.swap_k[l].view, r.kv_cache[l].k.view, sd);
      r.backend->swap_blocks(r.swap_v[l].view, r.kv_cache[l].v.view, sd);
    }
  });
}

void ModelRunner::copy_blocks(std::span<const BlockCopy> pairs) {
  if (pairs.empty()) return;
  const std::vector<int64_t> sd = flatten(pairs, num_blocks_, num_blocks_, "block copy");
  if (drives_processes_) send_to_mpi_workers(StepMessage::kCopyBlocks, encode_block_copies(pairs));
  for_each_rank([&](Rank& r) {
    std::vector<Tensor> caches;
    caches.reserve(r.kv_cache.size() * 2);
    for (auto& layer : r.kv_cache) {
      caches.push_back(layer.k.view);
      caches.push_back(layer.v.view);
    }
    r.backend->copy_blocks(caches, sd);
  });
}

bool ModelRunner::can_rotate_kv() const {
  // The moves are not among the step messages process 0 sends to other processes.
  if (drives_processes_) return false;
  const ModelConfig& cfg = config();
  // Families whose every layer rotates q and k by the one table of build_rope_cos_sin (Gemma's local
  // layers have their own base; Cohere 2's global layers none).
  static constexpr std::string_view kFamilies[] = {"LlamaForCausalLM",    "MistralForCausalLM", "Qwen2ForCausalLM",
                                                   "Qwen2MoeForCausalLM", "Qwen3ForCausalLM",   "Qwen3MoeForCausalLM",
                                                   "MixtralForCausalLM",  "Phi3ForCausalLM",    "CohereForCausalLM"};
  if (cfg.architectures.empty() ||
      std::find(std::begin(kFamilies), std::end(kFamilies), cfg.architectures.front()) == std::end(kFamilies))
    return false;
  // dynamic NTK and longrope change a position's frequencies with the length; the others map positions
  // to angles by fixed frequencies, so moving a key by d positions is one rotation.
  const std::string& type = cfg.rope_scaling.type;
  if (type != "default" && type != "linear" && type != "llama3" && type != "yarn") return false;
  if (std::any_of(cfg.layer_sliding_window.begin(), cfg.layer_sliding_window.end(), [](int w) { return w > 0; }))
    return false;
  return cfg.rotary_dim() > 0 && cfg.rotary_dim() % 2 == 0;
}

void ModelRunner::move_kv_slots(std::span<const KvSlotMove> moves) {
  if (moves.empty()) return;
  CYPRIS_CHECK(can_rotate_kv(), "context shift by rotation is not possible for this model");
  const ModelConfig& cfg = config();
  const int rot = cfg.rotary_dim();
  const int half = rot / 2;
  const int64_t max_len = cfg.max_model_len;
  if (rope_host_.empty()) rope_host_ = build_rope_cos_sin(cfg, max_len);
  // The table's rows are cos and sin times yarn's attention factor; a rotation has none.
  const double af = compute_rope_parameters(cfg).attention_factor;
  const double af2 = af * af;
  std::vector<int64_t> src_dst;
  src_dst.reserve(moves.size() * 2);
  std::vector<float> cos_sin(moves.size() * size_t(rot));
  for (size_t m = 0; m < moves.size(); ++m) {
    const KvSlotMove& mv = moves[m];
    CYPRIS_CHECK(mv.old_pos >= 0 && mv.old_pos < max_len && mv.new_pos >= 0 && mv.new_pos < max_len,
                 "KV slot move from position {} to {} is outside the context ({})", mv.old_pos, mv.new_pos, max_len);
    src_dst.push_back(mv.src);
    src_dst.push_back(mv.dst);
    float* out = cos_sin.data() + m * size_t(rot);
    const float* p = rope_host_.data() + size_t(mv.old_pos) * size_t(rot);
    const float* q = rope_host_.data() + size_t(mv.new_pos) * size_t(rot);
    for (int j = 0; j < half; ++j) {
      if (mv.old_pos == mv.new_pos) {
        out[j] = 1.0f;
        out[half + j] = 0.0f;
        continue;
      }
      // cos(a_q - a_p) and sin(a_q - a_p) from the table's own cos and sin of a_p and a_q, so the
      // moved key ends at the angle a fresh rotation at new_pos uses.
      const double cp = p[j], sp = p[half + j], cq = q[j], sq = q[half + j];
      out[j] = static_cast<float>((cq * cp + sq * sp) / af2);
      out[half + j] = static_cast<float>((sq * cp - cq * sp) / af2);
    }
  }
  for_each_rank([&](Rank& r) {
    for (auto& layer : r.kv_cache)
      r.backend->move_kv_slots(layer.k.view, layer.v.view, src_dst, cos_sin, rot, layer.scales);
  });
}

}  // namespace cypris
