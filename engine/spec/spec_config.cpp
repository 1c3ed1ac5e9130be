// spec_decode_config: the --speculative-* options checked and gathered.
#include "engine/spec/spec_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "engine/common/error.h"

namespace cypris {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::optional<SpecDecodeConfig> spec_decode_config(const EngineConfig& cfg) {
  const auto& o = cfg.spec;
  const int64_t lookahead = cfg.scheduler.num_lookahead_slots;
  CYPRIS_CHECK(lookahead >= 0 && lookahead <= 4096, "--num-lookahead-slots must be in [0, 4096], got {}", lookahead);
  if (!o.speculative_model) {
    CYPRIS_CHECK(!o.num_speculative_tokens && !o.ngram_prompt_lookup_max && !o.ngram_prompt_lookup_min,
                 "--num-speculative-tokens and --ngram-prompt-lookup-max/min need --speculative-model "
                 "(\"[ngram]\" for prompt lookup)");
    CYPRIS_CHECK(lookahead == 0,
                 "--num-lookahead-slots {}: the slots hold the positions speculative decoding verifies; it needs "
                 "--speculative-model (without it, leave --num-lookahead-slots out)",
                 lookahead);
    return std::nullopt;
  }
  const std::string model = *o.speculative_model;
  const std::string m = lower(model);
  for (const char* kind : {"medusa", "eagle", "mlp_speculator", "mlp-speculator", "mlpspeculator"}) {
    CYPRIS_CHECK(m.find(kind) == std::string::npos,
                 "--speculative-model {}: {} speculators are not supported in Cypris; supported: \"[ngram]\" "
                 "(prompt lookup) and a draft model with the target's vocabulary",
                 model, kind);
  }
  CYPRIS_CHECK(o.num_speculative_tokens.has_value(),
               "--speculative-model {} needs --num-speculative-tokens (how many tokens to propose, e.g. 5)", model);
  CYPRIS_CHECK(*o.num_speculative_tokens >= 1 && *o.num_speculative_tokens <= 64,
               "--num-speculative-tokens must be in [1, 64], got {}", *o.num_speculative_tokens);
  const int64_t target_tp = cfg.parallel.tensor_parallel_size;
  if (o.speculative_draft_tensor_parallel_size && m != "[ngram]") {
    const int64_t dtp = *o.speculative_draft_tensor_parallel_size;
    CYPRIS_CHECK(dtp == 1 || dtp == target_tp,
                 "--speculative-draft-tensor-parallel-size {}: the draft model runs unsharded (1) or over as many "
                 "ranks as the target (--tensor-parallel-size {}); allowed: 1{}",
                 dtp, target_tp, target_tp == 1 ? "" : fmt::format(" or {}", target_tp));
    CYPRIS_CHECK(dtp == 1 || cfg.parallel.distributed_executor_backend.value_or("") != "mpi",
                 "--speculative-draft-tensor-parallel-size {} with --distributed-executor-backend mpi: the draft "
                 "model runs in process 0 only (the other processes hold the target's shards); use "
                 "--speculative-draft-tensor-parallel-size 1",
                 dtp);
  }
  CYPRIS_CHECK(!o.speculative_max_model_len || *o.speculative_max_model_len >= 1,
               "--speculative-max-model-len must be at least 1, got {}", o.speculative_max_model_len.value_or(0));
  CYPRIS_CHECK(lookahead == 0 || lookahead >= *o.num_speculative_tokens,
               "--num-lookahead-slots {} is fewer than --num-speculative-tokens {}: each drafted token needs a KV "
               "slot to be verified in; give at least {} or leave --num-lookahead-slots out",
               lookahead, *o.num_speculative_tokens, *o.num_speculative_tokens);
  SpecDecodeConfig sc;
  sc.ngram.num_tokens = static_cast<int32_t>(*o.num_speculative_tokens);
  sc.lookahead_slots = static_cast<int32_t>(std::max<int64_t>(lookahead, *o.num_speculative_tokens));
  sc.disable_by_batch_size = o.speculative_disable_by_batch_size;
  if (o.spec_decoding_acceptance_method == "typical_acceptance_sampler") {
    sc.acceptance = SpecAcceptance::Typical;
  } else {
    CYPRIS_CHECK(o.spec_decoding_acceptance_method == "rejection_sampler",
                 "--spec-decoding-acceptance-method {}: allowed are rejection_sampler and typical_acceptance_sampler",
                 o.spec_decoding_acceptance_method);
  }
  if (o.typical_acceptance_sampler_posterior_threshold) {
    sc.typical_threshold = *o.typical_acceptance_sampler_posterior_threshold;
    CYPRIS_CHECK(sc.typical_threshold >= 0.0, "--typical-acceptance-sampler-posterior-threshold must be >= 0, got {}",
                 sc.typical_threshold);
  }
  if (o.typical_acceptance_sampler_posterior_alpha) {
    sc.typical_alpha = *o.typical_acceptance_sampler_posterior_alpha;
    CYPRIS_CHECK(sc.typical_alpha >= 0.0, "--typical-acceptance-sampler-posterior-alpha must be >= 0, got {}",
                 sc.typical_alpha);
  }
  if (m != "[ngram]") {
    // A draft model: the n-gram flags do not apply to it.
    CYPRIS_CHECK(!o.ngram_prompt_lookup_max && !o.ngram_prompt_lookup_min,
                 "--ngram-prompt-lookup-max/min apply to --speculative-model \"[ngram]\", not to a draft model ({})",
                 model);
    sc.draft_model = model;
    sc.draft_max_model_len = o.speculative_max_model_len;
    sc.draft_quantization = o.speculative_model_quantization;
    sc.draft_tp_given = o.speculative_draft_tensor_parallel_size.has_value();
    sc.draft_tp = static_cast<int32_t>(o.speculative_draft_tensor_parallel_size.value_or(target_tp));
    return sc;
  }
  CYPRIS_CHECK(!o.speculative_model_quantization,
               "--speculative-model-quantization applies to a draft model, not to \"[ngram]\"");
  CYPRIS_CHECK(o.speculative_draft_tensor_parallel_size.value_or(1) == 1,
               "--speculative-draft-tensor-parallel-size {} applies to a draft model; \"[ngram]\" (prompt lookup) "
               "runs no model",
               o.speculative_draft_tensor_parallel_size.value_or(1));
  CYPRIS_CHECK(
      o.ngram_prompt_lookup_max.has_value(),
      "--speculative-model \"[ngram]\" needs --ngram-prompt-lookup-max (the longest n-gram looked up, e.g. 4)");
  CYPRIS_CHECK(*o.ngram_prompt_lookup_max >= 1 && *o.ngram_prompt_lookup_max <= 1024,
               "--ngram-prompt-lookup-max must be in [1, 1024], got {}", *o.ngram_prompt_lookup_max);
  const int64_t min_n = o.ngram_prompt_lookup_min.value_or(1);
  CYPRIS_CHECK(min_n >= 1 && min_n <= *o.ngram_prompt_lookup_max,
               "--ngram-prompt-lookup-min ({}) must be in [1, --ngram-prompt-lookup-max = {}]", min_n,
               *o.ngram_prompt_lookup_max);
  sc.ngram.min_n = static_cast<int32_t>(min_n);
  sc.ngram.max_n = static_cast<int32_t>(*o.ngram_prompt_lookup_max);
  return sc;
}

}  // namespace cypris
