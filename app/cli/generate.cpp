// `cypris generate`: load a local model, run a prompt, print the continuation. Plain greedy or
// temperature sampling with a seed (the full sampler lives in engine/sampling). Without a
// tokenizer, --prompt-ids takes token ids and the output is ids.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/engine_args.h"
#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/runtime/debug_dump.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris::cli {
namespace {

const char* kUsage =
    "usage: cypris generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]\n"
    "                       [--temperature T] [--seed S] [--ignore-eos] [--debug-dump DIR] [engine flags]\n"
    "  --debug-dump DIR: write every named intermediate of each forward pass as DIR/f<step>.<name>.npy\n";

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    const int64_t v = parse_int_flag("--prompt-ids", part);
    CYPRIS_CHECK(v >= 0 && v <= INT32_MAX, "--prompt-ids: {} is not a token id", v);
    ids.push_back(static_cast<int32_t>(v));
  }
  CYPRIS_CHECK(!ids.empty(), "--prompt-ids: give at least one id, e.g. --prompt-ids 1,2,3");
  return ids;
}

int32_t sample(const float* logits, int64_t vocab, double temperature, std::mt19937_64& rng) {
  if (temperature < 1e-5) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  const float mx = *std::max_element(logits, logits + vocab);
  std::vector<double> p(vocab);
  for (int64_t i = 0; i < vocab; ++i) p[i] = std::exp((logits[i] - mx) / temperature);
  std::discrete_distribution<int32_t> dist(p.begin(), p.end());
  return dist(rng);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int generate(const Args& args) {
  EngineArgs engine;
  const Args rest = engine.parse(args);
  std::optional<std::string> prompt, prompt_ids;
  int64_t max_tokens = 64;
  double temperature = 1.0;
  bool ignore_eos = false;
  std::string dump_dir;
  for (size_t i = 0; i < rest.size(); ++i) {
    std::string v;
    if (rest[i] == "-h" || rest[i] == "--help") {
      std::printf("%s%s", kUsage, EngineArgs::help());
      return 0;
    } else if (take_flag(rest, i, "--prompt", v)) {
      prompt = v;
    } else if (take_flag(rest, i, "--prompt-ids", v)) {
      prompt_ids = v;
    } else if (take_flag(rest, i, "--max-tokens", v)) {
      max_tokens = parse_int_flag("--max-tokens", v);
      CYPRIS_CHECK(max_tokens >= 0, "--max-tokens must be >= 0, got {}", max_tokens);
    } else if (take_flag(rest, i, "--temperature", v)) {
      temperature = parse_double_flag("--temperature", v);
      CYPRIS_CHECK(temperature >= 0, "--temperature must be >= 0, got {}", temperature);
    } else if (take_flag(rest, i, "--debug-dump", v)) {
      dump_dir = v;
    } else if (rest[i] == "--ignore-eos") {
      ignore_eos = true;
    } else {
      CYPRIS_FAIL("generate: unknown argument '{}'\n{}", rest[i], kUsage);
    }
  }
  CYPRIS_CHECK(prompt || prompt_ids, "generate: give --prompt TEXT or --prompt-ids 1,2,3\n{}", kUsage);
  CYPRIS_CHECK(!(prompt && prompt_ids), "generate: give either --prompt or --prompt-ids, not both");

  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_tokenizer(engine.model);
  } catch (const std::exception& e) {
    if (prompt) CYPRIS_FAIL("generate: no tokenizer available ({}); use --prompt-ids", e.what());
    LOG_WARN("no tokenizer ({}): printing token ids", e.what());
  }

  std::vector<int32_t> ids = prompt ? tokenizer->encode(*prompt, true) : parse_ids(*prompt_ids);
  CYPRIS_CHECK(!ids.empty(), "generate: the prompt encodes to no tokens");
  ModelRunnerOptions opt = engine.runner_options();
  // One sequence: the cache needs only prompt + max_tokens slots, not the whole --max-model-len.
  opt.num_blocks = (static_cast<int64_t>(ids.size()) + max_tokens + opt.block_size - 1) / opt.block_size;
  ModelRunner runner(opt);
  if (!dump_dir.empty()) runner.set_debug_hook(make_npy_dump_hook(dump_dir));
  const ModelConfig& cfg = runner.config();
  CYPRIS_CHECK(static_cast<int64_t>(ids.size()) < cfg.max_model_len,
               "generate: the prompt has {} tokens; the context (--max-model-len) is {}", ids.size(),
               cfg.max_model_len);
  const size_t prompt_len = ids.size();
  const int64_t budget = std::min<int64_t>(max_tokens, cfg.max_model_len - static_cast<int64_t>(prompt_len));
  std::mt19937_64 rng(engine.seed);

  auto t0 = std::chrono::steady_clock::now();
  Logits logits = runner.execute(make_single_sequence_batch(ids, 0, runner.block_size()));
  const double prefill_s = seconds_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  std::string printed;
  for (int64_t step = 0; step < budget; ++step) {
    const int32_t next = sample(logits.row(0), logits.vocab, temperature, rng);
    ids.push_back(next);
    const bool eos = std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), next) != cfg.eos_token_ids.end();
    if (tokenizer) {
      // Decode everything generated so far and print what is new (handles multi-token characters).
      const std::string text = tokenizer->decode(std::span<const int32_t>(ids).subspan(prompt_len), true);
      if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
        std::fputs(text.c_str() + printed.size(), stdout);
        printed = text;
      }
    } else {
      std::printf("%s%d", step == 0 ? "" : ",", next);
    }
    std::fflush(stdout);
    if (eos && !ignore_eos) break;
    if (step + 1 < budget) {
      const int32_t tok[] = {next};
      logits =
          runner.execute(make_single_sequence_batch(tok, static_cast<int32_t>(ids.size()) - 1, runner.block_size()));
    }
  }
  std::printf("\n");
  const double decode_s = seconds_since(t1);
  const size_t generated = ids.size() - prompt_len;
  LOG_INFO("prompt {} tokens in {:.3f} s ({:.1f} tok/s); generated {} tokens in {:.3f} s ({:.1f} tok/s)", prompt_len,
           prefill_s, prompt_len / std::max(prefill_s, 1e-9), generated, decode_s,
           generated / std::max(decode_s, 1e-9));
  return 0;
}

}  // namespace

int run_generate(const Args& args) {
  try {
    return generate(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cypris generate: %s\n", e.what());
    return 1;
  }
}

}  // namespace cypris::cli
