// SamplingParams: validation messages name the parameter and its range; the descriptor table agrees
// with the struct defaults; sampler_priority parsing; lenient client values.
#include "engine/request/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "engine/common/error.h"

namespace cypris {
namespace {

std::string validation_error(const std::function<void(SamplingParams&)>& change, int max_log_probs = 20,
                             int32_t vocab = 1000) {
  SamplingParams p;
  change(p);
  try {
    p.validate(max_log_probs, vocab);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SamplingParams, DefaultsAreValid) {
  SamplingParams p;
  EXPECT_NO_THROW(p.validate(20, 1000));
}

TEST(SamplingParams, ValidationNamesTheParameterAndTheAllowedRange) {
  struct Case {
    std::function<void(SamplingParams&)> change;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](auto& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1], got 0"},
      {[](auto& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {[](auto& p) { p.top_k = -2; }, "top_k must be -1 or 0 (off) or >= 1, got -2"},
      {[](auto& p) { p.temperature = -0.5f; }, "temperature must be >= 0, got -0.5"},
      {[](auto& p) { p.temperature = NAN; }, "temperature must be >= 0, got nan"},
      {[](auto& p) { p.repetition_penalty = 0.5f; }, "repetition_penalty must be >= 1, got 0.5"},
      {[](auto& p) { p.presence_penalty = 3.0f; }, "presence_penalty must be in [-2, 2], got 3"},
      {[](auto& p) { p.frequency_penalty = -2.5f; }, "frequency_penalty must be in [-2, 2], got -2.5"},
      {[](auto& p) { p.min_p = 1.5f; }, "min_p must be in [0, 1], got 1.5"},
      {[](auto& p) { p.top_a = -0.1f; }, "top_a must be in [0, 1]"},
      {[](auto& p) { p.tfs = 0.0f; }, "tfs must be in (0, 1], got 0"},
      {[](auto& p) { p.typical_p = 0.0f; }, "typical_p must be in (0, 1], got 0"},
      {[](auto& p) { p.epsilon_cutoff = 1001.0f; }, "epsilon_cutoff must be in [0, 1000], got 1001"},
      {[](auto& p) { p.eta_cutoff = -1.0f; }, "eta_cutoff must be >= 0, got -1"},
      {[](auto& p) { p.smoothing_curve = 0.5f; }, "smoothing_curve must be >= 1, got 0.5"},
      {[](auto& p) { p.nsigma = -1.0f; }, "nsigma must be >= 0, got -1"},
      {[](auto& p) { p.skew = -1.0f; }, "skew must be >= 0, got -1"},
      {[](auto& p) { p.xtc_probability = 2.0f; }, "xtc_probability must be in [0, 1], got 2"},
      {[](auto& p) { p.xtc_threshold = -0.1f; }, "xtc_threshold must be in [0, 1]"},
      {[](auto& p) { p.mirostat_mode = 1; }, "mirostat_mode must be 0 (off) or 2, got 1"},
      {[](auto& p) { p.mirostat_tau = -1.0f; }, "mirostat_tau must be >= 0, got -1"},
      {[](auto& p) { p.dry_base = 1.0f; }, "dry_base must be > 1, got 1"},
      {[](auto& p) { p.dry_multiplier = -1.0f; }, "dry_multiplier must be >= 0, got -1"},
      {[](auto& p) { p.dry_allowed_length = -1; }, "dry_allowed_length must be >= 0, got -1"},
      {[](auto& p) { p.dry_range = -5; }, "dry_range must be >= 0, got -5"},
      {[](auto& p) { p.no_repeat_ngram_size = -1; }, "no_repeat_ngram_size must be >= 0, got -1"},
      {[](auto& p) { p.dynatemp_min = -1.0f; }, "dynatemp_min must be >= 0, got -1"},
      {[](auto& p) {
         p.dynatemp_min = 2.0f;
         p.dynatemp_max = 1.0f;
       },
       "dynatemp_min (2) must be <= dynatemp_max (1)"},
      {[](auto& p) { p.n = 0; }, "n must be in [1, 128], got 0"},
      {[](auto& p) {
         p.n = 3;
         p.best_of = 2;
       },
       "best_of must be >= n (n is 3), got 2"},
      {[](auto& p) { p.max_tokens = 0; }, "max_tokens must be >= 1, got 0"},
      {[](auto& p) { p.min_tokens = -1; }, "min_tokens must be >= 0, got -1"},
      {[](auto& p) {
         p.max_tokens = 5;
         p.min_tokens = 6;
       },
       "min_tokens must be <= max_tokens (5), got 6"},
      {[](auto& p) { p.logprobs = 21; }, "logprobs must be in [0, 20] (--max-log-probs), got 21"},
      {[](auto& p) { p.prompt_logprobs = -1; }, "prompt_logprobs must be >= 0, got -1"},
      {[](auto& p) { p.prompt_logprobs = 50; }, "prompt_logprobs must be in [0, 20] (--max-log-probs), got 50"},
      {[](auto& p) { p.truncate_prompt_tokens = 0; }, "truncate_prompt_tokens must be >= 1, got 0"},
      {[](auto& p) {
         p.logit_bias = {{1000, 1.0f}};
       },
       "logit_bias contains token id 1000, allowed are 0 to 999"},
      {[](auto& p) {
         p.logit_bias = {{5, 150.0f}};
       },
       "logit_bias for token 5 must be in [-100, 100], got 150"},
      {[](auto& p) { p.custom_token_bans = {-1}; }, "custom_token_bans contains token id -1"},
      {[](auto& p) { p.allowed_token_ids = std::vector<int32_t>{}; }, "allowed_token_ids must not be empty"},
      {[](auto& p) {
         p.allowed_token_ids = std::vector<int32_t>{1, 5000};
       },
       "allowed_token_ids contains token id 5000"},
      {[](auto& p) { p.stop_token_ids = {1000}; }, "stop_token_ids contains token id 1000"},
      {[](auto& p) {
         p.stop = {"ok", ""};
       },
       "stop must not contain an empty string"},
      {[](auto& p) { p.banned_strings = {""}; }, "banned_strings must not contain an empty string"},
      // issue #26: 100k phrases of 200 bytes built a 1.45 GB automaton.
      {[](auto& p) { p.banned_strings = std::vector<std::string>(kMaxBannedStrings + 1, "x"); },
       "banned_strings has 2049 phrases; at most 2048"},
      {[](auto& p) { p.banned_strings = std::vector<std::string>(17, std::string(4000, 'x')); },
       "banned_strings holds 68000 bytes in all; at most 65536 bytes"},
      {[](auto& p) { p.sampler_priority = std::vector<SamplerId>{SamplerId::Temperature}; },
       "sampler_priority must list all 14 samplers; missing: TOP_P_TOP_K (0)"},
  };
  for (const auto& c : cases) {
    const std::string got = validation_error(c.change);
    EXPECT_NE(got.find(c.want), std::string::npos) << "want: " << c.want << "\n got: " << got;
  }
}

TEST(SamplingParams, BannedStringsAtTheirLimitsAreValid) {
  EXPECT_EQ(validation_error([](auto& p) { p.banned_strings = std::vector<std::string>(kMaxBannedStrings, "x"); }), "");
  EXPECT_EQ(validation_error([](auto& p) { p.banned_strings = {std::string(kMaxBannedStringsBytes, 'x')}; }), "");
}

TEST(SamplingParams, LenientValues) {
  // top_k 0 means off, like -1
  EXPECT_EQ(validation_error([](auto& p) { p.top_k = 0; }), "");
  // seed -1 (through the table, as a parser would set it) means random
  SamplingParams p;
  const SamplingParamInfo* seed = find_sampling_param("seed");
  ASSERT_NE(seed, nullptr);
  seed->set(p, -1.0);
  EXPECT_FALSE(p.seed.has_value());
  seed->set(p, 42.0);
  EXPECT_EQ(p.seed, 42u);
  // early_stopping / length_penalty are ignored without beam search (SillyTavern sends them)
  EXPECT_EQ(validation_error([](auto& q) {
              q.early_stopping = EarlyStopping::True;
              q.length_penalty = 2.0f;
            }),
            "");
  EXPECT_EQ(parse_early_stopping("never"), EarlyStopping::Never);
  EXPECT_EQ(parse_early_stopping("True"), EarlyStopping::True);
  EXPECT_EQ(parse_early_stopping("maybe"), std::nullopt);
}

TEST(SamplingParams, TableMatchesTheStructDefaults) {
  const SamplingParams defaults;
  for (const SamplingParamInfo& info : sampling_param_table()) {
    if (!info.get) continue;
    const auto v = info.get(defaults);
    if (std::isnan(info.default_value)) {
      EXPECT_FALSE(v.has_value()) << info.name;
    } else if (info.name == "seed") {
      EXPECT_FALSE(v.has_value());  // -1 in the table is "unset"
    } else {
      ASSERT_TRUE(v.has_value()) << info.name;
      EXPECT_NEAR(*v, info.default_value, 1e-6) << info.name;
    }
    EXPECT_FALSE(info.help.empty()) << info.name;
  }
  // every parameter named in the brief is in the table
  for (const char* name : {"n",
                           "best_of",
                           "seed",
                           "presence_penalty",
                           "frequency_penalty",
                           "repetition_penalty",
                           "temperature",
                           "dynatemp_min",
                           "dynatemp_max",
                           "dynatemp_exponent",
                           "smoothing_factor",
                           "smoothing_curve",
                           "top_p",
                           "top_k",
                           "top_a",
                           "min_p",
                           "tfs",
                           "eta_cutoff",
                           "epsilon_cutoff",
                           "typical_p",
                           "mirostat_mode",
                           "mirostat_tau",
                           "mirostat_eta",
                           "nsigma",
                           "skew",
                           "xtc_threshold",
                           "xtc_probability",
                           "dry_multiplier",
                           "dry_base",
                           "dry_allowed_length",
                           "dry_sequence_breakers",
                           "dry_range",
                           "no_repeat_ngram_size",
                           "temperature_last",
                           "sampler_priority",
                           "logit_bias",
                           "custom_token_bans",
                           "allowed_token_ids",
                           "min_tokens",
                           "ignore_eos",
                           "max_tokens",
                           "stop",
                           "stop_token_ids",
                           "include_stop_str_in_output",
                           "skip_special_tokens",
                           "spaces_between_special_tokens",
                           "truncate_prompt_tokens",
                           "use_beam_search",
                           "length_penalty",
                           "early_stopping",
                           "logprobs",
                           "prompt_logprobs",
                           "banned_strings"}) {
    EXPECT_NE(find_sampling_param(name), nullptr) << name;
  }
}

TEST(SamplingParams, AliasesFindTheirParameter) {
  EXPECT_EQ(find_sampling_param("dry_penalty_last_n")->name, "dry_range");
  EXPECT_EQ(find_sampling_param("sampler_order")->name, "sampler_priority");
  EXPECT_EQ(find_sampling_param("typical")->name, "typical_p");
  EXPECT_EQ(find_sampling_param("max_new_tokens")->name, "max_tokens");
  EXPECT_EQ(find_sampling_param("dynatemp_low")->name, "dynatemp_min");
  EXPECT_EQ(find_sampling_param("no_such_thing"), nullptr);
  SamplingParams p;
  find_sampling_param("dry_penalty_last_n")->set(p, 256.0);
  EXPECT_EQ(p.dry_range, 256);
  find_sampling_param("top_k")->set(p, 40.0);
  EXPECT_EQ(p.top_k, 40);
  try {
    find_sampling_param("top_k")->set(p, 2.5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "top_k must be an integer, got 2.5");
  }
  EXPECT_THROW(find_sampling_param("max_tokens")->set(p, NAN), Error);
  find_sampling_param("temperature_last")->set(p, 1.0);
  EXPECT_TRUE(p.temperature_last);
  EXPECT_EQ(find_sampling_param("top_p")->range_text(), "in (0, 1]");
}

TEST(SamplingParams, SamplerPriority) {
  const std::vector<int> all = {13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  auto order = parse_sampler_priority(all);
  ASSERT_EQ(order.size(), 14u);
  EXPECT_EQ(order.front(), SamplerId::Xtc);
  const std::vector<int> dup = {0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  try {
    parse_sampler_priority(dup);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sampler_priority lists TOP_P_TOP_K (0) twice"), std::string::npos);
  }
  const std::vector<std::string> bad = {"temperature", "warp_drive"};
  try {
    parse_sampler_priority(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown sampler 'warp_drive'"), std::string::npos);
  }
  const std::vector<int> kobold_seven = {6, 0, 1, 3, 4, 2, 5};  // KoboldCpp-style partial order
  EXPECT_THROW(parse_sampler_priority(kobold_seven), Error);
  EXPECT_EQ(sampler_id_from_name("Temperature"), SamplerId::Temperature);
  EXPECT_EQ(sampler_id_name(SamplerId::NoRepeatNgram), "NO_REPEAT_NGRAM");
  auto def = default_sampler_order(true);
  EXPECT_EQ(def.back(), SamplerId::Temperature);
  EXPECT_EQ(def.front(), SamplerId::Dry);
  EXPECT_EQ(default_sampler_order(false)[3], SamplerId::Temperature);
}

}  // namespace
}  // namespace cypris
