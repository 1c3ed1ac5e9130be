// --kv-cache-dtype on the real stories260k model: the 16-bit caches (float16, the CPU's default, and
// bfloat16) and the fp8 caches give logits close to the fp32 cache's — also split over tensor-parallel
// ranks and pipeline stages — 2x / 4x the blocks in the same --cpu-kvcache-space, swap, block copies
// and prefix caching move their elements intact, and the --quantization-param-path scales are
// applied or rejected clearly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "engine/runtime/kv_cache_scales.h"
#include "engine/runtime/model_runner.h"
#include "tests/support/engine_jobs.h"

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kDir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";

ModelRunnerOptions runner_opts(DType kv, const std::string& param_path = "") {
  ModelRunnerOptions o;
  o.model_dir = kDir;
  o.load.dtype = "float32";
  o.threads = 2;
  o.block_size = 4;  // several blocks per sequence
  o.kv_cache_dtype = kv;
  o.quantization_param_path = param_path;
  return o;
}

// The logits of every step of a greedy run of `steps` tokens from a fixed prompt (prefill, then
// one decode per token); the tokens fed are `forced` when given (so two caches see the same inputs).
std::vector<Logits> run_steps(ModelRunner& r, int steps, std::vector<int32_t>* tokens,
                              const std::vector<int32_t>* forced = nullptr) {
  std::vector<int32_t> ids = {1, 403, 407, 261, 378, 324, 384, 308};  // BOS + a few story tokens
  std::vector<Logits> out;
  out.push_back(r.execute(make_single_sequence_batch(ids, 0, r.block_size())));
  for (int i = 0; i < steps; ++i) {
    const Logits& l = out.back();
    const int32_t next =
        forced ? (*forced)[i] : static_cast<int32_t>(std::max_element(l.row(0), l.row(0) + l.vocab) - l.row(0));
    tokens->push_back(next);
    ids.push_back(next);
    const int32_t tok[] = {next};
    out.push_back(r.execute(make_single_sequence_batch(tok, static_cast<int32_t>(ids.size()) - 1, r.block_size())));
  }
  return out;
}

// max |a - b| / max |b| over a row.
double norm_err(const Logits& a, const Logits& b) {
  double diff = 0, mag = 1e-30;
  for (int64_t i = 0; i < b.vocab; ++i) {
    diff = std::max(diff, std::abs(double(a.row(0)[i]) - b.row(0)[i]));
    mag = std::max(mag, std::abs(double(b.row(0)[i])));
  }
  return diff / mag;
}

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<Logits> logits;
};

const Reference& fp32_reference() {
  static const Reference ref = [] {
    Reference r;
    ModelRunner runner(runner_opts(DType::F32));
    r.logits = run_steps(runner, 20, &r.tokens);
    return r;
  }();
  return ref;
}

// How far a run's logits are from the fp32 cache's, step by step (same inputs).
struct Agreement {
  double mean_err = 0, worst_err = 0;
  int top1 = 0;        // steps whose argmax is the fp32 argmax
  int worst_rank = 0;  // the worst fp32 rank of the run's argmax (0 = the fp32 argmax)
};

Agreement compare(const std::vector<Logits>& got, const Reference& ref) {
  Agreement a;
  for (size_t s = 0; s < got.size(); ++s) {
    const double e = norm_err(got[s], ref.logits[s]);
    a.mean_err += e / static_cast<double>(got.size());
    a.worst_err = std::max(a.worst_err, e);
    const float* g = got[s].row(0);
    const float* r = ref.logits[s].row(0);
    const int64_t am = std::max_element(g, g + got[s].vocab) - g;
    const int rank = static_cast<int>(std::count_if(r, r + got[s].vocab, [&](float x) { return x > r[am]; }));
    a.top1 += rank == 0;
    a.worst_rank = std::max(a.worst_rank, rank);
  }
  return a;
}

Agreement fp8_agreement(DType dt, const std::string& param_path = "") {
  const Reference& ref = fp32_reference();
  ModelRunner runner(runner_opts(dt, param_path));
  std::vector<int32_t> fed;
  // Teacher-forced on the fp32 run's tokens, so every step compares the same inputs.
  return compare(run_steps(runner, 20, &fed, &ref.tokens), ref);
}

// stories260k is sensitive to K rounding: its keys reach |k| ~ 26 with sharp attention, and its top
// two logits are often within 0.3 of each other, so free-running greedy text drifts from the fp32 run
// after a few tokens (measured: e4m3 flips the first token of this prompt, e5m2 the 16th). What holds,
// measured over 21 teacher-forced steps: e4m3 mean error 0.071 (worst 0.155) of the largest logit,
// argmax equal on 18/21 steps and otherwise fp32's runner-up or third; e5m2 0.124 (worst 0.276), 20/21.
// A broken cache (wrong bias, a missed scale, stale slots) gives errors near 1 and ranks in the hundreds.
TEST(Fp8Stories, LogitsStayCloseToTheFp32Cache) {
  const Agreement e4m3 = fp8_agreement(DType::F8E4M3);
  const Agreement e5m2 = fp8_agreement(DType::F8E5M2);
  EXPECT_GT(e4m3.mean_err, 0.0) << "bit-identical logits: nothing was quantised";
  EXPECT_LT(e4m3.mean_err, 0.1);
  EXPECT_LT(e4m3.worst_err, 0.25);
  EXPECT_LT(e5m2.mean_err, 0.2);
  EXPECT_LT(e5m2.worst_err, 0.4);
  // One more mantissa bit: e4m3 is the more accurate of the two on values well inside its range.
  EXPECT_LT(e4m3.mean_err, e5m2.mean_err);
  for (const Agreement& a : {e4m3, e5m2}) {
    EXPECT_GE(a.top1, 17);
    EXPECT_LE(a.worst_rank, 2);  // the greedy choice is always one of fp32's top three
  }
}

Agreement agreement(ModelRunnerOptions o) {
  ModelRunner runner(o);
  std::vector<int32_t> fed;
  return compare(run_steps(runner, 20, &fed, &fp32_reference().tokens), fp32_reference());
}

// The 16-bit caches, teacher-forced on the fp32 run's tokens (21 steps; measured 2026-11-27: float16
// mean error 0.00044 of the largest logit, worst 0.0011, argmax equal on 21/21 steps; bfloat16 mean
// 0.0036, worst 0.0066, 21/21; float16 at -tp 2: 0.00047 / 0.0011, at -pp 2 the unsplit run's values). float16 keeps 3
// more mantissa bits than bfloat16 and stories260k's K/V stay far inside its range, so it is the closer of the two —
// and over 100x closer than fp8 e4m3 (0.071). The same bounds hold with the model split over 2 tensor-parallel ranks
// (each rank's cache holds its heads) and over 2 pipeline stages (each stage's cache its layers).
TEST(SixteenBitStories, LogitsStayCloseToTheFp32Cache) {
  // About 2x the measured errors; one near-tie flip allowed.
  constexpr double kF16MeanBound = 0.001, kF16WorstBound = 0.0025, kBf16MeanBound = 0.008, kBf16WorstBound = 0.015;
  constexpr int kF16Top1 = 20, kBf16Top1 = 20;
  const Agreement f16 = agreement(runner_opts(DType::F16));
  const Agreement bf16 = agreement(runner_opts(DType::BF16));
  std::printf("float16: mean %.4g worst %.4g top1 %d/21 rank %d; bfloat16: mean %.4g worst %.4g top1 %d/21 rank %d\n",
              f16.mean_err, f16.worst_err, f16.top1, f16.worst_rank, bf16.mean_err, bf16.worst_err, bf16.top1,
              bf16.worst_rank);
  EXPECT_GT(f16.mean_err, 0.0) << "bit-identical logits: nothing was rounded";
  EXPECT_LT(f16.mean_err, kF16MeanBound);
  EXPECT_LT(f16.worst_err, kF16WorstBound);
  EXPECT_LT(bf16.mean_err, kBf16MeanBound);
  EXPECT_LT(bf16.worst_err, kBf16WorstBound);
  EXPECT_LT(f16.mean_err, bf16.mean_err);
  EXPECT_GE(f16.top1, kF16Top1);
  EXPECT_GE(bf16.top1, kBf16Top1);
  EXPECT_LE(f16.worst_rank, 1);
  EXPECT_LE(bf16.worst_rank, 1);

  ModelRunnerOptions tp = runner_opts(DType::F16);
  tp.parallel.world_size = 2;
  ModelRunnerOptions pp = runner_opts(DType::F16);
  pp.pipeline_stages = 2;
  for (const ModelRunnerOptions& o : {tp, pp}) {
    const Agreement split = agreement(o);
    std::printf("float16, tp %d pp %d: mean %.4g worst %.4g top1 %d/21\n", static_cast<int>(o.parallel.world_size),
                o.pipeline_stages, split.mean_err, split.worst_err, split.top1);
    EXPECT_GT(split.mean_err, 0.0);
    EXPECT_LT(split.mean_err, kF16MeanBound) << "tp " << o.parallel.world_size << " pp " << o.pipeline_stages;
    EXPECT_LT(split.worst_err, kF16WorstBound);
    EXPECT_GE(split.top1, kF16Top1);
  }
}

TEST(Fp8Stories, RunnerReportsTheTypeAndGreedyDecodingRuns) {
  for (DType dt : {DType::F8E4M3, DType::F8E5M2}) {
    ModelRunner runner(runner_opts(dt));
    EXPECT_EQ(runner.kv_cache_dtype(), dt);
    std::vector<int32_t> greedy;
    run_steps(runner, 20, &greedy);
    ASSERT_EQ(greedy.size(), 20u);
    // The first tokens agree where the fp32 model is not torn between two (see above).
    if (dt == DType::F8E5M2) {
      EXPECT_EQ(std::vector<int32_t>(greedy.begin(), greedy.begin() + 15),
                std::vector<int32_t>(fp32_reference().tokens.begin(), fp32_reference().tokens.begin() + 15));
    }
  }
}

class ScalesFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cypris_kv_scales_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  // stories260k has 5 layers.
  std::string scales_json(const std::string& layer0, bool all_layers = true) {
    std::string s =
        R"({"model_type": "llama", "kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"0": {"0": )" + layer0;
    for (int i = 1; i < (all_layers ? 5 : 3); ++i) s += ", \"" + std::to_string(i) + "\": 1.0";
    return s + "}}}}";
  }
  std::string uniform_json(const std::string& scale) {
    std::string s = R"({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"0": {)";
    for (int i = 0; i < 5; ++i) s += (i ? ", \"" : "\"") + std::to_string(i) + "\": " + scale;
    return s + "}}}}";
  }
  std::filesystem::path dir_;
};

TEST_F(ScalesFile, ScalesAreAppliedOnWriteAndRead) {
  const Reference& ref = fp32_reference();
  std::vector<int32_t> t1, t2;
  ModelRunner plain(runner_opts(DType::F8E4M3));
  const std::vector<Logits> unscaled = run_steps(plain, 3, &t1, &ref.tokens);
  ModelRunner scaled(runner_opts(DType::F8E4M3, write("scales.json", scales_json("2.0"))));
  const std::vector<Logits> with_scale = run_steps(scaled, 3, &t2, &ref.tokens);
  // Layer 0 stores x / 2: other bytes, hence other rounding, hence other logits...
  EXPECT_GT(norm_err(with_scale.back(), unscaled.back()), 0.0);
  // ...as close to fp32 as without a scale (measured: mean 0.072 vs 0.071 with every layer at 2).
  EXPECT_LT(fp8_agreement(DType::F8E4M3, write("all2.json", uniform_json("2.0"))).mean_err, 0.1);
  // Scales that push most K/V into e4m3's subnormals (x / 0.001 saturates, x / 0.01 loses digits) do
  // visible harm (measured mean 0.55 and 0.35): the scale really divides on write and multiplies on read.
  EXPECT_GT(fp8_agreement(DType::F8E4M3, write("tiny.json", uniform_json("0.001"))).mean_err, 0.3);
  EXPECT_GT(fp8_agreement(DType::F8E4M3, write("small.json", uniform_json("0.01"))).mean_err, 0.2);
}

// A copy of stories260k whose checkpoint also holds {k,v}_scale tensors (shape [], F32) named with
// `prefix` ("self_attn." or "self_attn.attn."), in a second shard listed by an index file.
std::filesystem::path model_with_scales(const std::filesystem::path& dir, const std::string& prefix,
                                        const std::vector<float>& scales) {
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kDir + "/config.json", dir / "config.json");
  std::filesystem::create_symlink(kDir + "/model.safetensors", dir / "model.safetensors");
  std::ifstream in(kDir + "/model.safetensors", std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);  // little-endian on every machine we build for
  std::string header(len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(len));
  nlohmann::json index, shard = nlohmann::json::object();
  const nlohmann::json original = nlohmann::json::parse(header);
  for (const auto& [name, _] : original.items()) {
    if (name != "__metadata__") index["weight_map"][name] = "model.safetensors";
  }
  std::string data;
  for (size_t i = 0; i < scales.size(); ++i) {
    for (const char* kv : {"k_scale", "v_scale"}) {
      const std::string name = "model.layers." + std::to_string(i) + "." + prefix + kv;
      shard[name] = {
          {"dtype", "F32"}, {"shape", nlohmann::json::array()}, {"data_offsets", {data.size(), data.size() + 4}}};
      data.append(reinterpret_cast<const char*>(&scales[i]), 4);
      index["weight_map"][name] = "scales.safetensors";
    }
  }
  std::string h = shard.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t hlen = h.size();
  std::ofstream out(dir / "scales.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&hlen), 8);
  out << h << data;
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  return dir;
}

std::vector<Logits> teacher_forced(ModelRunnerOptions o, int steps) {
  ModelRunner r(o);
  std::vector<int32_t> fed;
  return run_steps(r, steps, &fed, &fp32_reference().tokens);
}

bool same_logits(const std::vector<Logits>& a, const std::vector<Logits>& b) {
  for (size_t s = 0; s < a.size(); ++s) {
    if (a[s].data != b[s].data) return false;
  }
  return a.size() == b.size();
}

TEST_F(ScalesFile, CheckpointScalesComeFirst) {
  const std::vector<float> scales = {2.0f, 0.5f, 4.0f, 1.5f, 0.25f};
  std::string js = R"({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"0": {)";
  for (size_t i = 0; i < scales.size(); ++i)
    js += (i ? ", \"" : "\"") + std::to_string(i) + "\": " + std::to_string(scales[i]);
  const std::string same_json = write("same.json", js + "}}}}");
  ModelRunnerOptions o = runner_opts(DType::F8E4M3, same_json);
  const std::vector<Logits> from_json = teacher_forced(o, 3);
  const std::vector<Logits> unscaled = teacher_forced(runner_opts(DType::F8E4M3), 3);
  ASSERT_FALSE(same_logits(from_json, unscaled));
  for (const std::string prefix : {"self_attn.", "self_attn.attn."}) {
    SCOPED_TRACE(prefix);
    ModelRunnerOptions c = runner_opts(DType::F8E4M3);
    c.model_dir = model_with_scales(dir_ / prefix, prefix, scales);
    // The checkpoint's k_scale = v_scale = s gives exactly the JSON's factor s.
    EXPECT_TRUE(same_logits(teacher_forced(c, 3), from_json));
    // Given both, the checkpoint wins over the file.
    c.quantization_param_path = write("tiny.json", uniform_json("0.001"));
    EXPECT_TRUE(same_logits(teacher_forced(c, 3), from_json));
  }
  ModelRunnerOptions bad = runner_opts(DType::F8E4M3);
  bad.model_dir = model_with_scales(dir_ / "neg", "self_attn.", {1.0f, -1.0f, 1.0f, 1.0f, 1.0f});
  try {
    ModelRunner r(bad);
    ADD_FAILURE() << "a negative checkpoint scale was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("model.layers.1.self_attn.k_scale"), HasSubstr("positive")));
  }
}

TEST_F(ScalesFile, BadFilesAreRejectedNamingTheFileAndField) {
  auto error_of = [&](const std::string& path) -> std::string {
    try {
      ModelRunner r(runner_opts(DType::F8E4M3, path));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string missing = (dir_ / "nope.json").string();
  EXPECT_THAT(error_of(missing), AllOf(HasSubstr("--quantization-param-path"), HasSubstr(missing)));
  const std::string bad_json = write("bad.json", "{\"kv_cache\": ");
  EXPECT_THAT(error_of(bad_json), AllOf(HasSubstr(bad_json), HasSubstr("not valid JSON")));
  EXPECT_THAT(error_of(write("nokv.json", "{\"scales\": {}}")), HasSubstr("\"kv_cache\""));
  EXPECT_THAT(error_of(write("short.json", scales_json("1.0", /*all_layers=*/false))),
              HasSubstr("kv_cache.scaling_factor.0.3 is missing"));
  EXPECT_THAT(error_of(write("neg.json", scales_json("-1"))),
              AllOf(HasSubstr("kv_cache.scaling_factor.0.0"), HasSubstr("positive")));
  EXPECT_THAT(error_of(write("zero.json", scales_json("0"))), HasSubstr("positive"));
  EXPECT_THAT(error_of(write("str.json", scales_json("\"big\""))), HasSubstr("must be a number"));
  EXPECT_THAT(error_of(write("rank.json", R"({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"1": {}}}})")),
              HasSubstr("rank 0"));
  EXPECT_THAT(error_of(write("dtype.json", R"({"kv_cache": {"dtype": "int8", "scaling_factor": {}}})")),
              AllOf(HasSubstr("kv_cache.dtype"), HasSubstr("float8_e4m3fn")));
}

TEST_F(ScalesFile, EachTensorParallelRankReadsItsOwnScales) {
  // vLLM's outer key is the TP rank: at --tensor-parallel-size 2 the file needs "0" and "1".
  ModelRunnerOptions o = runner_opts(DType::F8E4M3, write("rank0.json", uniform_json("1.0")));
  o.parallel.world_size = 2;
  try {
    ModelRunner r(o);
    ADD_FAILURE() << "a file without rank 1 was accepted at tensor parallel 2";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1"));
  }
  std::string both = R"({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {)";
  for (int r = 0; r < 2; ++r) {
    both += std::string(r ? ", " : "") + "\"" + std::to_string(r) + "\": {";
    for (int i = 0; i < 5; ++i) both += (i ? ", \"" : "\"") + std::to_string(i) + "\": 2.0";
    both += "}";
  }
  o.quantization_param_path = write("ranks.json", both + "}}}");
  // Same scales on both ranks as on one: the TP run sees the one-rank run's cache values.
  const Agreement tp = [&] {
    ModelRunner r(o);
    std::vector<int32_t> fed;
    return compare(run_steps(r, 20, &fed, &fp32_reference().tokens), fp32_reference());
  }();
  EXPECT_LT(tp.mean_err, 0.1);
}

// Through the Engine: generation runs with each fp8 type and starts like the fp32 engine's (exact
// equality of all 20 tokens does not hold for stories260k, see Fp8Stories), and the same
// --cpu-kvcache-space holds 4x the blocks (one request fills a quarter of the share). "auto" on the
// CPU is a float16 cache: 2x the blocks of float32, the same 20 tokens.
TEST(EngineKvCacheDtype, Fp8RunsAndHoldsFourTimesTheBlocks) {
  auto run = [](const std::string& kv, double* usage) {
    EngineConfig cfg = testing_support::stories_config();
    cfg.quant.kv_cache_dtype = kv;
    Engine engine(cfg);
    auto p = std::make_shared<SamplingParams>();
    p->temperature = 0.0f;
    p->max_tokens = 20;
    p->ignore_eos = true;
    auto stream = std::make_shared<RequestStream>("r");
    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < 100; ++i) prompt.push_back(3 + (i * 37) % 500);
    engine.add_request(GenerateRequest{"r", prompt, "", p, 0}, stream);
    engine.step();
    *usage = engine.stats().kv_cache_usage;
    while (engine.has_unfinished_requests()) engine.step();
    std::vector<int32_t> ids;
    while (auto o = stream->next(std::chrono::milliseconds(0))) {
      for (const auto& d : o->outputs) ids.insert(ids.end(), d.token_ids.begin(), d.token_ids.end());
    }
    return ids;
  };
  double u32 = 0, u_e4m3 = 0, u_e5m2 = 0, u_auto = 0;
  const std::vector<int32_t> ref = run("float32", &u32);
  ASSERT_EQ(ref.size(), 20u);
  EXPECT_EQ(run("auto", &u_auto), ref);
  EXPECT_NEAR(u32 / u_auto, 2.0, 0.05);
  const std::vector<int32_t> e4m3 = run("fp8", &u_e4m3), e5m2 = run("fp8_e5m2", &u_e5m2);
  ASSERT_EQ(e4m3.size(), 20u);
  ASSERT_EQ(e5m2.size(), 20u);
  // Measured: e4m3 agrees on the first 9 tokens, e5m2 on the first 2.
  EXPECT_EQ(std::vector<int32_t>(e4m3.begin(), e4m3.begin() + 9), std::vector<int32_t>(ref.begin(), ref.begin() + 9));
  EXPECT_EQ(std::vector<int32_t>(e5m2.begin(), e5m2.begin() + 2), std::vector<int32_t>(ref.begin(), ref.begin() + 2));
  ASSERT_GT(u_e4m3, 0.0);
  EXPECT_NEAR(u32 / u_e4m3, 4.0, 0.1);
  EXPECT_NEAR(u32 / u_e5m2, 4.0, 0.1);
}

// Swapping and copying blocks move the 1- and 2-byte elements intact: with an fp8 or 16-bit cache,
// preemption by swap and batching give every request its solo output with that cache (as the fp32
// equivalence tests in engine_test.cpp), and requests sharing a 200-token prefix served from the
// prefix cache get the outputs they get alone.
// (Swap and block copies move bytes by the element size: float16 stands for both 16-bit types.)
class CacheTypes : public ::testing::TestWithParam<std::string> {};
class SwapCacheTypes : public ::testing::TestWithParam<std::string> {};

TEST_P(SwapCacheTypes, SwapPreemptionAndBatchingKeepOutputs) {
  using namespace testing_support;
  EngineConfig cfg = stories_config();
  cfg.quant.kv_cache_dtype = GetParam();
  const std::vector<Job> jobs = make_jobs(64, 1234);
  const Outputs solo = run_solo(cfg, jobs);
  EngineConfig tight = cfg;
  tight.cache.num_gpu_blocks_override = 40;  // 640 tokens: far less than the batch wants
  tight.scheduler.preemption_mode = "swap";
  tight.cache.swap_space = 0.01;
  Engine engine(tight);
  expect_same_outputs(jobs, solo, run_batched(engine, jobs));
  EXPECT_GT(engine.stats().num_swap_outs_total, 0) << engine.stats().num_preemptions_total;
}

TEST_P(CacheTypes, PrefixCachingKeepsOutputs) {
  using namespace testing_support;
  EngineConfig cfg = stories_config();
  cfg.quant.kv_cache_dtype = GetParam();
  const std::vector<Job> jobs = make_jobs(16, 99, /*shared_prefix_len=*/200);
  const Outputs solo = run_solo(cfg, jobs);
  cfg.cache.enable_prefix_caching = true;
  Engine engine(cfg);
  expect_same_outputs(jobs, solo, run_batched(engine, jobs));
  EXPECT_GT(engine.stats().prefix_cache_hit_rate, 0.5);
}

INSTANTIATE_TEST_SUITE_P(KvCacheDtype, CacheTypes, ::testing::Values("float16", "bfloat16", "fp8_e5m2"));
INSTANTIATE_TEST_SUITE_P(KvCacheDtype, SwapCacheTypes, ::testing::Values("float16", "fp8_e5m2"));

}  // namespace
}  // namespace cypris
