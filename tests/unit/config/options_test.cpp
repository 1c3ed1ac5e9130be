// The option table against Aphrodite's option reference, and the parser a user meets on the
// command line and in config files.
#include "engine/config/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "engine/common/error.h"

namespace cypris {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string reference_path() {
  return std::string(CYPRIS_TESTDATA_DIR) + "/../reference/aphrodite-engine-options.txt";
}

// Parses the reference's flag tables: section title -> flags with their short alias and choices.
struct RefFlag {
  std::string flag, short_alias, group;
  std::vector<std::string> choices;
};

std::vector<RefFlag> read_reference() {
  std::ifstream in(reference_path());
  EXPECT_TRUE(in.good()) << reference_path();
  std::vector<RefFlag> out;
  std::string line, group;
  const std::regex flag_re(R"(^(--[a-z0-9-]+)(?: \((-[a-z]+)\))?(?: \{([^}]*)\})?)");
  while (std::getline(in, line)) {
    if (line.find("Options") != std::string::npos && line.find(' ') != std::string::npos && line.size() < 40 &&
        line.rfind("--", 0) != 0) {
      group = line;
      if (group == "Sampler options") break;  // per-request parameters, not flags
    }
    std::smatch m;
    if (std::regex_search(line, m, flag_re)) {
      RefFlag f{m[1], m[2], group, {}};
      std::string choices = m[3];
      std::stringstream ss(choices);
      std::string c;
      while (std::getline(ss, c, ',')) f.choices.push_back(c);
      out.push_back(f);
    }
  }
  return out;
}

TEST(OptionTable, HoldsEveryReferenceFlagWithItsAliasGroupAndChoices) {
  auto ref = read_reference();
  ASSERT_GT(ref.size(), 70u);  // the reference lists about 80 flags
  for (const auto& r : ref) {
    const OptionSpec* s = find_option(r.flag);
    ASSERT_NE(s, nullptr) << r.flag;
    // The reference's --delay-factor and --policy are aliases of the vLLM names.
    if (s->flag() == r.flag) EXPECT_EQ(s->group, r.group) << r.flag;
    if (!r.short_alias.empty()) {
      EXPECT_THAT(s->aliases, ::testing::Contains(r.short_alias)) << r.flag;
      EXPECT_EQ(find_option(r.short_alias), s);
    }
    for (const auto& c : r.choices) {
      if (c == "MODEL" || c == "\"[ngram]\"") continue;  // a metavar, not a choice list
      if (s->binding.type == OptionType::Bool && (c == "true" || c == "false")) continue;
      EXPECT_THAT(s->choices, ::testing::Contains(c)) << r.flag;
    }
  }
}

TEST(OptionTable, DefaultsEqualTheReference) {
  // Typed from aphrodite-engine-options.txt ("Defaults to ...") and vllm-engine-args.txt.
  const std::map<std::string, json> expected = {
      {"tokenizer-mode", "auto"},
      {"load-format", "auto"},
      {"dtype", "auto"},
      {"max-log-probs", 10},
      {"tensor-parallel-size", 1},
      {"pipeline-parallel-size", 1},
      {"kv-cache-dtype", "auto"},
      {"block-size", 16},
      {"swap-space", 4.0},
      {"gpu-memory-utilization", 0.9},
      {"tokenizer-pool-size", 0},
      {"tokenizer-pool-type", "ray"},
      {"max-num-seqs", 256},
      {"scheduling-policy", "fcfs"},
      {"device", "auto"},
      {"num-lookahead-slots", 0},
      {"max-loras", 1},
      {"max-lora-rank", 16},
      {"lora-extra-vocab-size", 256},
      {"lora-dtype", "auto"},
      {"host", "localhost"},
      {"port", 2242},
      {"seed", 0},
      {"max-seq-len-to-capture", 8192},
      {"scheduler-delay-factor", 0.0},
      {"num-scheduler-steps", 1},
      {"cpu-offload-gb", 0.0},
      {"guided-decoding-backend", "outlines"},
      {"max-model-len", nullptr},
      {"max-num-batched-tokens", nullptr},
      {"num-gpu-blocks-override", nullptr},
      // Deliberately not Aphrodite's (off): on, as in vLLM's V1 engine (issue #32).
      {"enable-prefix-caching", true},
      {"enable-chunked-prefill", true},
      {"disable-log-stats", false},
      {"disable-log-requests", false},
      {"response-role", "assistant"},
      {"launch-kobold-api", false},
      // Deliberately not Aphrodite's (unlimited): a 31.5 MB prompt became 31.5 MB of log (issue #20).
      {"max-log-len", 512},
      // Deliberately not Aphrodite's (true): CUDA graphs by default on CUDA (issue #16).
      {"enforce-eager", false},
  };
  for (const auto& [flag, value] : expected) {
    const OptionSpec* s = find_option(flag);
    ASSERT_NE(s, nullptr) << flag;
    EXPECT_EQ(s->default_value(), value) << flag;
  }
}

TEST(OptionTable, HasTheVllmAndCyprisOptionsAphroditeUsersPass) {
  for (const char* f : {"--enable-prefix-caching", "--seed", "--max-seq-len-to-capture", "--disable-log-stats",
                        "--disable-log-requests", "--max-log-len", "--served-model-name", "--cpu-offload-gb",
                        "--preemption-mode", "--scheduling-policy", "--distributed-executor-backend",
                        "--disable-sliding-window", "--rope-scaling", "--rope-theta", "--ignore-patterns",
                        "--max-parallel-loading-workers", "--skip-tokenizer-init", "--num-scheduler-steps",
                        "--no-ui", "--config", "--log-level", "--cpu-kvcache-space", "--preemption_mode"}) {
    EXPECT_NE(find_option(f), nullptr) << f;
  }
  EXPECT_THAT(find_option("--kv-cache-dtype")->choices, ::testing::IsSupersetOf({"fp8_e4m3", "fp8_e5m2"}));
  EXPECT_EQ(find_option("--api-keys")->env, "APHRODITE_API_KEY");
  EXPECT_EQ(find_option("--admin-key")->env, "APHRODITE_ADMIN_KEY");
}

TEST(OptionTable, NamesAreUnique) {
  std::set<std::string> seen;
  for (const auto& s : option_table()) {
    EXPECT_TRUE(seen.insert(s.flag()).second) << s.flag();
    for (const auto& a : s.aliases) EXPECT_TRUE(seen.insert(a).second) << a;
  }
}

ParseResult parse(const std::vector<std::string>& args, EngineConfig& cfg) {
  return parse_options(args, cfg, {}, /*read_environment=*/false);
}

TEST(Parse, TypedValuesAliasesAndLists) {
  EngineConfig cfg;
  auto r = parse({"--model", "org/name", "-gmu", "0.5", "--max-model-len=4096", "--enable-prefix-caching",
                  "--served-model-name", "a", "b", "--delay-factor", "0.25", "--preemption_mode", "swap",
                  "--enforce-eager", "true", "extra"},
                 cfg);
  EXPECT_EQ(cfg.model.model, "org/name");
  EXPECT_DOUBLE_EQ(cfg.cache.gpu_memory_utilization, 0.5);
  EXPECT_EQ(cfg.model.max_model_len, 4096);
  EXPECT_TRUE(cfg.cache.enable_prefix_caching);
  EXPECT_EQ(cfg.model.served_model_name, (std::vector<std::string>{"a", "b"}));
  EXPECT_DOUBLE_EQ(cfg.scheduler.scheduler_delay_factor, 0.25);
  EXPECT_EQ(cfg.scheduler.preemption_mode, "swap");
  EXPECT_TRUE(cfg.model.enforce_eager);
  EXPECT_EQ(r.positional, (std::vector<std::string>{"extra"}));
  EXPECT_TRUE(r.explicit_keys.count("gpu_memory_utilization"));
}

TEST(Parse, ListOptionsTakeJsonListsAndRepeats) {
  EngineConfig cfg;
  parse({"--allowed-origins", R"(["http://a", "http://b"])", "--api-keys", "k1", "--api-keys", "k2"}, cfg);
  EXPECT_EQ(cfg.server.allowed_origins, (std::vector<std::string>{"http://a", "http://b"}));
  EXPECT_EQ(cfg.server.api_keys, (std::vector<std::string>{"k1", "k2"}));
}

TEST(Parse, NegativeNumbersAreValues) {
  EngineConfig cfg;
  parse({"--seed", "-5"}, cfg);
  EXPECT_EQ(cfg.model.seed, -5);
}

std::string error_of(const std::vector<std::string>& args) {
  EngineConfig cfg;
  try {
    parse(args, cfg);
    validate_options(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Parse, ErrorsNameTheFlagAndWhatIsAllowed) {
  EXPECT_THAT(error_of({"--tensor-paralel-size", "2"}),
              AllOf(HasSubstr("unknown option '--tensor-paralel-size'"), HasSubstr("'--tensor-parallel-size'")));
  EXPECT_THAT(error_of({"--enable-prefix-cache"}), HasSubstr("did you mean '--enable-prefix-caching'"));
  EXPECT_THAT(error_of({"--block-size", "12"}), AllOf(HasSubstr("--block-size"), HasSubstr("8, 16, 32")));
  EXPECT_THAT(error_of({"-gmu", "1.5"}), AllOf(HasSubstr("--gpu-memory-utilization"), HasSubstr("(0, 1]")));
  EXPECT_THAT(error_of({"--max-num-seqs", "many"}), AllOf(HasSubstr("--max-num-seqs"), HasSubstr("integer")));
  EXPECT_THAT(error_of({"--dtype", "fp4"}), AllOf(HasSubstr("--dtype"), HasSubstr("bfloat16")));
  EXPECT_THAT(error_of({"--port"}), HasSubstr("--port needs a value"));
  EXPECT_THAT(error_of({"--rope-scaling", "{bad"}), AllOf(HasSubstr("--rope-scaling"), HasSubstr("JSON object")));
  EXPECT_THAT(error_of({"--port", "70000"}), HasSubstr("65535"));
  EXPECT_THAT(error_of({"--ssl-keyfile", "k.pem"}), HasSubstr("--ssl-certfile"));
  EXPECT_EQ(error_of({"--zzzzzzzzzzzz"}).find("did you mean"), std::string::npos);
}

TEST(Validate, UnimplementedFeaturesAreRejectedNotIgnored) {
  EXPECT_EQ(error_of({"--num-lookahead-slots", "4"}), "");  // checked against --num-speculative-tokens at start
  EXPECT_THAT(error_of({"-q", "aqlm"}), AllOf(HasSubstr("aqlm"), HasSubstr("not supported yet")));
  // The implemented methods are accepted here; the loader checks them against the checkpoint.
  EXPECT_EQ(error_of({"-q", "gptq"}), "");
  EXPECT_EQ(error_of({"-q", "awq"}), "");
  EXPECT_EQ(error_of({"-q", "exl2"}), "");
  EXPECT_EQ(error_of({"--enable-lora", "--lora-modules", "a=/x", "--max-lora-rank", "64"}), "");
  EXPECT_THAT(error_of({"--qlora-adapter-name-or-path", "x"}),
              AllOf(HasSubstr("--qlora-adapter-name-or-path"), HasSubstr("--enable-lora")));
  EXPECT_EQ(error_of({"--enable-lora", "--qlora-adapter-name-or-path", "org/qlora@v1"}), "");
  // The default value given explicitly is harmless.
  EXPECT_EQ(error_of({"--num-scheduler-steps", "1"}), "");
}

TEST(Validate, CpuOffloadGb) {
  // Aphrodite's meaning: GiB of each GPU's weights kept in pinned host memory.
  EXPECT_EQ(error_of({"--cpu-offload-gb", "4"}), "");
  EXPECT_EQ(error_of({"--cpu-offload-gb", "0.25", "--gpu-layers", "20"}), "");  // the GPU stage's layers
  EXPECT_THAT(error_of({"--cpu-offload-gb", "-1"}), AllOf(HasSubstr("--cpu-offload-gb"), HasSubstr(">= 0")));
  EXPECT_THAT(error_of({"--cpu-offload-gb", "nan"}), AllOf(HasSubstr("--cpu-offload-gb"), HasSubstr("number")));
  EXPECT_THAT(error_of({"--cpu-offload-gb", "lots"}), AllOf(HasSubstr("--cpu-offload-gb"), HasSubstr("number")));
  // The same value through the API (the desktop app, JSON) gets the same check.
  EngineConfig api;
  api.cache.cpu_offload_gb = std::nan("");
  EXPECT_THROW(
      {
        try {
          validate_options(api);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("--cpu-offload-gb"));
          throw;
        }
      },
      Error);
  // Where there is no GPU to offload from, a warning says it does nothing.
  EngineConfig cpu;
  parse({"--device", "cpu", "--cpu-offload-gb", "2"}, cpu);
  std::vector<std::string> w = validate_options(cpu);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], AllOf(HasSubstr("--cpu-offload-gb 2"), HasSubstr("no effect with --device cpu")));
  EngineConfig none_on_gpu;
  parse({"--gpu-layers", "0", "--cpu-offload-gb", "2"}, none_on_gpu);
  w = validate_options(none_on_gpu);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], HasSubstr("no effect with --gpu-layers 0"));
  EngineConfig gpu;
  parse({"--device", "auto", "--cpu-offload-gb", "2"}, gpu);
  EXPECT_TRUE(validate_options(gpu).empty());
}

TEST(Validate, PipelineStagesAndGpuLayers) {
  EXPECT_EQ(error_of({"-pp", "2"}), "");
  EXPECT_THAT(error_of({"-pp", "0"}), HasSubstr("--pipeline-parallel-size"));
  // KoboldCpp's and llama.cpp's spellings, and "auto" for -1.
  for (const auto& [args, want] : std::vector<std::pair<std::vector<std::string>, int64_t>>{
           {{"--gpu-layers", "12"}, 12}, {{"--gpulayers", "7"}, 7}, {{"-ngl", "99"}, 99},
           {{"--gpu-layers", "auto"}, -1}, {{"-ngl", "-1"}, -1}}) {
    EngineConfig cfg;
    parse(args, cfg);
    EXPECT_NO_THROW(validate_options(cfg)) << args[0];
    EXPECT_EQ(cfg.device.gpu_layers.value_or(-100), want) << args[0] << " " << args[1];
  }
  EXPECT_THAT(error_of({"--gpu-layers", "-2"}), HasSubstr("--gpu-layers"));
  EXPECT_THAT(error_of({"--gpu-layers", "many"}), AllOf(HasSubstr("--gpu-layers"), HasSubstr("integer")));
  EXPECT_THAT(error_of({"--threads", "auto"}), HasSubstr("integer"));  // "auto" only where -1 means it
}

TEST(Validate, Fp8KvCacheDtypesAreAcceptedAndBadOnesNameTheChoices) {
  for (const char* v : {"fp8", "fp8_e4m3", "fp8_e5m2", "auto", "float16", "bfloat16", "float32"}) {
    EngineConfig cfg;
    parse({"--kv-cache-dtype", v, "--quantization-param-path", "/tmp/scales.json"}, cfg);
    EXPECT_NO_THROW(validate_options(cfg)) << v;
    EXPECT_EQ(cfg.quant.kv_cache_dtype, v);
    EXPECT_EQ(cfg.quant.quantization_param_path.value_or(""), "/tmp/scales.json");
  }
  EXPECT_THAT(error_of({"--kv-cache-dtype", "fp16"}),
              AllOf(HasSubstr("--kv-cache-dtype"), HasSubstr("fp8_e5m2"), HasSubstr("fp8_e4m3"), HasSubstr("auto")));
}

TEST(Validate, OptionsWithoutMeaningHereWarnOnce) {
  EngineConfig cfg;
  parse({"--worker-use-ray", "--tokenizer-pool-size", "4", "--device", "neuron"}, cfg);
  auto w = validate_options(cfg);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[0], AllOf(HasSubstr("--worker-use-ray"), HasSubstr("no effect")));
  EXPECT_THAT(w[2], HasSubstr("neuron"));
}

TEST(Environment, MirrorsTheApiKeys) {
  setenv("APHRODITE_API_KEY", "secret", 1);
  setenv("APHRODITE_ADMIN_KEY", "root", 1);
  EngineConfig cfg;
  parse_options({}, cfg);
  unsetenv("APHRODITE_API_KEY");
  unsetenv("APHRODITE_ADMIN_KEY");
  EXPECT_EQ(cfg.server.api_keys, std::vector<std::string>{"secret"});
  EXPECT_EQ(cfg.server.admin_key, "root");
}

class ConfigFile : public ::testing::Test {
 protected:
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() / ("cypris_cfg_" + std::to_string(getpid()));
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
};

TEST_F(ConfigFile, YamlWithDashesOrUnderscoresAndTheCommandLineWins) {
  auto path = write("c.yaml",
                    "model: org/name\nmax-model-len: 2048\ngpu_memory_utilization: 0.8\n"
                    "served_model_name: [x, y]\nenable_prefix_caching: true\n");
  EngineConfig cfg;
  auto r = parse({"--config", path, "--max-model-len", "1024"}, cfg);
  EXPECT_EQ(cfg.model.model, "org/name");
  EXPECT_EQ(cfg.model.max_model_len, 1024);
  EXPECT_DOUBLE_EQ(cfg.cache.gpu_memory_utilization, 0.8);
  EXPECT_EQ(cfg.model.served_model_name, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(cfg.cache.enable_prefix_caching);
  EXPECT_TRUE(r.explicit_keys.count("enable_prefix_caching"));
}

TEST_F(ConfigFile, ErrorsNameTheFileAndKey) {
  EngineConfig cfg;
  auto bad_key = write("a.yaml", "max_model_lenn: 5\n");
  EXPECT_THAT(error_of({"--config", bad_key}),
              AllOf(HasSubstr("a.yaml"), HasSubstr("max_model_lenn"), HasSubstr("max-model-len")));
  auto bad_type = write("b.json", R"({"max_num_seqs": "lots"})");
  EXPECT_THAT(error_of({"--config", bad_type}), AllOf(HasSubstr("b.json"), HasSubstr("max_num_seqs")));
  auto bad_yaml = write("c.yaml", "model: [unclosed\n");
  EXPECT_THAT(error_of({"--config", bad_yaml}), AllOf(HasSubstr("c.yaml"), HasSubstr("YAML")));
  auto bad_json = write("d.json", "{\"model\": ");
  EXPECT_THAT(error_of({"--config", bad_json}), AllOf(HasSubstr("d.json"), HasSubstr("JSON")));
  EXPECT_THAT(error_of({"--config", (dir_ / "missing.yaml").string()}), HasSubstr("missing.yaml"));
  EXPECT_THAT(error_of({"--config", dir_.string()}), HasSubstr("is not a file"));
}

TEST_F(ConfigFile, JsonSaveLoadRoundTripsEveryOption) {
  EngineConfig cfg;
  parse({"--model", "m", "--max-model-len", "77", "--served-model-name", "a", "b", "--rope-theta", "5e5",
         "--swap-space", "2.5", "--api-keys", "k", "--preemption-mode", "swap", "--no-enable-chunked-prefill"},
        cfg);
  auto path = (dir_ / "saved.json").string();
  save_options_file(path, cfg);
  EngineConfig loaded;
  load_options_file(path, loaded);
  EXPECT_EQ(options_to_json(loaded), options_to_json(cfg));
  EXPECT_EQ(loaded.model.served_model_name, (std::vector<std::string>{"a", "b"}));
  EXPECT_DOUBLE_EQ(loaded.model.rope_theta.value(), 5e5);
  // Only the changed options when asked.
  json changed = options_to_json(cfg, true);
  EXPECT_EQ(changed.size(), 8u);
}

TEST(Help, ListsEveryOptionInItsGroup) {
  std::string h = help_text("usage");
  for (const auto& g : option_groups()) EXPECT_THAT(h, HasSubstr(g + ":"));
  for (const auto& s : option_table()) EXPECT_THAT(h, HasSubstr(s.flag())) << s.flag();
  // Groups appear in the reference's order.
  EXPECT_LT(h.find("Model Options:"), h.find("Parallel Options:"));
  EXPECT_LT(h.find("Scheduler Options:"), h.find("API Options:"));
  EXPECT_THAT(h, HasSubstr("--tensor-parallel-size (-tp) SIZE"));
}

TEST(Help, JsonDescribesEveryOption) {
  json j = help_json();
  ASSERT_EQ(j["options"].size(), option_table().size());
  const json* gmu = nullptr;
  for (const auto& o : j["options"]) {
    if (o["name"] == "gpu-memory-utilization") gmu = &o;
  }
  ASSERT_NE(gmu, nullptr);
  EXPECT_EQ((*gmu)["default"], 0.9);
  EXPECT_EQ((*gmu)["max"], 1.0);
  EXPECT_EQ((*gmu)["group"], "KV Cache Options");
  EXPECT_THAT((*gmu)["flags"].get<std::vector<std::string>>(), ::testing::Contains("-gmu"));
}

}  // namespace
}  // namespace cypris

namespace cypris {
namespace {

TEST(Docs, ReadmeOptionReferenceMatchesTheTable) {
  std::ifstream in(std::string(CYPRIS_SOURCE_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  auto b = text.find("<!-- options:begin -->\n");
  auto e = text.find("<!-- options:end -->");
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  std::string in_readme = text.substr(b + 23, e - b - 23);
  std::string generated = option_reference_markdown();
  while (!generated.empty() && generated.front() == '\n') generated.erase(generated.begin());
  EXPECT_EQ(in_readme, generated) << "run tests/tools/update_readme_options.sh";
}

}  // namespace
}  // namespace cypris

namespace cypris {
namespace {

std::string load_error(const std::string& text) {
  EngineConfig cfg;
  try {
    load_options_text(text, "the load options", cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// issue #20 item 9: 300 bytes of nested YAML aliases expanded to 86 MB.
TEST(OptionsText, YamlAliasBombIsRefusedBeforeExpanding) {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char k = 'b'; k <= 'i'; ++k) {
    bomb += std::string(1, k) + ": &" + k + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", " : "") + "*" + static_cast<char>(k - 1);
    bomb += "]\n";
  }
  const std::string msg = load_error(bomb);
  EXPECT_THAT(msg, HasSubstr("the load options"));
  EXPECT_THAT(msg, HasSubstr("aliases"));
  EXPECT_THAT(load_error(std::string(40, '[') + std::string(40, ']')), HasSubstr("expected a mapping"));
  std::string deep = "model: ";
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 40; ++i) deep += "]";
  EXPECT_THAT(load_error(deep), HasSubstr("nested deeper"));
}

// issue #26 item 4: one 1 MB string referenced 5000 times cost 8.75 s and 4.6 GB before its 400
// (the cap counted values, not bytes).
TEST(OptionsText, YamlAliasesOfALongStringAreRefusedByTheirBytes) {
  std::string yaml = "big: &big " + std::string(1 << 20, 'x') + "\nmodel: m\nserved-model-name: [";
  for (int i = 0; i < 5000; ++i) yaml += std::string(i ? ", " : "") + "*big";
  yaml += "]\n";
  const std::string msg = load_error(yaml);
  EXPECT_THAT(msg, HasSubstr("the load options"));
  EXPECT_THAT(msg, HasSubstr("bytes of text"));
  EXPECT_THAT(msg, HasSubstr("aliases"));
  // A long value that is not repeated is read.
  EngineConfig cfg;
  load_options_text("model: " + std::string(100000, 'm') + "\n", "the load options", cfg);
  EXPECT_EQ(cfg.model.model.size(), 100000u);
}

TEST(OptionsText, TextIsReadLikeAFileAndNamesItsSource) {
  EngineConfig cfg;
  load_options_text("model: m\nmax-model-len: 300\n", "the load options", cfg);
  EXPECT_EQ(cfg.model.model, "m");
  EXPECT_THAT(load_error("{\"model\": 1"), HasSubstr("the load options: not valid JSON"));
  EXPECT_THAT(load_error("no_such: 1\n"), HasSubstr("the load options: unknown option 'no_such'"));
  std::set<std::string> keys;
  load_options_text("config: /x.yaml\nmodel: m\n", "s", cfg, &keys);
  EXPECT_EQ(keys.count("config"), 1u);  // reported (not followed), so a caller can refuse it
}

}  // namespace
}  // namespace cypris
