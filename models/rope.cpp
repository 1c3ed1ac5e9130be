#include "models/rope.h"

#include <algorithm>
#include <cmath>

#include "engine/common/error.h"
#include "engine/loader/model_config.h"

namespace cypris {
namespace {

// base ** (arange(0, dim, 2).float() / dim), in float32 as torch computes it.
std::vector<float> pos_freqs(double base, int dim) {
  std::vector<float> f(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[i] = std::pow(static_cast<float>(base), expo);
  }
  return f;
}

std::vector<float> default_inv_freq(double base, int dim) {
  std::vector<float> f = pos_freqs(base, dim);
  for (float& x : f) x = 1.0f / x;
  return f;
}

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double yarn_correction_dim(double num_rotations, int dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2 * M_PI))) / (2 * std::log(base));
}

}  // namespace

RopeParameters compute_rope_parameters(const ModelConfig& cfg, std::optional<int64_t> seq_len) {
  const int dim = cfg.rotary_dim();
  const RopeScaling& rs = cfg.rope_scaling;
  RopeParameters out;
  if (rs.type == "default") {
    out.inv_freq = default_inv_freq(cfg.rope_theta, dim);
  } else if (rs.type == "linear") {
    out.inv_freq = default_inv_freq(cfg.rope_theta, dim);
    for (float& x : out.inv_freq) x /= static_cast<float>(rs.factor);
  } else if (rs.type == "dynamic") {
    const double max_pos = static_cast<double>(cfg.max_position_embeddings);
    double sl = seq_len && *seq_len > cfg.max_position_embeddings ? static_cast<double>(*seq_len) : max_pos;
    const double base =
        cfg.rope_theta * std::pow((rs.factor * sl / max_pos) - (rs.factor - 1), static_cast<double>(dim) / (dim - 2));
    out.inv_freq = default_inv_freq(base, dim);
  } else if (rs.type == "llama3") {
    std::vector<float> inv = default_inv_freq(cfg.rope_theta, dim);
    const float factor = static_cast<float>(rs.factor);
    const double old_ctx = *rs.original_max_position_embeddings;
    const float low_freq_wavelen = static_cast<float>(old_ctx / rs.low_freq_factor);
    const float high_freq_wavelen = static_cast<float>(old_ctx / rs.high_freq_factor);
    out.inv_freq.resize(inv.size());
    for (size_t i = 0; i < inv.size(); ++i) {
      const float wavelen = static_cast<float>(2 * M_PI) / inv[i];
      float v = wavelen > low_freq_wavelen ? inv[i] / factor : inv[i];
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (static_cast<float>(old_ctx) / wavelen - static_cast<float>(rs.low_freq_factor)) /
                             static_cast<float>(rs.high_freq_factor - rs.low_freq_factor);
        v = (1 - smooth) * v / factor + smooth * v;
      }
      out.inv_freq[i] = v;
    }
  } else if (rs.type == "yarn") {
    const double base = cfg.rope_theta;
    // As current transformers (and vLLM) do: the configured factor, and the correction range from
    // original_max_position_embeddings (default max_position_embeddings). transformers 4.4x-4.5x
    // replaced the factor by max_position_embeddings / original_max_position_embeddings whenever
    // the latter was given, which turns Qwen2.5's yarn (factor 4, both lengths 32768) into no scaling.
    const double factor = rs.factor;
    const double original_max =
        rs.original_max_position_embeddings.value_or(static_cast<double>(cfg.max_position_embeddings));
    double attention_factor;
    if (rs.attention_factor) {
      attention_factor = *rs.attention_factor;
    } else if (rs.mscale && rs.mscale_all_dim && *rs.mscale != 0 && *rs.mscale_all_dim != 0) {
      attention_factor = yarn_get_mscale(factor, *rs.mscale) / yarn_get_mscale(factor, *rs.mscale_all_dim);
    } else {
      attention_factor = yarn_get_mscale(factor, 1.0);
    }
    const double beta_fast = rs.beta_fast && *rs.beta_fast != 0 ? *rs.beta_fast : 32.0;
    const double beta_slow = rs.beta_slow && *rs.beta_slow != 0 ? *rs.beta_slow : 1.0;
    double low = yarn_correction_dim(beta_fast, dim, base, original_max);
    double high = yarn_correction_dim(beta_slow, dim, base, original_max);
    if (rs.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    const std::vector<float> pf = pos_freqs(base, dim);
    out.inv_freq.resize(pf.size());
    for (size_t i = 0; i < pf.size(); ++i) {
      const float extrap = 1.0f / pf[i];
      const float interp = 1.0f / (static_cast<float>(factor) * pf[i]);
      const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
      const float extrap_factor = 1.0f - ramp;
      out.inv_freq[i] = interp * (1 - extrap_factor) + extrap * extrap_factor;
    }
    out.attention_factor = static_cast<float>(attention_factor);
  } else if (rs.type == "longrope") {
    // transformers' _compute_longrope_parameters: per-dimension factors, short below the original
    // length, long from it on; the factor is max_position_embeddings / original length when the
    // config gives the latter.
    const double max_pos = static_cast<double>(cfg.max_position_embeddings);
    const double original = rs.original_max_position_embeddings.value_or(max_pos);
    const double factor = rs.original_max_position_embeddings ? max_pos / original : rs.factor;
    const double attention_factor =
        rs.attention_factor ? *rs.attention_factor
                            : (factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original)));
    const bool use_long = seq_len && static_cast<double>(*seq_len) > original;
    const std::vector<double>& ext = use_long ? rs.long_factor : rs.short_factor;
    const std::vector<float> pf = pos_freqs(cfg.rope_theta, dim);
    out.inv_freq.resize(pf.size());
    for (size_t i = 0; i < pf.size(); ++i) out.inv_freq[i] = 1.0f / (static_cast<float>(ext[i]) * pf[i]);
    out.attention_factor = static_cast<float>(attention_factor);
  }
  return out;
}

std::vector<float> build_rope_cos_sin(const ModelConfig& cfg, int64_t max_len) {
  const int dim = cfg.rotary_dim();
  const int half = dim / 2;
  // max_len comes from the model's config (or --max-model-len): check it before sizing a table
  // with it, so a hostile value is an error naming it rather than a wrapped size and a crash.
  CYPRIS_CHECK(max_len > 0 && max_len <= kMaxPositions,
               "the rope table needs max_model_len in 1..{} positions, got {} (max_position_embeddings in config.json)",
               kMaxPositions, max_len);
  CYPRIS_CHECK(dim > 0 && dim <= 4096, "the rope table needs a rotary dimension in 1..4096, got {}", dim);
  std::vector<float> table(static_cast<size_t>(max_len) * static_cast<size_t>(dim));
  RopeParameters params = compute_rope_parameters(cfg);
  const bool dynamic = cfg.rope_scaling.type == "dynamic";
  // longrope: positions from the original length on use the long factors (vLLM's per-position
  // table; transformers switches the whole sequence once it is longer than that).
  const bool longrope = cfg.rope_scaling.type == "longrope";
  const int64_t original = static_cast<int64_t>(
      cfg.rope_scaling.original_max_position_embeddings.value_or(static_cast<double>(cfg.max_position_embeddings)));
  for (int64_t p = 0; p < max_len; ++p) {
    if (dynamic && p + 1 > cfg.max_position_embeddings) params = compute_rope_parameters(cfg, p + 1);
    if (longrope && p == original) params = compute_rope_parameters(cfg, p + 1);
    float* row = table.data() + p * dim;
    for (int i = 0; i < half; ++i) {
      const float angle = params.inv_freq[i] * static_cast<float>(p);
      row[i] = std::cos(angle) * params.attention_factor;
      row[half + i] = std::sin(angle) * params.attention_factor;
    }
  }
  return table;
}

}  // namespace cypris
