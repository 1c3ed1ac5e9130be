#include "app/server/kobold/kobold_mapping.h"

#include <fmt/format.h>

#include <algorithm>

#include "app/server/errors.h"
#include "app/server/route_util.h"
#include "app/server/openai/sampling_from_json.h"

namespace cypris::server {

using nlohmann::json;

KoboldRequest kobold_request_from_json(const json& body, int64_t default_max_length, int64_t default_context) {
  KoboldRequest r;
  auto p = body.find("prompt");
  if (p == body.end() || !p->is_string()) throw HttpError(400, "'prompt' must be a string", "prompt");
  r.prompt = p->get<std::string>();
  if (auto g = body.find("genkey"); g != body.end() && !g->is_null()) {
    if (!g->is_string()) throw HttpError(400, "'genkey' must be a string", "genkey");
    if (!g->get<std::string>().empty()) r.genkey = g->get<std::string>();
  }
  r.max_length = get_int(body, "max_length", default_max_length);
  r.max_context_length = get_int(body, "max_context_length", default_context);
  // Both become int token counts: anything past INT32_MAX would wrap (2^32+1 -> 1 token).
  if (r.max_length < 1 || r.max_length > INT32_MAX) {
    throw HttpError(400, fmt::format("'max_length' must be in [1, {}], got {}", INT32_MAX, r.max_length), "max_length");
  }
  if (r.max_context_length > INT32_MAX) {
    throw HttpError(400, fmt::format("'max_context_length' must be at most {}, got {}", INT32_MAX, r.max_context_length),
                    "max_context_length");
  }
  if (r.max_context_length < 1) {
    throw HttpError(400, fmt::format("'max_context_length' must be >= 1, got {}", r.max_context_length),
                    "max_context_length");
  }
  if (r.max_length > r.max_context_length) {
    throw HttpError(400,
                    fmt::format("'max_length' ({}) must not be larger than 'max_context_length' ({})", r.max_length,
                                r.max_context_length),
                    "max_length");
  }
  r.use_default_badwordsids = get_bool(body, "use_default_badwordsids", false);

  // The generic parser knows the Kobold spellings as aliases (rep_pen, typical, eps_cutoff,
  // stop_sequence, max_length, mirostat) and ignores sampler_order unless it is a full order.
  SamplingParams& s = r.params;
  s = sampling_from_json(body, SamplingDefaults{static_cast<int>(r.max_length), 1.0f});
  s.max_tokens = static_cast<int>(r.max_length);
  // KoboldCpp's "grammar" (GBNF); the OpenAI-side guided_* fields work here too.
  s.guided = guided_fields_from_json(body, &r.guided_field);
  r.grammar_retain_state = get_bool(body, "grammar_retain_state", false);
  if (auto it = body.find("sampler_seed"); it != body.end() && !it->is_null()) {
    const int64_t seed = get_int(body, "sampler_seed", -1);
    if (seed >= 0) s.seed = static_cast<uint64_t>(seed);
  }
  s.tfs = std::max(1e-5f, s.tfs);  // dynatemp_range: read by sampling_from_json, as on the OpenAI routes
  if (s.temperature < 1e-5f) {  // greedy
    s.temperature = 0.0f;
    s.n = 1;
    s.best_of.reset();
    s.top_p = 1.0f;
    s.top_k = -1;
  }
  return r;
}

std::vector<int32_t> truncate_kobold_prompt(const std::vector<int32_t>& ids, int64_t max_context_length,
                                            int64_t max_length, int64_t model_max_len) {
  int64_t ctx = max_context_length;
  if (model_max_len > 0) ctx = std::min(ctx, model_max_len);
  const int64_t keep = std::max<int64_t>(1, ctx - max_length);
  if (static_cast<int64_t>(ids.size()) <= keep) return ids;
  return std::vector<int32_t>(ids.end() - keep, ids.end());
}

std::vector<int32_t> kobold_bad_words_ids(const Tokenizer& tok) {
  std::vector<int32_t> out;
  const auto pad = tok.pad_id();
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (pad && id == *pad) continue;
    const std::string piece = tok.id_to_piece(id);
    if (piece.find('[') != std::string::npos || piece.find(']') != std::string::npos) out.push_back(id);
  }
  if (auto eos = tok.eos_id()) {
    if (std::find(out.begin(), out.end(), *eos) == out.end()) out.push_back(*eos);
  }
  return out;
}

}  // namespace cypris::server
