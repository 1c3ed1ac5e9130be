// `cypris bench latency`: batch-1 prefill and decode speed of one sequence (random prompt of
// --input-len tokens, then --output-len greedy decode steps), averaged over --num-iters runs.
// Works with --load-format dummy and a folder holding only config.json. By default it drives the
// model runner alone and also prints the weight bytes one decode step reads and how many per second
// that makes, to compare with the machine's copy bandwidth (a batch-1 decode is bound by it); with
// --through-engine or --speculative-model it runs a greedy request through the whole engine
// (scheduler, sampler, speculative decoding) and reports the drafts' acceptance and mean accepted
// length. --prompt-repeat N builds the prompt from one random block of N tokens repeated (a prompt
// whose answer repeats much of it, where prompt lookup pays).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include "app/cli/bench.h"
#include "app/cli/options_cli.h"
#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/core/engine_setup.h"
#include "engine/loader/gguf.h"
#include "engine/request/sampling_params.h"

namespace cypris::cli {
namespace {

const char* kUsage =
    "usage: cypris bench latency --model DIR [--input-len N] [--output-len N] [--batch-size 1]\n"
    "                            [--num-iters N] [--num-iters-warmup N] [--through-engine] [--prompt-repeat N]\n"
    "                            [--temperature T]\n"
    "                            [engine flags, e.g. --speculative-model \"[ngram]\" --num-speculative-tokens 5\n"
    "                             --ngram-prompt-lookup-max 4]";

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of all the process's threads: less sensitive than wall time to a busy machine.
double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Weight bytes one batch-1 decode step reads: every layer's weights once (of a MoE layer the
// experts a token uses), the LM head, not the embedding table (one row) unless it is the LM head.
// A GGUF file gives each tensor's bytes as stored (quantized types stay so in memory; float
// matrices take the runner's weight dtype); other models count parameters at the weight dtype.
double decode_weight_bytes(const std::filesystem::path& model, const ModelConfig& cfg, DType weight_dtype) {
  const double expert_share =
      cfg.num_experts > 0 ? static_cast<double>(cfg.num_experts_per_tok) / cfg.num_experts : 1.0;
  if (is_gguf_path(model)) {
    const GgufModel gguf(model);
    const bool tied = gguf.tensor("output.weight") == nullptr;
    double bytes = 0;
    for (const auto& [name, info] : gguf.tensors()) {
      const GgufTensorInfo& t = *info.first;
      if (name == "token_embd.weight" && !tied) continue;
      const bool float_matrix = t.ne.size() >= 2 && (t.type == GgmlType::F32 || t.type == GgmlType::F16 ||
                                                     t.type == GgmlType::BF16);
      double b = float_matrix ? static_cast<double>(t.numel()) * dtype_size(weight_dtype) : static_cast<double>(t.nbytes);
      if (name.find("_exps") != std::string::npos) b *= expert_share;
      bytes += b;
    }
    return bytes;
  }
  const ModelConfig::ParameterCount params = cfg.approx_parameters();
  const double lookup_only = cfg.tie_word_embeddings ? 0.0 : static_cast<double>(cfg.vocab_size) * cfg.hidden_size;
  return (params.active - lookup_only) * dtype_size(weight_dtype);
}

struct LatencyFlags {
  int64_t input_len = 32;
  int64_t output_len = 128;
  int64_t batch_size = 1;
  int64_t num_iters = 3;
  int64_t num_iters_warmup = 1;
  int64_t prompt_repeat = 0;
  bool through_engine = false;
  double temperature = 0.0;  // the engine path's request: 0 greedy, else seeded sampling
};

std::vector<OptionSpec> latency_specs(LatencyFlags& f) {
  auto spec = [](std::string name, int64_t* target, std::string help) {
    OptionSpec s = external_option("Benchmark Options", std::move(name), target, "N", std::move(help));
    s.min = 0;
    return s;
  };
  return {spec("input-len", &f.input_len, "Prompt tokens (random ids)."),
          spec("output-len", &f.output_len, "Greedy decode steps."),
          spec("batch-size", &f.batch_size, "Sequences per step (only 1 for now)."),
          spec("num-iters", &f.num_iters, "Timed runs."),
          spec("num-iters-warmup", &f.num_iters_warmup, "Untimed runs first."),
          spec("prompt-repeat", &f.prompt_repeat,
               "Build the prompt from one random block of N tokens, repeated (0: all random)."),
          external_option("Benchmark Options", "temperature", &f.temperature, "T",
                          "Through the engine: sample at this temperature (seeded per iteration from --seed) "
                          "instead of greedy decoding; a random-weight model then gives an output that never "
                          "repeats (prompt lookup finds nothing)."),
          external_option("Benchmark Options", "through-engine", &f.through_engine, "",
                          "Run a greedy request through the whole engine (implied by --speculative-model).")};
}

std::vector<int32_t> make_prompt(std::mt19937_64& rng, int64_t len, int64_t repeat, int64_t vocab) {
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(len));
  for (size_t i = 0; i < prompt.size(); ++i) {
    prompt[i] = repeat > 0 && int64_t(i) >= repeat ? prompt[i % size_t(repeat)] : tok(rng);
  }
  return prompt;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / v.size();
}

// The engine path: one greedy request of output_len tokens per iteration; the first step is the
// prefill, the rest decode (several tokens a step when drafts are accepted).
int bench_engine(const EngineConfig& ecfg, const LatencyFlags& f) {
  EngineConfig cfg = ecfg;
  cfg.logging.disable_log_requests = true;
  const double t_load = now_s();
  Engine engine(cfg);
  const double load_s = now_s() - t_load;
  const ModelInfo info = engine.model_info();
  CYPRIS_CHECK(f.input_len + f.output_len <= info.max_model_len,
               "--input-len + --output-len = {} exceeds the context length {} (--max-model-len)",
               f.input_len + f.output_len, info.max_model_len);
  std::mt19937_64 rng(static_cast<uint64_t>(ecfg.model.seed));
  std::vector<double> prefill_tps, decode_tps, decode_ms, decode_cpu_ms;
  const EngineStats before = engine.stats();
  for (int64_t it = 0; it < f.num_iters_warmup + f.num_iters; ++it) {
    GenerateRequest req;
    req.request_id = "bench-" + std::to_string(it);
    req.prompt_token_ids = make_prompt(rng, f.input_len, f.prompt_repeat, info.vocab_size);
    auto p = std::make_shared<SamplingParams>();
    p->temperature = static_cast<float>(f.temperature);
    if (f.temperature > 0.0) p->seed = static_cast<int>(ecfg.model.seed + it);
    p->max_tokens = static_cast<int>(f.output_len);
    p->ignore_eos = true;
    req.params = p;
    auto stream = std::make_shared<RequestStream>(req.request_id);
    engine.add_request(req, stream);
    const double t0 = now_s();
    engine.step();  // the prompt (one step: the default budget holds it)
    const double t1 = now_s();
    const double c1 = cpu_s();
    while (engine.has_unfinished_requests()) engine.step();
    const double t2 = now_s();
    const double c2 = cpu_s();
    int64_t tokens = 0;
    while (auto o = stream->next(std::chrono::milliseconds(0))) {
      CYPRIS_CHECK(!o->error, "bench latency: the request failed: {}", *o->error);
      for (const auto& d : o->outputs) tokens += static_cast<int64_t>(d.token_ids.size());
    }
    CYPRIS_CHECK(tokens == f.output_len, "bench latency: got {} tokens, wanted {}", tokens, f.output_len);
    if (it < f.num_iters_warmup) continue;
    const double n = static_cast<double>(f.output_len - 1);  // the first token came with the prefill
    prefill_tps.push_back(f.input_len / (t1 - t0));
    decode_tps.push_back(n / (t2 - t1));
    decode_ms.push_back(1000.0 * (t2 - t1) / n);
    decode_cpu_ms.push_back(1000.0 * (c2 - c1) / n);
  }
  const EngineStats s = engine.stats();
  std::printf("| setting | value |\n|---|---|\n");
  std::printf("| model | %s (through the engine) |\n", info.model.c_str());
  std::printf("| weights | %s |\n| device | %s |\n", info.dtype.c_str(), info.device.c_str());
  std::printf("| batch size | 1 |\n| input / output len | %lld / %lld |\n", static_cast<long long>(f.input_len),
              static_cast<long long>(f.output_len));
  const std::string prompt_kind = f.prompt_repeat > 0
                                      ? "a random block of " + std::to_string(f.prompt_repeat) + " tokens, repeated"
                                      : "random tokens";
  std::printf("| prompt | %s |\n", prompt_kind.c_str());
  if (f.temperature > 0.0) std::printf("| sampling | temperature %.2f, seeded |\n", f.temperature);
  if (s.spec_decode && cfg.spec.ngram_prompt_lookup_max) {
    std::printf("| speculative decoding | prompt lookup, %lld tokens, %lld..%lld-grams |\n",
                static_cast<long long>(*cfg.spec.num_speculative_tokens),
                static_cast<long long>(cfg.spec.ngram_prompt_lookup_min.value_or(1)),
                static_cast<long long>(*cfg.spec.ngram_prompt_lookup_max));
  } else if (s.spec_decode) {
    std::printf("| speculative decoding | draft model %s, up to %lld tokens (adaptive) |\n",
                cfg.spec.speculative_model->c_str(), static_cast<long long>(*cfg.spec.num_speculative_tokens));
  } else {
    std::printf("| speculative decoding | off |\n");
  }
  std::printf("| iterations (warmup) | %lld (%lld) |\n| load time | %.2f s |\n\n", static_cast<long long>(f.num_iters),
              static_cast<long long>(f.num_iters_warmup), load_s);
  std::printf("| metric | mean | median |\n|---|---|---|\n");
  std::printf("| prefill tokens/s | %.1f | %.1f |\n", mean_of(prefill_tps), median(prefill_tps));
  std::printf("| decode tokens/s (batch 1) | %.2f | %.2f |\n", mean_of(decode_tps), median(decode_tps));
  std::printf("| decode latency ms/token | %.2f | %.2f |\n", mean_of(decode_ms), median(decode_ms));
  std::printf("| decode CPU time ms/token (all threads) | %.2f | %.2f |\n", mean_of(decode_cpu_ms),
              median(decode_cpu_ms));
  if (s.spec_decode) {
    // All iterations, warmup included: acceptance does not depend on the machine's load.
    const int64_t drafts = s.spec_draft_tokens_total - before.spec_draft_tokens_total;
    const int64_t accepted = s.spec_accepted_tokens_total - before.spec_accepted_tokens_total;
    const int64_t emitted = s.spec_emitted_tokens_total - before.spec_emitted_tokens_total;
    const int64_t steps = (s.spec_max_emitted_tokens_total - before.spec_max_emitted_tokens_total) - drafts;
    std::printf("\n| speculation (all iterations) | value |\n|---|---|\n");
    std::printf("| drafted tokens | %lld |\n| accepted tokens | %lld |\n", static_cast<long long>(drafts),
                static_cast<long long>(accepted));
    std::printf("| acceptance rate | %.1f%% |\n", drafts ? 100.0 * double(accepted) / double(drafts) : 0.0);
    std::printf("| verification steps | %lld |\n", static_cast<long long>(steps));
    std::printf("| mean accepted length (tokens per verification step) | %.2f |\n",
                steps ? double(emitted) / double(steps) : 0.0);
  }
  return 0;
}

int bench(const Args& args) {
  LatencyFlags f;
  const auto specs = latency_specs(f);
  int code = 0;
  auto ctx = parse_cli(args, kUsage, code, specs);
  if (!ctx) return code;
  const int64_t input_len = f.input_len, output_len = f.output_len, batch_size = f.batch_size;
  const int64_t iters = f.num_iters, warmup = f.num_iters_warmup;
  const EngineConfig& ecfg = ctx->cfg;
  CYPRIS_CHECK(input_len >= 1 && output_len >= 1, "--input-len and --output-len must be >= 1");
  CYPRIS_CHECK(iters >= 1 && warmup >= 0, "--num-iters must be >= 1 and --num-iters-warmup >= 0");
  CYPRIS_CHECK(batch_size == 1, "--batch-size {}: only batch size 1 is supported yet", batch_size);
  CYPRIS_CHECK(f.prompt_repeat <= input_len, "--prompt-repeat {} is longer than --input-len {}", f.prompt_repeat,
               input_len);
  if (f.through_engine || ecfg.spec.speculative_model || f.temperature > 0.0) return bench_engine(ecfg, f);

  ModelRunnerOptions opt = runner_options(ecfg, resolve_model_path(ecfg.model));
  opt.num_blocks = (input_len + output_len + opt.block_size - 1) / opt.block_size;
  const double t_load = now_s();
  ModelRunner runner(opt);
  const double load_s = now_s() - t_load;
  const ModelConfig& cfg = runner.config();
  CYPRIS_CHECK(input_len + output_len <= cfg.max_model_len,
               "--input-len + --output-len = {} exceeds the context length {} (--max-model-len)",
               input_len + output_len, cfg.max_model_len);

  std::mt19937_64 rng(static_cast<uint64_t>(ecfg.model.seed));
  std::vector<double> prefill_tps, decode_tps, decode_ms, decode_cpu_ms;
  for (int64_t it = 0; it < warmup + iters; ++it) {
    const std::vector<int32_t> prompt = make_prompt(rng, input_len, f.prompt_repeat, cfg.vocab_size);
    const double t0 = now_s();
    Logits l = runner.execute(make_single_sequence_batch(prompt, 0, runner.block_size()));
    const double t1 = now_s();
    const double c1 = cpu_s();
    int32_t pos = static_cast<int32_t>(input_len);
    for (int64_t s = 0; s < output_len; ++s, ++pos) {
      const int32_t next[] = {static_cast<int32_t>(std::max_element(l.row(0), l.row(0) + l.vocab) - l.row(0))};
      l = runner.execute(make_single_sequence_batch(next, pos, runner.block_size()));
    }
    const double t2 = now_s();
    const double c2 = cpu_s();
    if (it < warmup) continue;
    prefill_tps.push_back(input_len / (t1 - t0));
    decode_tps.push_back(output_len / (t2 - t1));
    decode_ms.push_back(1000.0 * (t2 - t1) / output_len);
    decode_cpu_ms.push_back(1000.0 * (c2 - c1) / output_len);
  }
  const ModelConfig::ParameterCount params = cfg.approx_parameters();
  const double weight_bytes = decode_weight_bytes(opt.model_dir, cfg, runner.weight_dtype());
  std::vector<double> weight_gbps;
  for (double tps : decode_tps) weight_gbps.push_back(weight_bytes * tps / 1e9);
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / v.size();
  };
  std::printf("| setting | value |\n|---|---|\n");
  std::printf("| model | %s (%s, %.1fM parameters", opt.model_dir.string().c_str(), cfg.architectures[0].c_str(),
              params.total / 1e6);
  if (params.active < params.total) std::printf(", %.1fM active per token", params.active / 1e6);
  std::printf(") |\n");
  std::printf("| weights | %s, %s |\n", std::string(dtype_name(runner.weight_dtype())).c_str(),
              opt.load.load_format.c_str());
  std::printf("| weights read per decode step | %.1f MB |\n", weight_bytes / 1e6);
  std::printf("| threads | %d |\n| batch size | 1 |\n| input / output len | %lld / %lld |\n", opt.threads,
              static_cast<long long>(input_len), static_cast<long long>(output_len));
  std::printf("| iterations (warmup) | %lld (%lld) |\n| load time | %.2f s |\n\n", static_cast<long long>(iters),
              static_cast<long long>(warmup), load_s);
  std::printf("| metric | mean | median |\n|---|---|---|\n");
  std::printf("| prefill tokens/s | %.1f | %.1f |\n", mean(prefill_tps), median(prefill_tps));
  std::printf("| decode tokens/s (batch 1) | %.2f | %.2f |\n", mean(decode_tps), median(decode_tps));
  std::printf("| decode latency ms/token | %.2f | %.2f |\n", mean(decode_ms), median(decode_ms));
  std::printf("| decode weight bytes read GB/s | %.2f | %.2f |\n", mean(weight_gbps), median(weight_gbps));
  std::printf("| decode CPU time ms/token (all threads) | %.2f | %.2f |\n", mean(decode_cpu_ms), median(decode_cpu_ms));
  return 0;
}

}  // namespace

int run_bench_latency(const Args& args) {
  return run_guarded("bench latency", bench, args);
}

}  // namespace cypris::cli
