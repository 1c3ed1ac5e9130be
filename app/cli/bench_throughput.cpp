// `cypris bench throughput`: offline throughput like vLLM's benchmark_throughput. N requests of
// --input-len random prompt tokens (or prompts from --dataset) and --output-len output tokens are
// all queued at once; the engine runs until every one is done.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "app/cli/bench.h"
#include "app/cli/options_cli.h"
#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris::cli {
namespace {

struct ThroughputFlags {
  int64_t num_prompts = 100;
  int64_t input_len = 128;
  int64_t output_len = 128;
  std::optional<std::string> dataset;
};

std::vector<OptionSpec> throughput_specs(ThroughputFlags& f) {
  auto spec = [](std::string name, auto* target, std::string metavar, std::string help) {
    return external_option("Benchmark Options", std::move(name), target, std::move(metavar), std::move(help));
  };
  std::vector<OptionSpec> v = {
      spec("num-prompts", &f.num_prompts, "N", "Requests to run."),
      spec("input-len", &f.input_len, "N", "Prompt tokens per request (random ids)."),
      spec("output-len", &f.output_len, "N", "Output tokens per request."),
      spec("dataset", &f.dataset, "FILE",
           "Prompts to use instead of random ids: one per line (plain text, or JSON lines with a \"prompt\" field).")};
  for (int i = 0; i < 3; ++i) v[static_cast<size_t>(i)].min = 1;
  return v;
}

std::vector<std::string> read_dataset(const std::string& path) {
  std::ifstream in(path);
  CYPRIS_CHECK(in.good(), "--dataset: cannot read '{}'", path);
  std::vector<std::string> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    if (line.front() == '{') {
      auto j = nlohmann::json::parse(line, nullptr, false);
      CYPRIS_CHECK(!j.is_discarded() && j.contains("prompt") && j["prompt"].is_string(),
                   "--dataset {}: line {} is not a JSON object with a string \"prompt\"", path, n);
      prompts.push_back(j["prompt"].get<std::string>());
    } else {
      prompts.push_back(line);
    }
  }
  CYPRIS_CHECK(!prompts.empty(), "--dataset {}: no prompts", path);
  return prompts;
}

int bench(const Args& args) {
  ThroughputFlags f;
  const auto specs = throughput_specs(f);
  int code = 0;
  auto ctx = parse_cli(args,
                       "usage: cypris bench throughput --model MODEL [--num-prompts N] [--input-len N] "
                       "[--output-len N] [--dataset FILE] [engine flags]",
                       code, specs);
  if (!ctx) return code;
  // Random-id prompts need no tokenizer: a folder with only config.json (dummy weights) works.
  if (!f.dataset) ctx->cfg.model.skip_tokenizer_init = true;
  Engine engine(ctx->cfg);
  const int64_t vocab = engine.model_info().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  if (f.dataset) {
    CYPRIS_CHECK(engine.tokenizer(), "--dataset needs the model's tokenizer");
    const auto texts = read_dataset(*f.dataset);
    for (int64_t i = 0; i < f.num_prompts; ++i) {
      prompts.push_back(engine.tokenizer()->encode(texts[static_cast<size_t>(i) % texts.size()], true));
    }
  } else {
    std::mt19937_64 rng(static_cast<uint64_t>(ctx->cfg.model.seed));
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
    for (int64_t i = 0; i < f.num_prompts; ++i) {
      std::vector<int32_t> p(static_cast<size_t>(f.input_len));
      for (auto& t : p) t = tok(rng);
      prompts.push_back(std::move(p));
    }
  }
  auto params = std::make_shared<SamplingParams>();
  params->temperature = 1.0f;
  params->top_p = 1.0f;
  params->ignore_eos = true;
  params->max_tokens = static_cast<int>(f.output_len);
  params->seed = static_cast<uint64_t>(ctx->cfg.model.seed);

  int64_t prompt_tokens = 0, output_tokens = 0;
  std::vector<std::shared_ptr<RequestStream>> streams;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto s = std::make_shared<RequestStream>(std::to_string(i));
    prompt_tokens += static_cast<int64_t>(prompts[i].size());
    engine.add_request(GenerateRequest{std::to_string(i), prompts[i], "", params, 0}, s);
    streams.push_back(std::move(s));
  }
  std::vector<std::shared_ptr<RequestStream>> live = streams;  // the unfinished ones
  while (engine.has_unfinished_requests()) {
    engine.step();
    for (size_t i = 0; i < live.size();) {
      bool done = false;
      while (auto o = live[i]->next(std::chrono::milliseconds(0))) {
        CYPRIS_CHECK(!o->error, "request {} failed: {}", o->request_id, o->error.value_or(""));
        for (const auto& d : o->outputs) output_tokens += static_cast<int64_t>(d.token_ids.size());
        done = done || o->finished;
      }
      if (done) {
        live[i] = std::move(live.back());
        live.pop_back();
      } else {
        ++i;
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto stats = engine.stats();
  std::printf("| setting | value |\n|---|---|\n");
  std::printf("| model | %s (%s) |\n", ctx->cfg.model.model.c_str(), engine.model_info().dtype.c_str());
  std::printf("| requests | %lld (%s) |\n", static_cast<long long>(prompts.size()),
              f.dataset ? f.dataset->c_str() : "random prompts");
  std::printf("| input / output len | %lld / %lld |\n", static_cast<long long>(f.input_len),
              static_cast<long long>(f.output_len));
  std::printf("| KV blocks | %lld |\n| preemptions | %lld |\n\n", static_cast<long long>(engine.num_kv_blocks()),
              static_cast<long long>(stats.num_preemptions_total));
  std::printf("| metric | value |\n|---|---|\n");
  std::printf("| elapsed | %.2f s |\n", secs);
  std::printf("| requests/s | %.2f |\n", static_cast<double>(prompts.size()) / secs);
  std::printf("| prompt tokens/s | %.1f |\n", static_cast<double>(prompt_tokens) / secs);
  std::printf("| output tokens/s | %.1f |\n", static_cast<double>(output_tokens) / secs);
  std::printf("| total tokens/s | %.1f |\n", static_cast<double>(prompt_tokens + output_tokens) / secs);
  // Where the engine's steps spent the time (GPU work shows under sampling unless
  // CYPRIS_STEP_PROFILE_SYNC=1 makes the execute phase wait for it).
  const StepProfile& sp = engine.step_profile();
  const double in_steps = sp.schedule + sp.plan + sp.execute + sp.sample + sp.update;
  std::printf("\n| step phase | seconds | ms per step |\n|---|---|---|\n");
  const auto row = [&](const char* name, double s) {
    std::printf("| %s | %.2f | %.3f |\n", name, s, sp.steps ? 1000.0 * s / static_cast<double>(sp.steps) : 0.0);
  };
  row("schedule", sp.schedule);
  row("plan (block moves, row plan)", sp.plan);
  row("execute (forward launched)", sp.execute);
  row("sample (waits for the GPU)", sp.sample);
  row("update and outputs", sp.update);
  row("outside steps (client loop)", secs - in_steps);
  std::printf("| steps | %lld (%lld decode-only) | |\n", static_cast<long long>(sp.steps),
              static_cast<long long>(sp.decode_steps));
  if (!sp.stages.empty()) {
    // How busy each pipeline stage kept its device while the forward passes ran.
    std::printf("\n| pipeline stage | busy seconds | utilisation |\n|---|---|---|\n");
    for (size_t s = 0; s < sp.stages.size(); ++s) {
      std::printf("| %zu: %s | %.2f | %.0f%% |\n", s, sp.stages[s].first.c_str(), sp.stages[s].second,
                  sp.pipeline > 0 ? 100.0 * sp.stages[s].second / sp.pipeline : 0.0);
    }
    std::printf("| forward passes (wall) | %.2f | |\n", sp.pipeline);
  }
  return 0;
}

}  // namespace

int run_bench_throughput(const Args& args) { return run_guarded("bench throughput", bench, args); }

}  // namespace cypris::cli
