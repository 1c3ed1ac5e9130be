// The gated MLP of a decoder layer: merged gate/up projection (column-parallel), the gated
// activation, and the row-parallel down projection.
#pragma once

#include <string>

#include "models/layers/common.h"
#include "models/layers/linear.h"
#include "models/model.h"

namespace cypris {

enum class Activation { Silu, GeluTanh };

struct MlpSpec {
  std::string prefix;  // "model.layers.3.mlp."
  std::string gate = "gate_proj.weight", up = "up_proj.weight";
  std::string fused_gate_up;  // e.g. "gate_up_proj.weight" (rows [gate | up]); empty: separate
  std::string down = "down_proj.weight";
  int64_t intermediate_size = 0;  // full width
  bool bias = false;
  Activation act = Activation::Silu;
};

class GatedMlp {
 public:
  GatedMlp() = default;
  GatedMlp(const WeightLoader& w, const TpLayout& layout, const MlpSpec& spec);
  // out [T, hidden] = down(act(gate(x)) * up(x)), all-reduced unless reduce is false. x and out may alias.
  void forward(Backend& b, const Tensor& x, ForwardScratch& scratch, Tensor& out, const Dumper& dump,
               bool reduce = true) const;
  int64_t local_intermediate() const { return inter_; }
  // The three stages, for a caller that runs several MLPs over slices of one batch (the MoE layer):
  // gate_up: out [T, 2 * local_intermediate()]; activate: out [T, local_intermediate()] (any rows,
  // any MLP with this activation); down: out [T, hidden], not all-reduced.
  void gate_up(Backend& b, const Tensor& x, Tensor& out) const { gate_up_.forward(b, x, out); }
  void activate(Backend& b, const Tensor& gate_up, Tensor& out) const;
  void down(Backend& b, const Tensor& act, Tensor& out) const { down_.forward(b, act, out, /*reduce=*/false); }
  // The gate/up and down weights when each stage is one product without bias, for a grouped
  // product over several MLPs (Backend::grouped_linear); null otherwise.
  const Tensor* gate_up_weight() const { return gate_up_.sole_weight(); }
  const Tensor* down_weight() const { return down_.sole_weight(); }

 private:
  ColumnParallelLinear gate_up_;  // [2 I / tp, hidden]: gate then up
  RowParallelLinear down_;        // [hidden, I / tp]
  int64_t inter_ = 0;             // I / tp
  Activation act_ = Activation::Silu;
};

}  // namespace cypris
