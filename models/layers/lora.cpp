#include "models/layers/lora.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "engine/common/error.h"
#include "models/layers/linear.h"

namespace cypris {
namespace {

// This rank's [start, start + count) of n entries split like shard (the whole range when replicated).
std::pair<int64_t, int64_t> local_range(int64_t n, const ShardSpec& shard) {
  if (shard.dim < 0 || shard.world_size <= 1) return {0, n};
  const int64_t count = n / shard.world_size;
  return {shard.rank * count, count};
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}, {}]", s.at(0), s.at(1)); }

}  // namespace

LoraSites::LoraSites(Backend& backend, int max_loras, int64_t max_rank)
    : backend_(backend), max_loras_(max_loras), max_rank_(max_rank), dtype_(backend.activation_dtype()) {
  CYPRIS_CHECK(max_loras >= 1 && max_loras <= 256, "--max-loras {} must be in [1, 256]", max_loras);
  CYPRIS_CHECK(max_rank >= 1 && max_rank <= 256, "--max-lora-rank {} must be in [1, 256]", max_rank);
}

int LoraSites::add_column(const std::string& module, int64_t in, int64_t full_rows, int64_t row0, int64_t rows,
                          const ShardSpec& shard, int64_t column0, int neox_head_dim) {
  if (module.find(".experts.") != std::string::npos) return -1;
  Site s;
  s.module = module;
  s.column = true;
  s.in_local = s.in_full = in;
  s.out_full = full_rows;
  const auto [start, count] = local_range(rows, shard);
  s.b_row0 = row0 + start;
  s.out_local = count;
  s.column0 = column0;
  s.neox_head_dim = neox_head_dim;
  sites_.push_back(std::move(s));
  return static_cast<int>(sites_.size()) - 1;
}

int LoraSites::add_row(const std::string& module, int64_t out, int64_t in, const ShardSpec& shard) {
  if (module.find(".experts.") != std::string::npos) return -1;
  Site s;
  s.module = module;
  s.column = false;
  s.in_full = in;
  s.out_local = s.out_full = out;
  const auto [start, count] = local_range(in, shard);
  s.a_col0 = start;
  s.in_local = count;
  sites_.push_back(std::move(s));
  return static_cast<int>(sites_.size()) - 1;
}

void LoraSites::apply(Backend& b, int site, const Tensor& x, Tensor& out) const {
  // No slots bound (a batch without adapters; a default Tensor has no shape): nothing to add.
  if (site < 0 || !slots_.data || slots_.ndim() != 1 || slots_.shape[0] == 0) return;
  const Site& s = sites_[static_cast<size_t>(site)];
  if (!s.a.view.data) return;
  CYPRIS_CHECK(slots_.shape[0] == x.shape[0], "LoRA: {} bound slots for {} rows", slots_.shape[0], x.shape[0]);
  Tensor cols = s.column && (s.column0 != 0 || s.out_local != out.shape[1]) ? column_slice(out, s.column0, s.out_local)
                                                                            : out;
  b.lora_linear(x, slots_, s.a.view, s.b.view, s.scales.view, cols);
}

void LoraSites::check(const LoraAdapter& adapter) const {
  CYPRIS_CHECK(adapter.rank <= max_rank_, "LoRA adapter {}: rank {} is above --max-lora-rank {}", adapter.path,
               adapter.rank, max_rank_);
  std::set<std::string> known;
  for (const Site& s : sites_) known.insert(s.module);
  for (const auto& [module, m] : adapter.modules) {
    CYPRIS_CHECK(known.count(module),
                 "LoRA adapter {}: module '{}' is not a linear projection of this model that LoRA applies to (the "
                 "attention q/k/v/o and MLP gate/up/down projections, fused or not, of each layer)",
                 adapter.path, module);
  }
  for (const Site& s : sites_) {
    auto it = adapter.modules.find(s.module);
    if (it == adapter.modules.end()) continue;
    const LoraModule& m = it->second;
    CYPRIS_CHECK(m.a.shape[1] == s.in_full && m.b.shape[0] == s.out_full,
                 "LoRA adapter {}: module '{}' has lora_A {} and lora_B {}, but the base weight is [{}, {}] (A must be "
                 "[r, {}], B [{}, r])",
                 adapter.path, s.module, shape_str(m.a.shape), shape_str(m.b.shape), s.out_full, s.in_full, s.in_full,
                 s.out_full);
  }
}

void LoraSites::allocate(Site& s) {
  const int64_t L = max_loras_, R = max_rank_;
  s.a = backend_.zeros(dtype_, {L, R, s.in_local});
  s.b = backend_.zeros(dtype_, {L, s.out_local, R});
  s.host_scales.assign(static_cast<size_t>(L), 0.0f);
  s.scales = backend_.upload(s.host_scales.data(), DType::F32, {L});
}

Tensor LoraSites::slot_view(const DeviceTensor& t, int slot) const {
  Tensor v = t.view;
  const int64_t per = t.view.shape[1] * t.view.shape[2];
  v.data = static_cast<char*>(t.view.data) + dtype_nbytes(t.view.dtype, per * slot);
  v.shape = {t.view.shape[1], t.view.shape[2]};
  return v;
}

void LoraSites::write_slot(Site& s, int slot, const LoraModule* m, float scale) {
  if (m) {
    const int64_t R = max_rank_, r = m->a.shape[0];
    // A: this rank's columns, rank rows zero-padded to R.
    std::vector<float> a(static_cast<size_t>(R * s.in_local), 0.0f);
    const float* ma = reinterpret_cast<const float*>(m->a.buffer.data());
    for (int64_t j = 0; j < r; ++j) {
      std::memcpy(&a[static_cast<size_t>(j * s.in_local)], ma + j * s.in_full + s.a_col0,
                  static_cast<size_t>(s.in_local) * sizeof(float));
    }
    // B: this rank's rows (reordered per head like the base weight), rank columns zero-padded.
    HostTensor b;
    b.dtype = DType::F32;
    b.shape = {s.out_local, R};
    b.buffer = Buffer(static_cast<size_t>(s.out_local * R) * sizeof(float));
    float* bd = reinterpret_cast<float*>(b.buffer.data());
    std::fill(bd, bd + s.out_local * R, 0.0f);
    const float* mb = reinterpret_cast<const float*>(m->b.buffer.data());
    for (int64_t i = 0; i < s.out_local; ++i) {
      std::memcpy(bd + i * R, mb + (s.b_row0 + i) * r, static_cast<size_t>(r) * sizeof(float));
    }
    if (s.neox_head_dim > 0) deinterleave_rows(b, s.out_local, s.neox_head_dim);
    Tensor av = slot_view(s.a, slot), bv = slot_view(s.b, slot);
    if (dtype_ == DType::F32) {
      backend_.upload_into(a.data(), av);
      backend_.upload_into(bd, bv);
    } else {
      Buffer a16(av.nbytes()), b16(bv.nbytes());
      convert_elements(a.data(), DType::F32, a16.data(), dtype_, av.numel());
      convert_elements(bd, DType::F32, b16.data(), dtype_, bv.numel());
      backend_.upload_into(a16.data(), av);
      backend_.upload_into(b16.data(), bv);
    }
  }
  s.host_scales[static_cast<size_t>(slot)] = m ? scale : 0.0f;
  backend_.upload_into(s.host_scales.data(), s.scales.view);
}

void LoraSites::load(int slot, const LoraAdapter& adapter) {
  CYPRIS_CHECK(slot >= 0 && slot < max_loras_, "LoRA slot {} is outside [0, {})", slot, max_loras_);
  check(adapter);
  for (Site& s : sites_) {
    auto it = adapter.modules.find(s.module);
    if (it == adapter.modules.end()) {
      if (s.a.view.data) write_slot(s, slot, nullptr, 0.0f);
      continue;
    }
    if (!s.a.view.data) allocate(s);
    write_slot(s, slot, &it->second, adapter.scale);
  }
}

void LoraSites::reserve(const LoraAdapter& adapter) {
  check(adapter);
  for (Site& s : sites_) {
    if (!s.a.view.data && adapter.modules.count(s.module)) allocate(s);
  }
}

void LoraSites::clear(int slot) {
  CYPRIS_CHECK(slot >= 0 && slot < max_loras_, "LoRA slot {} is outside [0, {})", slot, max_loras_);
  for (Site& s : sites_) {
    if (s.a.view.data) write_slot(s, slot, nullptr, 0.0f);
  }
}

size_t LoraSites::device_bytes() const {
  size_t n = 0;
  for (const Site& s : sites_) {
    if (s.a.view.data) n += s.a.view.nbytes() + s.b.view.nbytes() + s.scales.view.nbytes();
  }
  return n;
}

}  // namespace cypris
