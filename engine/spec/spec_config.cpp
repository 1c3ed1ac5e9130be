// spec_decode_config: the --speculative-* options checked and gathered.
#include "engine/spec/spec_config.h"

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
  if (!o.speculative_model) {
    CYPRIS_CHECK(!o.num_speculative_tokens && !o.ngram_prompt_lookup_max && !o.ngram_prompt_lookup_min,
                 "--num-speculative-tokens and --ngram-prompt-lookup-max/min need --speculative-model "
                 "(\"[ngram]\" for prompt lookup)");
    return std::nullopt;
  }
  const std::string model = *o.speculative_model;
  const std::string m = lower(model);
  for (const char* kind : {"medusa", "eagle", "mlp_speculator", "mlp-speculator", "mlpspeculator"}) {
    CYPRIS_CHECK(m.find(kind) == std::string::npos,
                 "--speculative-model {}: {} speculators are not supported in Cypris; supported: \"[ngram]\" "
                 "(prompt lookup)",
                 model, kind);
  }
  CYPRIS_CHECK(m == "[ngram]",
               "--speculative-model {}: a draft model is not supported yet in Cypris; supported: \"[ngram]\" "
               "(prompt lookup)",
               model);
  CYPRIS_CHECK(o.num_speculative_tokens.has_value(),
               "--speculative-model \"[ngram]\" needs --num-speculative-tokens (how many tokens to propose, e.g. 5)");
  CYPRIS_CHECK(
      o.ngram_prompt_lookup_max.has_value(),
      "--speculative-model \"[ngram]\" needs --ngram-prompt-lookup-max (the longest n-gram looked up, e.g. 4)");
  CYPRIS_CHECK(*o.num_speculative_tokens >= 1 && *o.num_speculative_tokens <= 64,
               "--num-speculative-tokens must be in [1, 64], got {}", *o.num_speculative_tokens);
  CYPRIS_CHECK(*o.ngram_prompt_lookup_max >= 1 && *o.ngram_prompt_lookup_max <= 1024,
               "--ngram-prompt-lookup-max must be in [1, 1024], got {}", *o.ngram_prompt_lookup_max);
  const int64_t min_n = o.ngram_prompt_lookup_min.value_or(1);
  CYPRIS_CHECK(min_n >= 1 && min_n <= *o.ngram_prompt_lookup_max,
               "--ngram-prompt-lookup-min ({}) must be in [1, --ngram-prompt-lookup-max = {}]", min_n,
               *o.ngram_prompt_lookup_max);
  SpecDecodeConfig sc;
  sc.ngram.min_n = static_cast<int32_t>(min_n);
  sc.ngram.max_n = static_cast<int32_t>(*o.ngram_prompt_lookup_max);
  sc.ngram.num_tokens = static_cast<int32_t>(*o.num_speculative_tokens);
  sc.disable_by_batch_size = o.speculative_disable_by_batch_size;
  return sc;
}

}  // namespace cypris
