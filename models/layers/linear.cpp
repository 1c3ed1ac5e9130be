#include "models/layers/linear.h"

#include "engine/common/error.h"
#include "engine/backend/communicator.h"

namespace cypris {

void tp_all_reduce(const ModelBuildOptions& opt, Tensor& t) {
  if (opt.parallel.world_size > 1) opt.comm->all_reduce_sum(t.as<float>(), t.numel());
}

std::string bias_name(const std::string& weight_name) {
  const std::string suffix = ".weight";
  CYPRIS_CHECK(weight_name.ends_with(suffix), "bias_name: '{}' does not end in .weight", weight_name);
  return weight_name.substr(0, weight_name.size() - suffix.size()) + ".bias";
}

ColumnParallelLinear::ColumnParallelLinear(const WeightLoader& w, const std::vector<LinearPart>& parts,
                                           int64_t in_features, bool with_bias) {
  weight_ = w.load_linear(parts, in_features);
  if (with_bias) {
    std::vector<LinearPart> bias_parts = parts;
    for (LinearPart& p : bias_parts) p.name = bias_name(p.name);
    bias_ = w.load_stacked_bias(bias_parts);
  }
}

void ColumnParallelLinear::forward(Backend& b, const Tensor& x, Tensor& out) const {
  b.linear(x, weight_.view, bias_.view.data ? &bias_.view : nullptr, out);
}

RowParallelLinear::RowParallelLinear(const WeightLoader& w, const std::string& name, int64_t out_features,
                                     int64_t in_features, bool with_bias)
    : opt_(&w.options()) {
  const auto& par = w.options().parallel;
  weight_ = w.load_linear({{name, out_features, ShardSpec::split(1, par.rank, par.world_size)}}, in_features);
  if (with_bias && par.rank == 0) bias_ = w.load_f32(bias_name(name), {out_features});
}

void RowParallelLinear::forward(Backend& b, const Tensor& x, Tensor& out, bool reduce) const {
  b.linear(x, weight_.view, bias_.view.data ? &bias_.view : nullptr, out);
  if (reduce) tp_all_reduce(*opt_, out);
}

}  // namespace cypris
