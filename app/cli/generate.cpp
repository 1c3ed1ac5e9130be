// `cypris generate`: load a model, run one prompt through the engine, stream the continuation to
// stdout. Every engine flag and the common sampler flags apply. Without a tokenizer
// (--skip-tokenizer-init or none in the folder), --prompt-ids takes token ids and ids are printed.
#include <chrono>
#include <cstdio>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/options_cli.h"
#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "engine/runtime/debug_dump.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris::cli {
namespace {

struct GenerateFlags {
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_ids;
  int64_t max_tokens = 64;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = -1;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  bool ignore_eos = false;
  int64_t beam_width = 0;
  std::vector<std::string> banned_strings;
  std::optional<std::string> debug_dump;
};

std::vector<OptionSpec> generate_specs(GenerateFlags& f) {
  auto spec = [](std::string name, auto* target, std::string metavar, std::string help) {
    return external_option("Generate Options", std::move(name), target, std::move(metavar), std::move(help));
  };
  std::vector<OptionSpec> v;
  v.push_back(spec("prompt", &f.prompt, "TEXT", "The prompt text (encoded with the model's tokenizer)."));
  v.push_back(spec("prompt-ids", &f.prompt_ids, "IDS", "The prompt as token ids: 1,2,3."));
  v.push_back(spec("max-tokens", &f.max_tokens, "N", "Tokens to generate at most."));
  v.back().min = 1;
  v.push_back(spec("temperature", &f.temperature, "T", "Sampling temperature; 0 is greedy."));
  v.back().min = 0;
  v.push_back(spec("top-p", &f.top_p, "P", "Nucleus sampling."));
  v.push_back(spec("top-k", &f.top_k, "K", "Keep the K most likely tokens (-1: all)."));
  v.push_back(spec("min-p", &f.min_p, "P", "Minimum probability relative to the top token."));
  v.push_back(spec("repetition-penalty", &f.repetition_penalty, "R", "Repetition penalty (1: off)."));
  v.push_back(spec("ignore-eos", &f.ignore_eos, "", "Keep generating after the end-of-text token."));
  v.push_back(spec("beam-width", &f.beam_width, "N", "Beam search with N beams; prints the best (0: sample)."));
  v.back().min = 0;
  v.push_back(spec("banned-strings", &f.banned_strings, "PHRASE [PHRASE ...]",
                   "Phrases that must not appear: generation rewinds and tries another token."));
  v.push_back(spec("debug-dump", &f.debug_dump, "DIR",
                   "Write every named intermediate of each forward pass as DIR/f<step>.<name>.npy."));
  return v;
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    CYPRIS_CHECK(*end == '\0' && v >= 0 && v <= INT32_MAX, "--prompt-ids: '{}' is not a token id", part);
    ids.push_back(static_cast<int32_t>(v));
  }
  CYPRIS_CHECK(!ids.empty(), "--prompt-ids: give at least one id, e.g. --prompt-ids 1,2,3");
  return ids;
}

int generate(const Args& args) {
  GenerateFlags f;
  const auto specs = generate_specs(f);
  int code = 0;
  auto ctx = parse_cli(args,
                       "usage: cypris generate --model MODEL (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N] "
                       "[--temperature T] [options]",
                       code, specs);
  if (!ctx) return code;
  CYPRIS_CHECK(f.prompt || f.prompt_ids, "generate: give --prompt TEXT or --prompt-ids 1,2,3");
  CYPRIS_CHECK(!(f.prompt && f.prompt_ids), "generate: give either --prompt or --prompt-ids, not both");
  EngineConfig& cfg = ctx->cfg;
  if (!cfg.cache.num_gpu_blocks_override && !ctx->parsed.explicit_keys.count("cpu_kvcache_space")) {
    cfg.cache.cpu_kvcache_space = 0.25;  // one sequence needs little; keep start-up light
  }
  if (f.prompt_ids && !ctx->parsed.explicit_keys.count("skip_tokenizer_init")) {
    // Ids in, ids out, unless the folder has a tokenizer to print text with.
    cfg.model.skip_tokenizer_init = false;
  }
  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(cfg);
  } catch (const Error& e) {
    // A model folder without tokenizer files still runs on ids.
    if (f.prompt || cfg.model.skip_tokenizer_init || std::string(e.what()).find("tokenizer") == std::string::npos) {
      throw;
    }
    LOG_WARN("no tokenizer ({}); printing token ids", e.what());
    cfg.model.skip_tokenizer_init = true;
    engine = std::make_unique<Engine>(cfg);
  }
  if (f.debug_dump) engine->set_debug_hook(make_npy_dump_hook(*f.debug_dump));
  const Tokenizer* tok = engine->tokenizer();
  CYPRIS_CHECK(tok || !f.prompt, "generate: --prompt needs a tokenizer; use --prompt-ids");
  std::vector<int32_t> ids = f.prompt ? tok->encode(*f.prompt, true) : parse_ids(*f.prompt_ids);
  CYPRIS_CHECK(!ids.empty(), "generate: the prompt encodes to no tokens");

  auto params = std::make_shared<SamplingParams>();
  params->max_tokens = static_cast<int>(std::min<int64_t>(
      f.max_tokens, engine->model_info().max_model_len - static_cast<int64_t>(ids.size())));
  params->temperature = static_cast<float>(f.temperature);
  params->top_p = static_cast<float>(f.top_p);
  params->top_k = static_cast<int>(f.top_k);
  params->min_p = static_cast<float>(f.min_p);
  params->repetition_penalty = static_cast<float>(f.repetition_penalty);
  params->ignore_eos = f.ignore_eos;
  params->banned_strings = f.banned_strings;
  if (f.beam_width > 0) {
    params->use_beam_search = true;
    params->best_of = static_cast<int>(f.beam_width);
  }
  params->seed = static_cast<uint64_t>(cfg.model.seed);
  auto stream = std::make_shared<RequestStream>("generate");
  const auto t0 = std::chrono::steady_clock::now();
  engine->add_request(GenerateRequest{"generate", ids, f.prompt.value_or(""), params, 0}, stream);
  std::optional<std::chrono::steady_clock::time_point> t_first;
  int64_t generated = 0;
  bool first_id = true;
  while (engine->has_unfinished_requests() || !stream->done()) {
    if (engine->has_unfinished_requests()) engine->step();
    while (auto o = stream->next(std::chrono::milliseconds(0))) {
      CYPRIS_CHECK(!o->error, "generate: {}", o->error.value_or(""));
      for (const auto& d : o->outputs) {
        if (!t_first && !d.token_ids.empty()) t_first = std::chrono::steady_clock::now();
        generated += static_cast<int64_t>(d.token_ids.size());
        if (tok) {
          std::fputs(d.text.c_str(), stdout);
        } else {
          for (int32_t id : d.token_ids) {
            std::printf("%s%d", first_id ? "" : ",", id);
            first_id = false;
          }
        }
      }
      std::fflush(stdout);
    }
  }
  std::printf("\n");
  const auto t1 = std::chrono::steady_clock::now();
  const double prefill_s = std::chrono::duration<double>(t_first.value_or(t1) - t0).count();
  const double decode_s = std::chrono::duration<double>(t1 - t_first.value_or(t1)).count();
  LOG_INFO("prompt {} tokens in {:.3f} s ({:.1f} tok/s); generated {} tokens, {:.1f} tok/s after the first",
           ids.size(), prefill_s, ids.size() / std::max(prefill_s, 1e-9), generated,
           (generated > 1 ? generated - 1 : 0) / std::max(decode_s, 1e-9));
  return 0;
}

}  // namespace

int run_generate(const Args& args) { return run_guarded("generate", generate, args); }

}  // namespace cypris::cli
