// SamplingParams: defaults and ranges (the descriptor table), validation, sampler IDs.
#include "engine/request/sampling_params.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "engine/common/error.h"

namespace cypris {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();

constexpr std::array<std::string_view, kNumSamplerIds> kSamplerNames = {
    "TOP_P_TOP_K", "TOP_A",           "MIN_P",      "TFS",        "TYPICAL_P",      "TEMPERATURE", "PENALTIES",
    "DRY",         "NO_REPEAT_NGRAM", "TOP_NSIGMA", "ETA_CUTOFF", "EPSILON_CUTOFF", "QUADRATIC",   "XTC"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string fmt_num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

// Integer parameters take integral values only (40 and 40.0, not 2.5), as Aphrodite's request
// models do; out-of-int range values are clamped so validate() reports them by range.
int to_int(double v, const char* name) {
  CYPRIS_CHECK(std::isfinite(v) && v == std::floor(v), "{} must be an integer, got {}", name, fmt_num(v));
  return static_cast<int>(std::clamp(v, -2e9, 2e9));
}

// Accessor helpers for the table. Each lambda is captureless so it converts to a function pointer.
#define CYPRIS_FLOAT(field)                                                                      \
  [](const SamplingParams& p) -> std::optional<double> { return static_cast<double>(p.field); }, \
      [](SamplingParams& p, std::optional<double> v) {                                           \
        p.field = v ? static_cast<float>(*v) : SamplingParams{}.field;                           \
      }
#define CYPRIS_INT(field)                                                                        \
  [](const SamplingParams& p) -> std::optional<double> { return static_cast<double>(p.field); }, \
      [](SamplingParams& p, std::optional<double> v) { p.field = v ? to_int(*v, #field) : SamplingParams{}.field; }
#define CYPRIS_OPT_INT(field)                                        \
  [](const SamplingParams& p) -> std::optional<double> {             \
    return p.field ? std::optional<double>(*p.field) : std::nullopt; \
  },                                                                 \
      [](SamplingParams& p, std::optional<double> v) {               \
        if (v)                                                       \
          p.field = to_int(*v, #field);                              \
        else                                                         \
          p.field.reset();                                           \
      }
#define CYPRIS_BOOL(field)                                                              \
  [](const SamplingParams& p) -> std::optional<double> { return p.field ? 1.0 : 0.0; }, \
      [](SamplingParams& p, std::optional<double> v) { p.field = v ? *v != 0.0 : SamplingParams{}.field; }
#define CYPRIS_NONSCALAR nullptr, nullptr
// A switch parameter: the feature it turns on and the values (scalars) at which it is off.
#define CYPRIS_OFF(feature, off_min, off_max) SamplerFeature::feature, off_min, off_max, nullptr
#define CYPRIS_SET(feature, expr) SamplerFeature::feature, 0, 0, [](const SamplingParams& p) { return expr; }

using K = ParamKind;

// THE table of sampling parameters. Defaults follow Aphrodite Engine's SamplingParams; ranges follow
// its validation, made lenient where a client value has an obvious meaning (top_k 0 = off, seed -1 =
// random). Order: as shown in the UI.
const std::vector<SamplingParamInfo>& table() {
  static const std::vector<SamplingParamInfo> t = {
      // name, kind, group, default, min, max, min_excl, max_excl, optional, ui_max, aliases, help, get/set
      {"n", K::Int, "Output", 1, 1, 128, false, false, false, 16, "",
       "Number of output sequences to return for the prompt.", CYPRIS_INT(n)},
      {"best_of", K::Int, "Output", kUnset, 1, 128, false, false, true, 16, "",
       "Number of sequences generated, of which the best n are returned (default n). Beam width when "
       "use_beam_search is on.",
       CYPRIS_OPT_INT(best_of)},
      {"seed", K::Int, "Output", -1, -1, 18446744073709551615.0, false, false, true, 4294967295.0, "sampler_seed",
       "Random seed for this request; -1 or unset means random.",
       [](const SamplingParams& p) -> std::optional<double> {
         return p.seed ? std::optional<double>(static_cast<double>(*p.seed)) : std::nullopt;
       },
       [](SamplingParams& p, std::optional<double> v) {
         if (v && *v >= 0)
           p.seed = static_cast<uint64_t>(std::min(*v, 18446744073709549568.0));
         else
           p.seed.reset();
       }},
      {"max_tokens", K::Int, "Output", 16, 1, kInf, false, false, true, 8192, "max_new_tokens max_length",
       "Maximum number of tokens to generate per output sequence; unset means up to the context length.",
       CYPRIS_OPT_INT(max_tokens)},
      {"min_tokens", K::Int, "Output", 0, 0, kInf, false, false, false, 1024, "",
       "EOS and stop_token_ids are banned until this many tokens have been generated.", CYPRIS_INT(min_tokens),
       CYPRIS_OFF(MinTokens, -kInf, 0)},
      {"ignore_eos", K::Bool, "Output", 0, 0, 1, false, false, false, 1, "", "Keep generating after the EOS token.",
       CYPRIS_BOOL(ignore_eos)},
      {"logprobs", K::Int, "Output", kUnset, 0, kInf, false, false, true, 20, "",
       "Number of most likely tokens whose log probabilities are returned per output token (plus the "
       "sampled one); at most --max-log-probs.",
       CYPRIS_OPT_INT(logprobs)},
      {"prompt_logprobs", K::Int, "Output", kUnset, 0, kInf, false, false, true, 20, "",
       "Number of log probabilities to return per prompt token; at most --max-log-probs.",
       CYPRIS_OPT_INT(prompt_logprobs)},

      {"temperature", K::Float, "Temperature", 1, 0, kInf, false, false, false, 5, "",
       "Randomness of the output: lower is more deterministic, 0 is greedy. Off: 1.", CYPRIS_FLOAT(temperature),
       CYPRIS_OFF(Temperature, 1, 1)},
      {"temperature_last", K::Bool, "Temperature", 0, 0, 1, false, false, false, 1, "",
       "Apply temperature after all truncation samplers (after XTC) instead of before them.",
       CYPRIS_BOOL(temperature_last), CYPRIS_OFF(Order, 0, 0)},
      {"dynatemp_min", K::Float, "Temperature", 0, 0, kInf, false, false, false, 5, "dynatemp_low",
       "Dynamic temperature: the temperature used at zero entropy. Dynamic temperature is on when min or "
       "max is non-zero.",
       CYPRIS_FLOAT(dynatemp_min), CYPRIS_OFF(DynaTemp, 0, 0)},
      {"dynatemp_max", K::Float, "Temperature", 0, 0, kInf, false, false, false, 5, "dynatemp_high",
       "Dynamic temperature: the temperature used at maximum entropy.", CYPRIS_FLOAT(dynatemp_max),
       CYPRIS_OFF(DynaTemp, 0, 0)},
      {"dynatemp_exponent", K::Float, "Temperature", 1, 0, kInf, false, false, false, 5, "",
       "Dynamic temperature exponent: higher values trend towards the minimum temperature.",
       CYPRIS_FLOAT(dynatemp_exponent)},
      {"smoothing_factor", K::Float, "Temperature", 0, 0, kInf, false, false, false, 10, "",
       "Quadratic sampling strength. Off: 0.", CYPRIS_FLOAT(smoothing_factor), CYPRIS_OFF(Quadratic, -kInf, 0)},
      {"smoothing_curve", K::Float, "Temperature", 1, 1, kInf, false, false, false, 10, "",
       "Cubic sampling curve for quadratic sampling. Off: 1.", CYPRIS_FLOAT(smoothing_curve)},

      {"presence_penalty", K::Float, "Penalties", 0, -2, 2, false, false, false, 2, "",
       "Penalise tokens that already appear in the output. Off: 0.", CYPRIS_FLOAT(presence_penalty),
       CYPRIS_OFF(Penalties, 0, 0)},
      {"frequency_penalty", K::Float, "Penalties", 0, -2, 2, false, false, false, 2, "",
       "Penalise tokens by how often they appear in the output. Off: 0.", CYPRIS_FLOAT(frequency_penalty),
       CYPRIS_OFF(Penalties, 0, 0)},
      {"repetition_penalty", K::Float, "Penalties", 1, 1, kInf, false, false, false, 3, "rep_pen",
       "Penalise tokens that appear in the prompt or the output (divides positive logits, multiplies "
       "negative ones). Off: 1.",
       CYPRIS_FLOAT(repetition_penalty), CYPRIS_OFF(Penalties, 1, 1)},
      {"no_repeat_ngram_size", K::Int, "Penalties", 0, 0, kInf, false, false, false, 10, "",
       "Ban every token that would repeat an n-gram of this size already in the context. Off: 0.",
       CYPRIS_INT(no_repeat_ngram_size), CYPRIS_OFF(NoRepeatNgram, -kInf, 0)},

      {"top_p", K::Float, "Truncation", 1, 0, 1, true, false, false, 1, "",
       "Keep the most likely tokens whose cumulative probability reaches top_p. Off: 1.", CYPRIS_FLOAT(top_p),
       CYPRIS_OFF(TopP, 1, kInf)},
      {"top_k", K::Int, "Truncation", -1, -1, kInf, false, false, false, 200, "",
       "Keep only the top_k most likely tokens. Off: -1 or 0.", CYPRIS_INT(top_k), CYPRIS_OFF(TopK, -kInf, 0)},
      {"top_a", K::Float, "Truncation", 0, 0, 1, false, false, false, 1, "",
       "Drop tokens with probability below top_a * (max probability)^2. Off: 0.", CYPRIS_FLOAT(top_a),
       CYPRIS_OFF(TopA, -kInf, 0)},
      {"min_p", K::Float, "Truncation", 0, 0, 1, false, false, false, 1, "",
       "Drop tokens with probability below min_p * (max probability). Off: 0.", CYPRIS_FLOAT(min_p),
       CYPRIS_OFF(MinP, -kInf, 0)},
      {"tfs", K::Float, "Truncation", 1, 0, 1, true, false, false, 1, "tfs_z",
       "Tail-free sampling: cut the tail where the curvature of the sorted probabilities flattens. Off: 1.",
       CYPRIS_FLOAT(tfs), CYPRIS_OFF(Tfs, 1, kInf)},
      {"eta_cutoff", K::Float, "Truncation", 0, 0, kInf, false, false, false, 20, "",
       "Eta sampling: entropy-adaptive probability cutoff, in units of 1e-4. Off: 0.", CYPRIS_FLOAT(eta_cutoff),
       CYPRIS_OFF(EtaCutoff, -kInf, 0)},
      {"epsilon_cutoff", K::Float, "Truncation", 0, 0, 1000, false, false, false, 20, "eps_cutoff",
       "Epsilon sampling: drop tokens below this probability, in units of 1e-4. Off: 0.", CYPRIS_FLOAT(epsilon_cutoff),
       CYPRIS_OFF(EpsilonCutoff, -kInf, 0)},
      {"typical_p", K::Float, "Truncation", 1, 0, 1, true, false, false, 1, "typical",
       "Locally typical sampling: keep the tokens whose surprise is closest to the entropy, up to this "
       "cumulative probability. Off: 1.",
       CYPRIS_FLOAT(typical_p), CYPRIS_OFF(TypicalP, 1, kInf)},
      {"nsigma", K::Float, "Truncation", 0, 0, kInf, false, false, false, 5, "",
       "Top-nσ: drop tokens whose logit is below max - nsigma * std(logits). Off: 0.", CYPRIS_FLOAT(nsigma),
       CYPRIS_OFF(TopNsigma, -kInf, 0)},
      {"skew", K::Float, "Truncation", 0, 0, kInf, false, false, false, 5, "",
       "Skew the final distribution (cumulative probabilities in vocabulary order raised to exp(skew)). Off: 0.",
       CYPRIS_FLOAT(skew), CYPRIS_OFF(Skew, 0, 0)},
      {"xtc_threshold", K::Float, "XTC", 0.1, 0, 1, false, false, false, 0.5, "",
       "Exclude Top Choices: tokens at or above this probability are candidates for removal.",
       CYPRIS_FLOAT(xtc_threshold)},
      {"xtc_probability", K::Float, "XTC", 0, 0, 1, false, false, false, 1, "",
       "Exclude Top Choices: the chance per step that XTC is applied. Off: 0.", CYPRIS_FLOAT(xtc_probability),
       CYPRIS_OFF(Xtc, -kInf, 0)},
      {"mirostat_mode", K::Int, "Mirostat", 0, 0, 2, false, false, false, 2, "mirostat",
       "Mirostat mode: 0 = off, 2 = Mirostat 2.0 (all other samplers are skipped).", CYPRIS_INT(mirostat_mode),
       CYPRIS_OFF(Mirostat, 0, 0)},
      {"mirostat_tau", K::Float, "Mirostat", 0, 0, kInf, false, false, false, 10, "",
       "Mirostat target surprise (bits).", CYPRIS_FLOAT(mirostat_tau)},
      {"mirostat_eta", K::Float, "Mirostat", 0, 0, kInf, false, false, false, 1, "", "Mirostat learning rate.",
       CYPRIS_FLOAT(mirostat_eta)},

      {"dry_multiplier", K::Float, "DRY", 0, 0, kInf, false, false, false, 5, "",
       "DRY (Don't Repeat Yourself) penalty strength. Off: 0.", CYPRIS_FLOAT(dry_multiplier), CYPRIS_OFF(Dry, 0, 0)},
      {"dry_base", K::Float, "DRY", 1.75, 1, kInf, true, false, false, 4, "",
       "DRY: the penalty grows as base^(repeat length - allowed length).", CYPRIS_FLOAT(dry_base)},
      {"dry_allowed_length", K::Int, "DRY", 2, 0, kInf, false, false, false, 20, "",
       "DRY: repeats up to this many tokens long are not penalised.", CYPRIS_INT(dry_allowed_length)},
      {"dry_range", K::Int, "DRY", 0, 0, kInf, false, false, false, 8192, "dry_penalty_last_n",
       "DRY: how many of the last tokens are searched for repeats. 0 = the whole context.", CYPRIS_INT(dry_range)},
      {"dry_sequence_breakers", K::StringList, "DRY", kUnset, -kInf, kInf, false, false, false, 0, "",
       "DRY: strings that end a repeated sequence (a list, or a JSON string of a list). Default "
       "[\"\\n\", \":\", \"\\\"\", \"*\"].",
       CYPRIS_NONSCALAR},
      {"dry_sequence_breaker_ids", K::IntList, "DRY", kUnset, -kInf, kInf, false, false, false, 0, "",
       "DRY: token ids that end a repeated sequence (Aphrodite's engine field); when given, dry_sequence_breakers "
       "is not used.",
       CYPRIS_NONSCALAR},
      {"dry_max_ngram", K::Int, "DRY", 100, 1, kInf, false, false, false, 200, "",
       "DRY: the longest repeat that is measured (Aphrodite 0.6: 100; its 2026 rewrite: 12).",
       CYPRIS_INT(dry_max_ngram)},
      {"dry_max_occurrences", K::Int, "DRY", 0, 0, kInf, false, false, false, 64, "",
       "DRY: search only the most recent this many earlier occurrences of the last token; 0 = all (Aphrodite 0.6; "
       "its 2026 rewrite: 8).",
       CYPRIS_INT(dry_max_occurrences)},
      {"dry_early_exit_match_len", K::Int, "DRY", 0, 0, kInf, false, false, false, 64, "",
       "DRY: stop searching once a repeat this long is found; 0 = search every occurrence (Aphrodite 0.6; its 2026 "
       "rewrite: 8).",
       CYPRIS_INT(dry_early_exit_match_len)},

      {"sampler_priority", K::SamplerOrder, "Order", kUnset, -kInf, kInf, false, false, true, 0, "sampler_order",
       "Custom sampler order: all 14 sampler names or ids. Overrides temperature_last.", CYPRIS_NONSCALAR,
       CYPRIS_SET(Order, p.sampler_priority.has_value())},
      {"logit_bias", K::TokenBiasMap, "Tokens", kUnset, -100, 100, false, false, true, 0, "",
       "Map of token id to a bias in [-100, 100] added to its logit.", CYPRIS_NONSCALAR,
       CYPRIS_SET(LogitBias, !p.logit_bias.empty())},
      {"custom_token_bans", K::IntList, "Tokens", kUnset, -kInf, kInf, false, false, false, 0, "",
       "Token ids that are never generated.", CYPRIS_NONSCALAR,
       CYPRIS_SET(CustomTokenBans, !p.custom_token_bans.empty())},
      {"allowed_token_ids", K::IntList, "Tokens", kUnset, -kInf, kInf, false, false, true, 0, "",
       "When given, only these token ids can be generated.", CYPRIS_NONSCALAR,
       CYPRIS_SET(AllowedTokenIds, p.allowed_token_ids.has_value())},
      {"banned_strings", K::StringList, "Tokens", kUnset, -kInf, kInf, false, false, false, 0,
       "banned_tokens bad_words",
       "Phrases that must not appear in the output: when one is generated, generation rewinds to the token "
       "where it began and bans that token there (KoboldCpp's name: banned_tokens; vLLM's bad_words, which the "
       "2026 Aphrodite takes instead of custom_token_bans, are read as these phrases).",
       CYPRIS_NONSCALAR},

      {"stop", K::StringList, "Stopping", kUnset, -kInf, kInf, false, false, false, 0, "stop_sequence stopping_strings",
       "Strings that stop the generation; they are not part of the output.", CYPRIS_NONSCALAR},
      {"stop_token_ids", K::IntList, "Stopping", kUnset, -kInf, kInf, false, false, false, 0, "",
       "Token ids that stop the generation.", CYPRIS_NONSCALAR},
      {"include_stop_str_in_output", K::Bool, "Stopping", 0, 0, 1, false, false, false, 1, "",
       "Include the matched stop string in the output.", CYPRIS_BOOL(include_stop_str_in_output)},
      {"skip_special_tokens", K::Bool, "Detokenization", 1, 0, 1, false, false, false, 1, "",
       "Leave special tokens out of the output text.", CYPRIS_BOOL(skip_special_tokens)},
      {"spaces_between_special_tokens", K::Bool, "Detokenization", 1, 0, 1, false, false, false, 1, "",
       "Put spaces between special tokens in the output text.", CYPRIS_BOOL(spaces_between_special_tokens)},
      {"truncate_prompt_tokens", K::Int, "Prompt and context", kUnset, 1, kInf, false, false, true, 32768, "",
       "Keep only the last this many prompt tokens.", CYPRIS_OPT_INT(truncate_prompt_tokens)},
      {"n_keep", K::Int, "Prompt and context", kUnset, -1, kInf, false, false, true, 4096, "keep_tokens",
       "--context-shift: prompt tokens every shift keeps at the start of the window (-1: the whole prompt; at "
       "most half the context). Default: a chat's system prompt, else the prompt up to a quarter of the context.",
       CYPRIS_OPT_INT(n_keep)},

      {"use_beam_search", K::Bool, "Beam search", 0, 0, 1, false, false, false, 1, "",
       "Use beam search (beam width = best_of) instead of sampling.", CYPRIS_BOOL(use_beam_search)},
      {"length_penalty", K::Float, "Beam search", 1, -kInf, kInf, false, false, false, 5, "",
       "Beam search: scores are cumulative logprob / length^length_penalty.", CYPRIS_FLOAT(length_penalty)},
      {"early_stopping", K::EarlyStopping, "Beam search", 0, -kInf, kInf, false, false, false, 0, "",
       "Beam search stopping: true (as soon as best_of hypotheses are finished), false (heuristic), "
       "\"never\" (only when no better hypothesis is possible).",
       CYPRIS_NONSCALAR},
  };
  return t;
}

#undef CYPRIS_FLOAT
#undef CYPRIS_INT
#undef CYPRIS_OPT_INT
#undef CYPRIS_BOOL
#undef CYPRIS_NONSCALAR
#undef CYPRIS_OFF
#undef CYPRIS_SET

void check_token_id(int32_t id, int32_t vocab_size, std::string_view param) {
  CYPRIS_CHECK(id >= 0 && id < vocab_size, "{} contains token id {}, allowed are 0 to {}", param, id, vocab_size - 1);
}

}  // namespace

std::string_view sampler_id_name(SamplerId id) {
  const int i = static_cast<int>(id);
  return i >= 0 && i < kNumSamplerIds ? kSamplerNames[static_cast<size_t>(i)] : std::string_view("UNKNOWN");
}

std::optional<SamplerId> sampler_id_from_name(std::string_view name) {
  const std::string l = lower(name);
  for (int i = 0; i < kNumSamplerIds; ++i) {
    if (lower(kSamplerNames[static_cast<size_t>(i)]) == l) return static_cast<SamplerId>(i);
  }
  static const std::pair<std::string_view, SamplerId> kAliases[] = {
      {"temp", SamplerId::Temperature},
      {"top_k", SamplerId::TopPTopK},
      {"top_p", SamplerId::TopPTopK},
      {"typical", SamplerId::TypicalP},
      {"quadratic_sampling", SamplerId::Quadratic},
      {"rep_pen", SamplerId::Penalties},
      {"repetition_penalty", SamplerId::Penalties},
      {"penalty", SamplerId::Penalties},
      {"eta", SamplerId::EtaCutoff},
      {"epsilon", SamplerId::EpsilonCutoff},
      {"nsigma", SamplerId::TopNsigma},
      {"no_repeat_ngram_size", SamplerId::NoRepeatNgram},
  };
  for (const auto& [alias, id] : kAliases) {
    if (alias == l) return id;
  }
  return std::nullopt;
}

std::vector<SamplerId> default_sampler_order(bool temperature_last) {
  std::vector<SamplerId> order = {
      SamplerId::Dry,       SamplerId::Penalties, SamplerId::NoRepeatNgram, SamplerId::Temperature,
      SamplerId::TopNsigma, SamplerId::TopPTopK,  SamplerId::TopA,          SamplerId::MinP,
      SamplerId::Tfs,       SamplerId::EtaCutoff, SamplerId::EpsilonCutoff, SamplerId::TypicalP,
      SamplerId::Quadratic, SamplerId::Xtc};
  if (temperature_last) {
    order.erase(std::find(order.begin(), order.end(), SamplerId::Temperature));
    order.push_back(SamplerId::Temperature);
  }
  return order;
}

SamplerSet SamplingParams::active_samplers() const {
  SamplerSet set;
  for (const SamplingParamInfo& info : table()) {
    if (!info.feature || set.has(*info.feature)) continue;
    bool on = false;
    if (info.is_set) {
      on = info.is_set(*this);
    } else if (const std::optional<double> v = info.get(*this)) {
      on = !(*v >= info.off_min && *v <= info.off_max);
    }
    if (on) set.add(*info.feature);
  }
  return set;
}

bool SamplingParams::in_default_order(SamplerSet active) const {
  if (!active.has(SamplerFeature::Order)) return true;
  // The chain stage each feature runs in (features outside the chain: none).
  auto stage_on = [&](SamplerId id) {
    using F = SamplerFeature;
    switch (id) {
      case SamplerId::TopPTopK:
        return active.has(F::TopP) || active.has(F::TopK);
      case SamplerId::TopA:
        return active.has(F::TopA);
      case SamplerId::MinP:
        return active.has(F::MinP);
      case SamplerId::Tfs:
        return active.has(F::Tfs);
      case SamplerId::TypicalP:
        return active.has(F::TypicalP);
      case SamplerId::Temperature:
        return (active.has(F::Temperature) && temperature != 0.0f) || active.has(F::DynaTemp);
      case SamplerId::Penalties:
        return active.has(F::Penalties);
      case SamplerId::Dry:
        return active.has(F::Dry);
      case SamplerId::NoRepeatNgram:
        return active.has(F::NoRepeatNgram);
      case SamplerId::TopNsigma:
        return active.has(F::TopNsigma);
      case SamplerId::EtaCutoff:
        return active.has(F::EtaCutoff);
      case SamplerId::EpsilonCutoff:
        return active.has(F::EpsilonCutoff);
      case SamplerId::Quadratic:
        return active.has(F::Quadratic);
      case SamplerId::Xtc:
        return active.has(F::Xtc);
    }
    return false;
  };
  // Every pair of stages this request uses runs in the default's relative order, except pairs that
  // commute: temperature scales the logits without changing their order, so top-k alone does not
  // care where it runs.
  const bool top_k_only = !active.has(SamplerFeature::TopP);
  auto commute = [&](SamplerId a, SamplerId b) {
    const bool temp_k = (a == SamplerId::Temperature && b == SamplerId::TopPTopK) ||
                        (a == SamplerId::TopPTopK && b == SamplerId::Temperature);
    return temp_k && top_k_only;
  };
  const std::vector<SamplerId> mine = sampler_order();
  const std::vector<SamplerId> def = default_sampler_order(false);
  auto pos = [](const std::vector<SamplerId>& order, SamplerId id) {
    return std::find(order.begin(), order.end(), id) - order.begin();
  };
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!stage_on(mine[i])) continue;
    for (size_t j = i + 1; j < mine.size(); ++j) {
      if (!stage_on(mine[j]) || commute(mine[i], mine[j])) continue;
      if (pos(def, mine[i]) > pos(def, mine[j])) return false;
    }
  }
  return true;
}

std::vector<SamplerId> SamplingParams::sampler_order() const {
  if (sampler_priority) return *sampler_priority;
  return default_sampler_order(temperature_last);
}

void SamplingParams::apply_dynatemp_range(float range) {
  if (range == 0.0f) {
    dynatemp_min = dynatemp_max = 0.0f;
    return;
  }
  dynatemp_min = std::max(0.0f, temperature - range);
  dynatemp_max = temperature + range;
}

static void check_priority_complete(const std::vector<SamplerId>& order) {
  std::set<int> seen;
  for (SamplerId id : order) {
    const int i = static_cast<int>(id);
    CYPRIS_CHECK(i >= 0 && i < kNumSamplerIds, "sampler_priority contains unknown sampler id {}, allowed are 0 to 13",
                 i);
    CYPRIS_CHECK(seen.insert(i).second,
                 "sampler_priority lists {} ({}) twice; it must list each of the 14 samplers once", sampler_id_name(id),
                 i);
  }
  if (static_cast<int>(seen.size()) != kNumSamplerIds) {
    std::string missing;
    for (int i = 0; i < kNumSamplerIds; ++i) {
      if (!seen.count(i)) missing += fmt::format("{}{} ({})", missing.empty() ? "" : ", ", kSamplerNames[i], i);
    }
    CYPRIS_FAIL("sampler_priority must list all 14 samplers; missing: {}", missing);
  }
}

std::vector<SamplerId> parse_sampler_priority(std::span<const std::string> entries) {
  std::vector<SamplerId> order;
  for (const std::string& e : entries) {
    int v = 0;
    auto [ptr, ec] = std::from_chars(e.data(), e.data() + e.size(), v);
    if (ec == std::errc() && ptr == e.data() + e.size()) {
      CYPRIS_CHECK(v >= 0 && v < kNumSamplerIds, "sampler_priority contains unknown sampler id {}, allowed are 0 to 13",
                   v);
      order.push_back(static_cast<SamplerId>(v));
      continue;
    }
    auto id = sampler_id_from_name(e);
    CYPRIS_CHECK(id.has_value(), "sampler_priority contains unknown sampler '{}'; allowed are {}", e,
                 fmt::join(kSamplerNames, ", "));
    order.push_back(*id);
  }
  check_priority_complete(order);
  return order;
}

std::vector<SamplerId> parse_sampler_priority(std::span<const int> ids) {
  std::vector<SamplerId> order;
  for (int v : ids) {
    CYPRIS_CHECK(v >= 0 && v < kNumSamplerIds, "sampler_priority contains unknown sampler id {}, allowed are 0 to 13",
                 v);
    order.push_back(static_cast<SamplerId>(v));
  }
  check_priority_complete(order);
  return order;
}

std::optional<EarlyStopping> parse_early_stopping(std::string_view s) {
  const std::string l = lower(s);
  if (l == "true" || l == "1") return EarlyStopping::True;
  if (l == "false" || l == "0") return EarlyStopping::False;
  if (l == "never") return EarlyStopping::Never;
  return std::nullopt;
}

std::string_view early_stopping_name(EarlyStopping e) {
  switch (e) {
    case EarlyStopping::True:
      return "true";
    case EarlyStopping::False:
      return "false";
    case EarlyStopping::Never:
      return "never";
  }
  return "false";
}

std::string SamplingParamInfo::range_text() const {
  const bool has_min = std::isfinite(min);
  const bool has_max = std::isfinite(max);
  if (kind == ParamKind::Bool) return "true or false";
  if (has_min && has_max) {
    return fmt::format("in {}{}, {}{}", min_exclusive ? "(" : "[", fmt_num(min), fmt_num(max),
                       max_exclusive ? ")" : "]");
  }
  if (has_min) return fmt::format("{} {}", min_exclusive ? ">" : ">=", fmt_num(min));
  if (has_max) return fmt::format("{} {}", max_exclusive ? "<" : "<=", fmt_num(max));
  return "a finite number";
}

std::span<const SamplingParamInfo> sampling_param_table() {
  return table();
}

const SamplingParamInfo* find_sampling_param(std::string_view name) {
  for (const SamplingParamInfo& info : table()) {
    if (info.name == name) return &info;
  }
  for (const SamplingParamInfo& info : table()) {
    std::string_view rest = info.aliases;
    while (!rest.empty()) {
      const size_t sp = rest.find(' ');
      if (rest.substr(0, sp) == name) return &info;
      if (sp == std::string_view::npos) break;
      rest.remove_prefix(sp + 1);
    }
  }
  return nullptr;
}

void SamplingParams::validate(int max_log_probs, int32_t vocab_size) const {
  // Scalars: the ranges of the table.
  for (const SamplingParamInfo& info : table()) {
    if (!info.get) continue;
    const std::optional<double> v = info.get(*this);
    if (!v) continue;
    bool ok = std::isfinite(*v);
    if (ok && std::isfinite(info.min)) ok = info.min_exclusive ? *v > info.min : *v >= info.min;
    if (ok && std::isfinite(info.max)) ok = info.max_exclusive ? *v < info.max : *v <= info.max;
    if (!ok) {
      if (info.name == "top_k") CYPRIS_FAIL("top_k must be -1 or 0 (off) or >= 1, got {}", *v);
      CYPRIS_FAIL("{} must be {}, got {}", info.name, info.range_text(), fmt_num(*v));
    }
  }
  // Cross-field rules and non-scalars.
  CYPRIS_CHECK(effective_best_of() >= n, "best_of must be >= n (n is {}), got {}", n, effective_best_of());
  CYPRIS_CHECK(mirostat_mode == 0 || mirostat_mode == 2, "mirostat_mode must be 0 (off) or 2, got {}", mirostat_mode);
  if (dynatemp_enabled()) {
    CYPRIS_CHECK(dynatemp_min <= dynatemp_max, "dynatemp_min ({}) must be <= dynatemp_max ({})", dynatemp_min,
                 dynatemp_max);
  }
  if (max_tokens) {
    CYPRIS_CHECK(min_tokens <= *max_tokens, "min_tokens must be <= max_tokens ({}), got {}", *max_tokens, min_tokens);
  }
  if (logprobs) {
    CYPRIS_CHECK(*logprobs <= max_log_probs, "logprobs must be in [0, {}] (--max-log-probs), got {}", max_log_probs,
                 *logprobs);
  }
  if (prompt_logprobs) {
    CYPRIS_CHECK(*prompt_logprobs <= max_log_probs, "prompt_logprobs must be in [0, {}] (--max-log-probs), got {}",
                 max_log_probs, *prompt_logprobs);
  }
  if (sampler_priority) check_priority_complete(*sampler_priority);
  for (const auto& [id, bias] : logit_bias) {
    check_token_id(id, vocab_size, "logit_bias");
    CYPRIS_CHECK(std::isfinite(bias) && bias >= -100.0f && bias <= 100.0f,
                 "logit_bias for token {} must be in [-100, 100], got {}", id, bias);
  }
  for (int32_t id : custom_token_bans) check_token_id(id, vocab_size, "custom_token_bans");
  if (allowed_token_ids) {
    CYPRIS_CHECK(!allowed_token_ids->empty(), "allowed_token_ids must not be empty when given");
    for (int32_t id : *allowed_token_ids) check_token_id(id, vocab_size, "allowed_token_ids");
  }
  if (!custom_token_bans.empty()) {
    // Bans that leave no token to sample: the request could only fail or answer garbage.
    std::vector<int32_t> bans = custom_token_bans;
    std::sort(bans.begin(), bans.end());
    bans.erase(std::unique(bans.begin(), bans.end()), bans.end());
    if (allowed_token_ids) {
      const bool any_left = std::any_of(allowed_token_ids->begin(), allowed_token_ids->end(),
                                        [&](int32_t id) { return !std::binary_search(bans.begin(), bans.end(), id); });
      CYPRIS_CHECK(any_left, "custom_token_bans bans every token of allowed_token_ids: nothing is left to generate");
    } else {
      CYPRIS_CHECK(static_cast<int64_t>(bans.size()) < static_cast<int64_t>(vocab_size),
                   "custom_token_bans bans every token of the vocabulary ({} tokens): nothing is left to generate",
                   vocab_size);
    }
  }
  for (int32_t id : stop_token_ids) check_token_id(id, vocab_size, "stop_token_ids");
  for (int32_t id : dry_sequence_breaker_ids) check_token_id(id, vocab_size, "dry_sequence_breakers");
  for (const std::string& s : stop) CYPRIS_CHECK(!s.empty(), "stop must not contain an empty string");
  // Bounded before the automaton is built (100k phrases of 200 bytes cost seconds and 1.45 GB).
  CYPRIS_CHECK(banned_strings.size() <= kMaxBannedStrings,
               "banned_strings has {} phrases; at most {} are allowed in one request", banned_strings.size(),
               kMaxBannedStrings);
  size_t banned_bytes = 0;
  for (const std::string& s : banned_strings) {
    CYPRIS_CHECK(!s.empty(), "banned_strings must not contain an empty string");
    banned_bytes += s.size();
  }
  CYPRIS_CHECK(banned_bytes <= kMaxBannedStringsBytes,
               "banned_strings holds {} bytes in all; at most {} bytes ({} KiB) are allowed in one request",
               banned_bytes, kMaxBannedStringsBytes, kMaxBannedStringsBytes / 1024);
}

void SamplingParams::resolve_dry_sequence_breakers(
    const std::function<std::vector<int32_t>(const std::string&)>& encode) {
  dry_sequence_breaker_ids.clear();
  for (const std::string& s : dry_sequence_breakers) {
    if (s.empty()) continue;
    const std::vector<int32_t> ids = encode("a" + s);
    if (ids.empty()) continue;
    if (std::find(dry_sequence_breaker_ids.begin(), dry_sequence_breaker_ids.end(), ids.back()) ==
        dry_sequence_breaker_ids.end()) {
      dry_sequence_breaker_ids.push_back(ids.back());
    }
  }
}

std::string GuidedDecodingParams::cache_key() const {
  // Length-prefixed fields: no two different specs share a key.
  std::string k = fmt::format("{}:{}:", static_cast<int>(kind), text.size());
  k += text;
  for (const auto& c : choices) {
    k += fmt::format(":{}:", c.size());
    k += c;
  }
  if (whitespace_pattern) {
    k += fmt::format("|ws{}:", whitespace_pattern->size());
    k += *whitespace_pattern;
  }
  return k;
}

}  // namespace cypris
