// SamplingParams: every per-request sampling and generation parameter Aphrodite Engine accepts, the
// sampler chain IDs, validation, and ONE table of parameter descriptors (name, default, range, help)
// from which the HTTP parsers and the UI sliders are generated.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cypris {

// Kobold-compatible sampler IDs (Aphrodite 0.6 numbering; not KoboldCpp's).
enum class SamplerId : int {
  TopPTopK = 0,
  TopA = 1,
  MinP = 2,
  Tfs = 3,
  TypicalP = 4,
  Temperature = 5,
  Penalties = 6,
  Dry = 7,
  NoRepeatNgram = 8,
  TopNsigma = 9,
  EtaCutoff = 10,
  EpsilonCutoff = 11,
  Quadratic = 12,
  Xtc = 13,
};
inline constexpr int kNumSamplerIds = 14;

// Upper-case names as Aphrodite spells them ("TOP_P_TOP_K", "DRY", ...).
std::string_view sampler_id_name(SamplerId id);
// Accepts the names case-insensitively ("top_p_top_k", "Min_P") and a few spellings clients use
// ("temp", "top_k", "top_p", "typical", "quadratic_sampling", "rep_pen", "penalties").
std::optional<SamplerId> sampler_id_from_name(std::string_view name);
// Default chain: DRY, PENALTIES, NO_REPEAT_NGRAM, TEMPERATURE, TOP_NSIGMA, TOP_P_TOP_K, TOP_A, MIN_P,
// TFS, ETA_CUTOFF, EPSILON_CUTOFF, TYPICAL_P, QUADRATIC, XTC.
std::vector<SamplerId> default_sampler_order(bool temperature_last);

// The samplers and logits processors a row can use. Which of them a request uses is read from the
// parameter table (sampling_param_table): each switch parameter names its feature and the values at
// which it is off, so the sampler's fast path, the GPU path and the `*_enabled` helpers all ask
// the same list (SamplingParams::active_samplers). A row adds what its state asks for
// (engine/sampling/sampler.h, active_samplers(const SamplerRow&)): pending min_tokens, banned-string
// position bans, a guided-decoding mask.
enum class SamplerFeature : uint8_t {
  MinTokens,  // EOS and stop ids banned while fewer than min_tokens are out
  LogitBias,
  CustomTokenBans,
  AllowedTokenIds,
  Penalties,  // repetition / presence / frequency
  Dry,
  NoRepeatNgram,
  Temperature,  // != 1 (0 is greedy)
  DynaTemp,
  Quadratic,  // smoothing_factor
  TopP,
  TopK,
  TopA,
  MinP,
  Tfs,
  EtaCutoff,
  EpsilonCutoff,
  TypicalP,
  TopNsigma,
  Skew,
  Xtc,
  Mirostat,
  Order,         // temperature_last or sampler_priority (in_default_order says whether it matters)
  PositionBans,  // row state: banned-string bans at the next position
  GuidedMask,    // row state: a grammar / guided-decoding token mask
  Count
};

// A set of SamplerFeatures (a bit set).
class SamplerSet {
 public:
  constexpr SamplerSet() = default;
  constexpr SamplerSet(std::initializer_list<SamplerFeature> fs) {
    for (SamplerFeature f : fs) add(f);
  }
  constexpr void add(SamplerFeature f) { bits_ |= bit(f); }
  constexpr void remove(SamplerFeature f) { bits_ &= ~bit(f); }
  constexpr bool has(SamplerFeature f) const { return (bits_ & bit(f)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr bool subset_of(SamplerSet o) const { return (bits_ & ~o.bits_) == 0; }
  constexpr bool operator==(const SamplerSet&) const = default;

 private:
  static constexpr uint32_t bit(SamplerFeature f) { return uint32_t{1} << static_cast<unsigned>(f); }
  uint32_t bits_ = 0;
};
static_assert(static_cast<int>(SamplerFeature::Count) <= 32, "SamplerSet holds 32 features");

// Beam search stopping rule: true (stop when best_of hypotheses finished), false (heuristic),
// "never" (canonical beam search). Same semantics as vLLM / Hugging Face.
enum class EarlyStopping { False, True, Never };

// Structured output (guided decoding, engine/guided): the grammar a request's output must match.
enum class GuidedKind {
  None,
  JsonSchema,  // text: the schema (JSON)
  JsonObject,  // any JSON object (response_format json_object)
  Regex,       // text: the pattern (whole output)
  Choice,      // choices: the output is exactly one of them
  Lark,        // text: EBNF as vLLM's guided_grammar takes it (Lark syntax)
  Gbnf,        // text: llama.cpp GBNF (KoboldCpp's "grammar")
};
struct GuidedDecodingParams {
  GuidedKind kind = GuidedKind::None;
  std::string text;
  std::vector<std::string> choices;
  std::optional<std::string> whitespace_pattern;  // guided_whitespace_pattern (JSON kinds)
  bool active() const { return kind != GuidedKind::None; }
  // Identifies the grammar (the compile cache's key).
  std::string cache_key() const;
};

// banned_strings per request: every phrase is a path in the request's Aho-Corasick automaton
// (tens of bytes per phrase byte), so the phrases are bounded in number and in bytes.
inline constexpr size_t kMaxBannedStrings = 2048;
inline constexpr size_t kMaxBannedStringsBytes = 64 * 1024;

struct SamplingParams {
  // --- outputs ---
  int n = 1;
  std::optional<int> best_of;    // unset: n. Beam width when use_beam_search.
  std::optional<uint64_t> seed;  // unset: random (clients send -1 for that)
  // --- penalties ---
  float presence_penalty = 0.0f;    // output tokens only
  float frequency_penalty = 0.0f;   // output tokens only
  float repetition_penalty = 1.0f;  // prompt + output tokens
  // --- temperature ---
  float temperature = 1.0f;   // 0 = greedy
  float dynatemp_min = 0.0f;  // dynamic temperature is on when min or max is non-zero
  float dynatemp_max = 0.0f;
  float dynatemp_exponent = 1.0f;
  float smoothing_factor = 0.0f;  // quadratic sampling; 0 = off
  float smoothing_curve = 1.0f;
  // --- truncation ---
  float top_p = 1.0f;
  int top_k = -1;  // -1 or 0 = off
  float top_a = 0.0f;
  float min_p = 0.0f;
  float tfs = 1.0f;
  float eta_cutoff = 0.0f;      // units of 1e-4
  float epsilon_cutoff = 0.0f;  // units of 1e-4
  float typical_p = 1.0f;
  int mirostat_mode = 0;  // 0 or 2
  float mirostat_tau = 0.0f;
  float mirostat_eta = 0.0f;
  float nsigma = 0.0f;
  float skew = 0.0f;
  float xtc_threshold = 0.1f;
  float xtc_probability = 0.0f;
  // --- DRY ---
  float dry_multiplier = 0.0f;
  float dry_base = 1.75f;
  int dry_allowed_length = 2;
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
  std::vector<int32_t> dry_sequence_breaker_ids;  // filled by resolve_dry_sequence_breakers()
  int dry_range = 0;                              // 0 = whole context
  int dry_max_ngram = 100;                        // longest repeat measured (Aphrodite 0.6)
  int dry_max_occurrences = 0;                    // most recent occurrences searched; 0 = all
  int dry_early_exit_match_len = 0;               // stop searching at a repeat this long; 0 = never
  int no_repeat_ngram_size = 0;
  // --- chain order ---
  bool temperature_last = false;
  std::optional<std::vector<SamplerId>> sampler_priority;  // must list all 14 IDs once
  // --- token masks ---
  std::map<int32_t, float> logit_bias;
  std::vector<int32_t> custom_token_bans;
  std::optional<std::vector<int32_t>> allowed_token_ids;
  // At most kMaxBannedStrings phrases, kMaxBannedStringsBytes in all.
  std::vector<std::string> banned_strings;
  GuidedDecodingParams guided;  // structured output; the row then samples on the CPU
  // --- length and stopping ---
  int min_tokens = 0;
  bool ignore_eos = false;
  std::optional<int> max_tokens = 16;  // unset: up to the context length
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  // --- detokenization and prompt ---
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
  std::optional<int> truncate_prompt_tokens;
  // --context-shift: leading prompt tokens every shift keeps (-1: the whole prompt); unset: the chat
  // route's system prompt, else min(prompt, context / 4). llama.cpp's and KoboldCpp's n_keep.
  std::optional<int> n_keep;
  // --- beam search ---
  bool use_beam_search = false;
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::False;
  // --- logprobs ---
  std::optional<int> logprobs;
  std::optional<int> prompt_logprobs;

  int effective_best_of() const { return best_of.value_or(n); }
  bool is_greedy() const { return temperature == 0.0f && !use_beam_search; }
  // The features this request switches on: every table entry with a feature whose value is not
  // one of its off values (sampling_param_table). Greedy (temperature 0) counts as Temperature.
  SamplerSet active_samplers() const;
  bool dynatemp_enabled() const { return active_samplers().has(SamplerFeature::DynaTemp); }
  bool penalties_enabled() const { return active_samplers().has(SamplerFeature::Penalties); }
  // True when the chain stages of `active` run in the same relative order as in the default chain
  // (so a custom sampler_priority or temperature_last changes nothing for this request). Temperature
  // counts only when it changes the distribution (not 0 or 1).
  bool in_default_order(SamplerSet active) const;
  // The chain this request runs (sampler_priority, else the default order with temperature_last).
  std::vector<SamplerId> sampler_order() const;

  // Kobold / older Aphrodite `dynatemp_range`: min = max(0, temperature - range),
  // max = temperature + range; range 0 turns dynamic temperature off. Call after temperature is set.
  void apply_dynatemp_range(float range);

  // Throws cypris::Error naming the parameter and its allowed range for every out-of-range value.
  // vocab_size bounds token ids (logit_bias, bans, allowed ids, stop ids); max_log_probs bounds
  // logprobs and prompt_logprobs (the --max-log-probs engine option).
  void validate(int max_log_probs, int32_t vocab_size) const;

  // Turns dry_sequence_breakers into dry_sequence_breaker_ids: each string s becomes the last id of
  // encode("a" + s), as Aphrodite does, so a breaker is recognised as the token that ends it.
  // Empty strings are skipped.
  void resolve_dry_sequence_breakers(const std::function<std::vector<int32_t>(const std::string&)>& encode);
};

// Parses early_stopping as clients send it: "true"/"false"/"never" (any case), "1"/"0".
std::optional<EarlyStopping> parse_early_stopping(std::string_view s);
std::string_view early_stopping_name(EarlyStopping e);

// Parses a sampler_priority list given as names or as decimal ids ("5", "TEMPERATURE").
// Throws cypris::Error naming `sampler_priority` when an entry is unknown, a duplicate, or when not
// all 14 samplers are listed.
std::vector<SamplerId> parse_sampler_priority(std::span<const std::string> entries);
std::vector<SamplerId> parse_sampler_priority(std::span<const int> ids);

// ---------------------------------------------------------------------------------------------
// Parameter descriptors: one entry per parameter. Scalar parameters (Float, Int, Bool) carry their
// default, range and accessors, so parsers and sliders are generated from this table and validate()
// checks the same ranges. Other kinds (lists, maps, enums) carry name, default text and help; their
// parsing is specific to the front end.
enum class ParamKind { Float, Int, Bool, IntList, StringList, TokenBiasMap, SamplerOrder, EarlyStopping };

struct SamplingParamInfo {
  std::string_view name;
  ParamKind kind;
  std::string_view group;  // "Output", "Penalties", "Temperature", "Truncation", "DRY", ...
  double default_value;    // numeric default (Bool: 0/1); NaN = unset by default
  double min;              // allowed range; -inf / +inf when unbounded
  double max;
  bool min_exclusive;
  bool max_exclusive;
  bool optional;             // may be unset (seed, best_of, max_tokens, logprobs, ...)
  double ui_max;             // a sensible slider end for unbounded ranges
  std::string_view aliases;  // other request spellings, space separated ("dry_penalty_last_n")
  std::string_view help;
  // Scalar kinds only (null for the others). get returns nullopt when an optional value is unset;
  // set(nullopt) unsets it. set stores the value as is; validate() checks it.
  std::optional<double> (*get)(const SamplingParams&);
  void (*set)(SamplingParams&, std::optional<double>);
  // Switch parameters: the sampler feature the parameter turns on, and its off values: a scalar is
  // off when its value is in [off_min, off_max]; a list or map is off when empty / unset (is_set).
  std::optional<SamplerFeature> feature = std::nullopt;
  double off_min = 0.0;
  double off_max = 0.0;
  bool (*is_set)(const SamplingParams&) = nullptr;

  // "in (0, 1]", "≥ 0", ... as used in error messages and tooltips.
  std::string range_text() const;
};

std::span<const SamplingParamInfo> sampling_param_table();
// By name or alias; nullptr when unknown.
const SamplingParamInfo* find_sampling_param(std::string_view name);

}  // namespace cypris
