// A sparse mixture-of-experts MLP (Qwen3-MoE, Mixtral, Qwen2-MoE): a replicated router picks the
// top-k experts of each token (softmax over all experts, then the k largest, renormalised when the
// config says so); each expert is a gated MLP split over the tensor-parallel ranks like a dense
// one. The top-k is chosen on the host; the routed rows are gathered once, grouped by expert, and
// each projection is one grouped product over all experts with rows (Backend::grouped_linear: one
// pass over the CPU thread pool; on CUDA one GEMV launch at decode, one cuBLAS grouped GEMM for
// 16-bit weights beyond), one activation covers all of them, and the weighted rows go back to
// their tokens one top-k rank at a time (k gathers and scatter-adds, none adding twice to a row);
// the sum is all-reduced once. Qwen2-MoE's shared expert runs on every token, scaled by its sigmoid
// gate (computed on the host with the routing). Not yet: routing on the device (so MoE layers could
// be captured in CUDA graphs).
#pragma once

#include <string>
#include <vector>

#include "models/layers/mlp.h"

namespace cypris {

struct MoeSpec {
  std::string prefix;                  // "model.layers.3.mlp."
  std::string router = "gate.weight";  // [num_experts, hidden]
  std::string experts = "experts.";    // expert e's tensors under prefix + experts + e + "."
  std::string gate = "gate_proj.weight", up = "up_proj.weight", down = "down_proj.weight";
  int num_experts = 0;
  int top_k = 0;
  bool renormalize = true;
  int64_t intermediate_size = 0;  // one expert's full width
  Activation act = Activation::Silu;
  // Qwen2-MoE's shared expert (0: none): a gated MLP under prefix + shared_expert, added to every
  // token's output times sigmoid(shared_gate · x).
  int64_t shared_intermediate_size = 0;
  std::string shared_expert = "shared_expert.";
  std::string shared_gate = "shared_expert_gate.weight";  // [1, hidden]
};

// Routing of T tokens: for each expert, its tokens and their gate weights.
struct ExpertRouting {
  std::vector<std::vector<int32_t>> tokens;  // [num_experts][n_e]
  std::vector<std::vector<float>> weights;   // [num_experts][n_e]
};

// Top-k routing of router logits [T, E] (row-major): softmax, k largest (lower expert id first on
// ties), divided by their sum when renormalize.
ExpertRouting route_top_k(const std::vector<float>& logits, int64_t num_tokens, int num_experts, int top_k,
                          bool renormalize);

class SparseMoe {
 public:
  SparseMoe() = default;
  SparseMoe(const WeightLoader& w, const TpLayout& layout, const MoeSpec& spec);
  // Returns F32 [T, hidden] = sum over each token's experts of gate * expert(x), all-reduced.
  DeviceTensor forward(Backend& b, const Tensor& x, const Dumper& dump) const;

 private:
  DeviceTensor router_;  // [E (+ 1 shared gate), hidden], replicated
  std::vector<GatedMlp> experts_;
  GatedMlp shared_;  // when has_shared_ (router_ then has the shared gate as its last row)
  bool has_shared_ = false;
  bool grouped_ = false;  // every expert one gate/up and one down weight of one type: Backend::grouped_linear
  int top_k_ = 0;
  bool renormalize_ = true;
  const ModelBuildOptions* opt_ = nullptr;
};

}  // namespace cypris
