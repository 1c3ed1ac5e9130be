#include "models/layers/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/common/error.h"

namespace cypris {

ExpertRouting route_top_k(const std::vector<float>& logits, int64_t num_tokens, int num_experts, int top_k,
                          bool renormalize) {
  CYPRIS_CHECK(top_k > 0 && top_k <= num_experts, "route_top_k: top-{} of {} experts", top_k, num_experts);
  ExpertRouting r;
  r.tokens.resize(num_experts);
  r.weights.resize(num_experts);
  std::vector<double> p(num_experts);
  std::vector<int> order(num_experts);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits.data() + t * num_experts;
    const double mx = *std::max_element(row, row + num_experts);
    double sum = 0;
    for (int e = 0; e < num_experts; ++e) sum += p[e] = std::exp(static_cast<double>(row[e]) - mx);
    for (int e = 0; e < num_experts; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double chosen = 0;
    for (int k = 0; k < top_k; ++k) chosen += p[order[k]];
    for (int k = 0; k < top_k; ++k) {
      const int e = order[k];
      r.tokens[e].push_back(static_cast<int32_t>(t));
      r.weights[e].push_back(static_cast<float>(renormalize ? p[e] / chosen : p[e]));
    }
  }
  return r;
}

SparseMoe::SparseMoe(const WeightLoader& w, const TpLayout& layout, const MoeSpec& spec)
    : top_k_(spec.top_k), renormalize_(spec.renormalize), opt_(&w.options()) {
  CYPRIS_CHECK(spec.num_experts > 0 && spec.top_k > 0 && spec.top_k <= spec.num_experts,
               "{}: top-{} routing over {} experts", spec.prefix, spec.top_k, spec.num_experts);
  has_shared_ = spec.shared_intermediate_size > 0;
  // The shared expert's gate is one more router row, so one product and one download serve both.
  std::vector<LinearPart> router = {{spec.prefix + spec.router, spec.num_experts, ShardSpec::replicated()}};
  if (has_shared_) router.push_back({spec.prefix + spec.shared_gate, 1, ShardSpec::replicated()});
  router_ = w.load_linear(router, w.config().hidden_size);
  auto mlp = [&](const std::string& prefix, int64_t width) {
    MlpSpec m;
    m.prefix = prefix;
    m.gate = spec.gate;
    m.up = spec.up;
    m.down = spec.down;
    m.intermediate_size = width;
    m.act = spec.act;
    return GatedMlp(w, layout, m);
  };
  experts_.reserve(spec.num_experts);
  for (int e = 0; e < spec.num_experts; ++e) {
    experts_.push_back(mlp(spec.prefix + spec.experts + std::to_string(e) + ".", spec.intermediate_size));
  }
  if (has_shared_) shared_ = mlp(spec.prefix + spec.shared_expert, spec.shared_intermediate_size);
  // Grouped products need every expert's gate/up and down to be one weight each, of one type (a
  // GGUF file could store experts of mixed types; those run expert by expert).
  auto same = [](const Tensor* a, const Tensor* b) { return a && b && a->dtype == b->dtype && a->shape == b->shape; };
  grouped_ = true;
  for (const GatedMlp& e : experts_) {
    grouped_ = grouped_ && same(e.gate_up_weight(), experts_.front().gate_up_weight()) &&
               same(e.down_weight(), experts_.front().down_weight());
  }
}

DeviceTensor SparseMoe::forward(Backend& b, const Tensor& x, const Dumper& dump) const {
  const int64_t t = x.shape[0];
  const int64_t h = x.shape[1];
  const int num_experts = static_cast<int>(experts_.size());
  DeviceTensor out = b.zeros(b.activation_dtype(), {t, h});
  if (t == 0) return out;
  const int64_t width = num_experts + (has_shared_ ? 1 : 0);  // the shared gate's logit last
  DeviceTensor logits = b.empty(DType::F32, {t, width});
  b.linear(x, router_.view, nullptr, logits.view);
  dump("router_logits", column_slice(logits.view, 0, num_experts));
  std::vector<float> host(static_cast<size_t>(t * width));
  b.download(logits.view, host.data());
  std::vector<float> shared_gate;  // sigmoid of the shared expert's gate logit, per token
  if (has_shared_) {
    shared_gate.resize(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) {
      const double g = host[static_cast<size_t>(i * width + num_experts)];
      shared_gate[i] = static_cast<float>(1.0 / (1.0 + std::exp(-g)));
      std::copy_n(host.begin() + i * width, num_experts, host.begin() + i * num_experts);  // compact to [T, E]
    }
  }
  const ExpertRouting routing = route_top_k(host, t, num_experts, top_k_, renormalize_);
  // Slots grouped by expert: one gather of every routed row, each expert's two projections on its
  // run of rows, one activation over all of them, then the weighted sum back per token. The sum
  // goes rank by rank (a token's j-th choice), so no scatter adds twice to one row at once.
  std::vector<int64_t> first(static_cast<size_t>(num_experts) + 1, 0);
  std::vector<int32_t> slot_token;
  std::vector<std::vector<int32_t>> slot_of_rank(static_cast<size_t>(top_k_), std::vector<int32_t>(t, -1));
  std::vector<std::vector<float>> gate_of_rank(static_cast<size_t>(top_k_), std::vector<float>(t, 0.0f));
  std::vector<int> next_rank(static_cast<size_t>(t), 0);
  for (int e = 0; e < num_experts; ++e) {
    first[e + 1] = first[e] + static_cast<int64_t>(routing.tokens[e].size());
    for (size_t i = 0; i < routing.tokens[e].size(); ++i) {
      const int32_t tok = routing.tokens[e][i];
      const int j = next_rank[tok]++;
      slot_of_rank[j][tok] = static_cast<int32_t>(slot_token.size());
      gate_of_rank[j][tok] = routing.weights[e][i];
      slot_token.push_back(tok);
    }
  }
  const auto n = static_cast<int64_t>(slot_token.size());
  const int64_t inter = experts_.front().local_intermediate();
  DeviceTensor idx = b.upload(slot_token.data(), DType::I32, {n});
  DeviceTensor rows = b.empty(b.activation_dtype(), {n, h});  // [slots, hidden] grouped by expert
  b.gather_rows(x, idx.view, rows.view);
  DeviceTensor gate_up = b.empty(b.activation_dtype(), {n, 2 * inter});
  DeviceTensor act = b.empty(b.activation_dtype(), {n, inter});
  if (grouped_) {
    // One grouped product per projection over every expert with rows.
    std::vector<LinearGroup> gu, dn;
    for (int e = 0; e < num_experts; ++e) {
      const int64_t rows_e = first[e + 1] - first[e];
      if (rows_e == 0) continue;
      gu.push_back({experts_[e].gate_up_weight(), first[e], rows_e});
      dn.push_back({experts_[e].down_weight(), first[e], rows_e});
    }
    b.grouped_linear(rows.view, gu, gate_up.view);
    experts_.front().activate(b, gate_up.view, act.view);
    b.grouped_linear(act.view, dn, rows.view);  // the input rows are no longer needed
  } else {
    for (int e = 0; e < num_experts; ++e) {
      if (first[e + 1] == first[e]) continue;
      Tensor in = row_slice(rows.view, first[e], first[e + 1] - first[e]);
      Tensor gu = row_slice(gate_up.view, first[e], first[e + 1] - first[e]);
      experts_[e].gate_up(b, in, gu);
    }
    experts_.front().activate(b, gate_up.view, act.view);
    for (int e = 0; e < num_experts; ++e) {
      if (first[e + 1] == first[e]) continue;
      Tensor a = row_slice(act.view, first[e], first[e + 1] - first[e]);
      Tensor o = row_slice(rows.view, first[e], first[e + 1] - first[e]);
      experts_[e].down(b, a, o);
    }
  }
  std::vector<int32_t> tokens(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) tokens[i] = static_cast<int32_t>(i);
  DeviceTensor token_idx = b.upload(tokens.data(), DType::I32, {t});
  DeviceTensor picked = b.empty(b.activation_dtype(), {t, h});
  for (int j = 0; j < top_k_; ++j) {
    DeviceTensor slots = b.upload(slot_of_rank[j].data(), DType::I32, {t});
    DeviceTensor gates = b.upload(gate_of_rank[j].data(), DType::F32, {t});
    b.gather_rows(rows.view, slots.view, picked.view);
    b.scatter_add_rows(picked.view, token_idx.view, gates.view, out.view);
  }
  if (has_shared_) {
    // out += sigmoid(x · g) * shared(x), as a weighted scatter-add of every row onto itself.
    DeviceTensor gates = b.upload(shared_gate.data(), DType::F32, {t});
    ForwardScratch scratch(b, t);
    shared_.forward(b, x, scratch, picked.view, Dumper{}, /*reduce=*/false);
    b.scatter_add_rows(picked.view, token_idx.view, gates.view, out.view);
  }
  tp_all_reduce(*opt_, out.view);
  return out;
}

}  // namespace cypris
