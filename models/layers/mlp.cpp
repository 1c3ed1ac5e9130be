#include "models/layers/mlp.h"

#include "engine/common/error.h"

namespace cypris {

GatedMlp::GatedMlp(const WeightLoader& w, const TpLayout& layout, const MlpSpec& spec) : act_(spec.act) {
  const int64_t h = w.config().hidden_size;
  const int64_t I = spec.intermediate_size;
  CYPRIS_CHECK(I % layout.world_size == 0, "{}: intermediate size {} does not split over {} ranks", spec.prefix, I,
               layout.world_size);
  inter_ = I / layout.world_size;
  const std::string& p = spec.prefix;
  std::vector<LinearPart> parts;
  if (spec.fused_gate_up.empty()) {
    parts = {{p + spec.gate, I, layout.rows}, {p + spec.up, I, layout.rows}};
  } else {
    const std::string f = p + spec.fused_gate_up;
    parts = {{f, 2 * I, layout.rows, 0, I}, {f, 2 * I, layout.rows, I, I}};
  }
  gate_up_ = ColumnParallelLinear(w, parts, h, spec.bias);
  down_ = RowParallelLinear(w, p + spec.down, h, I, spec.bias);
}

void GatedMlp::activate(Backend& b, const Tensor& gate_up, Tensor& out) const {
  if (act_ == Activation::GeluTanh) {
    b.gelu_tanh_and_mul(gate_up, out);
  } else {
    b.silu_and_mul(gate_up, out);
  }
}

void GatedMlp::forward(Backend& b, const Tensor& x, ForwardScratch& scratch, Tensor& out, const Dumper& dump,
                       bool reduce) const {
  Tensor& gate_up = scratch.get("gate_up", 2 * inter_);
  Tensor& act = scratch.get("act", inter_);
  gate_up_.forward(b, x, gate_up);
  activate(b, gate_up, act);
  dump("mlp_act", act);
  down_.forward(b, act, out, reduce);
  if (reduce) dump("mlp_out", out);
}

}  // namespace cypris
