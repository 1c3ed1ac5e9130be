// Every flag and every listed choice of the three option references (Aphrodite's engine options,
// vLLM's engine arguments and the later vLLM list) walked through the parser a user meets: each
// is known, and each is honoured, warned about ("has no effect in Cypris") or refused with a
// reason ("not supported") — never an unknown option or an invalid-choice error. The flags are read
// from the reference files themselves, not copied into the test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "engine/common/error.h"
#include "engine/config/options.h"

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const char* const kReferenceFiles[] = {"aphrodite-engine-options.txt", "vllm-engine-args.txt",
                                       "vllm-engine-args-later-zh.txt"};

std::string read_reference(const std::string& name) {
  const std::string path = std::string(CYPRIS_TESTDATA_DIR) + "/../reference/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every "--flag" and "-x" that starts a word (start of line, after a space, '[', '(' or ','). The
// "-m" of `python -m vllm.entrypoints...` in a usage line is Python's, not vLLM's.
std::set<std::string> flags_in(const std::string& text) {
  std::set<std::string> out;
  const std::regex re(R"((^|[\s\[(,])(-{1,2}[a-z][a-z0-9_-]*)( vllm\.)?)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    if ((*it)[3].matched) continue;
    out.insert((*it)[2].str());
  }
  return out;
}

// "--flag {a,b,c}" and "--flag (-x) {a,b,c}": the listed choices of each flag. Metavars such as
// {MODEL,"[ngram]"} are not choices.
std::map<std::string, std::set<std::string>> choices_in(const std::string& text) {
  std::map<std::string, std::set<std::string>> out;
  const std::regex re(R"((--[a-z][a-z0-9_-]*)(?: \(-[a-z-]+\))? \{([^}]*)\})");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    std::stringstream ss((*it)[2].str());
    std::string c;
    while (std::getline(ss, c, ',')) {
      if (c.empty() || c.front() == '"' || std::isupper(static_cast<unsigned char>(c.front()))) {
        if (c != "None") continue;
      }
      out[(*it)[1].str()].insert(c);
    }
  }
  return out;
}

struct Outcome {
  bool parsed = false;
  std::string error;  // empty: accepted
  std::vector<std::string> warnings;
};

Outcome run(const std::vector<std::string>& args) {
  Outcome o;
  EngineConfig cfg;
  try {
    ParseResult r = parse_options(args, cfg, {}, /*read_environment=*/false);
    o.parsed = true;
    o.warnings = validate_options(cfg, r.explicit_keys);
  } catch (const Error& e) {
    o.error = e.what();
  }
  return o;
}

// A value of the option's type that its range and choices accept, other than its default where
// there is one (so that a flag Cypris refuses is seen to be refused).
std::vector<std::string> sample_args(const std::string& flag, const OptionSpec& s) {
  if (s.binding.type == OptionType::Bool) return {flag};
  std::string value = "x";
  const nlohmann::json def = s.default_value();
  for (const auto& c : s.choices) {
    if (s.refusal(c)) continue;
    const bool is_default = def.is_string() ? def.get<std::string>() == c : def.dump() == c;
    if (value == "x" || !is_default) value = c;
    if (!is_default) break;
  }
  if (s.choices.empty() && s.json_object) value = "{}";
  if (s.choices.empty() && (s.binding.type == OptionType::Int || s.binding.type == OptionType::Float)) {
    double v = s.binding.type == OptionType::Int ? 512 : 0.5;
    if (s.min) v = std::max(v, *s.min + (s.min_exclusive ? 0.5 : 0.0));
    if (s.max) v = std::min(v, *s.max);
    value = s.binding.type == OptionType::Int ? std::to_string(static_cast<int64_t>(v)) : std::to_string(v);
  }
  return {flag, value};
}

TEST(ReferenceFlags, TheReferencesListTheFlagsTheIssueNames) {
  std::set<std::string> all;
  for (const char* f : kReferenceFiles) {
    auto fl = flags_in(read_reference(f));
    all.insert(fl.begin(), fl.end());
  }
  // A sanity check of the reader, so that a broken regex cannot make the walk below vacuous.
  EXPECT_GT(all.size(), 120u);
  for (const char* f : {"--config-format", "--limit-mm-per-prompt", "--otlp-traces-endpoint", "-spec-draft-tp",
                        "--override-neuron-config", "--context-shift", "--launch-kobold-api", "-tp", "-q"}) {
    EXPECT_TRUE(all.count(f)) << f;
  }
  EXPECT_FALSE(all.count("-m"));  // python -m
}

TEST(ReferenceFlags, EveryFlagIsKnownAndWorksWarnsOrIsRefusedWithAReason) {
  for (const char* file : kReferenceFiles) {
    for (const std::string& flag : flags_in(read_reference(file))) {
      SCOPED_TRACE(std::string(file) + ": " + flag);
      if (flag == "-h") {
        EngineConfig cfg;
        EXPECT_TRUE(parse_options({flag}, cfg, {}, false).help);
        continue;
      }
      const OptionSpec* s = find_option(flag);
      ASSERT_NE(s, nullptr) << "unknown to the option table";
      const Outcome o = run(sample_args(flag, *s));
      EXPECT_TRUE(o.parsed) << o.error;
      EXPECT_THAT(o.error, AllOf(Not(HasSubstr("unknown option")), Not(HasSubstr("does not accept"))));
      switch (s->support) {
        case OptionSupport::NotYet:
          EXPECT_THAT(o.error, AllOf(HasSubstr(s->flag()), HasSubstr("not supported yet"), HasSubstr(s->note)));
          EXPECT_FALSE(s->note.empty());
          break;
        case OptionSupport::NoEffect: {
          EXPECT_EQ(o.error, "");
          // Warned even when given at its default, with the reason.
          const bool warned = std::any_of(o.warnings.begin(), o.warnings.end(), [&](const std::string& w) {
            return w.find(s->flag()) != std::string::npos && w.find("has no effect in Cypris") != std::string::npos &&
                   w.find(s->note) != std::string::npos;
          });
          EXPECT_TRUE(warned) << ::testing::PrintToString(o.warnings);
          break;
        }
        case OptionSupport::Supported:
          // Accepted, or refused by a rule that names the flag (--ssl-keyfile needs --ssl-certfile).
          if (!o.error.empty()) EXPECT_THAT(o.error, HasSubstr(s->flag()));
          break;
      }
    }
  }
}

TEST(ReferenceFlags, EveryListedChoiceIsAcceptedOrRefusedWithAReason) {
  size_t walked = 0, refused = 0;
  for (const char* file : kReferenceFiles) {
    for (const auto& [flag, values] : choices_in(read_reference(file))) {
      const OptionSpec* s = find_option(flag);
      ASSERT_NE(s, nullptr) << flag;
      for (const std::string& v : values) {
        SCOPED_TRACE(std::string(file) + ": " + flag + " " + v);
        const Outcome o = run({flag, v});
        ++walked;
        EXPECT_THAT(o.error, Not(HasSubstr("does not accept")));
        if (o.error.empty()) continue;
        ++refused;
        // A refusal says so, names the flag, and gives the reason (the option's note, or the choice's).
        EXPECT_THAT(o.error, AllOf(HasSubstr(s->flag()), HasSubstr("not supported")));
        if (const std::string* why = s->refusal(v)) EXPECT_THAT(o.error, HasSubstr(*why));
      }
    }
  }
  EXPECT_GT(walked, 100u);
  EXPECT_GT(refused, 20u);
}

TEST(ReferenceFlags, TheChoicesTheIssueNamesAreRefusedWithTheirReason) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--tokenizer-mode", "mistral"},
                                                                {"--load-format", "sharded_state"},
                                                                {"--load-format", "mistral"},
                                                                {"--load-format", "tensorizer"},
                                                                {"-q", "fbgemm_fp8"},
                                                                {"-q", "awq_marlin"},
                                                                {"--device", "openvino"},
                                                                {"--device", "xpu"}}) {
    const Outcome o = run(args);
    EXPECT_THAT(o.error, AllOf(HasSubstr(args[1]), HasSubstr("not supported"))) << args[0] << " " << args[1];
    EXPECT_GT(o.error.size(), args[0].size() + args[1].size() + 40) << "a reason, not just a refusal: " << o.error;
  }
  // None in vLLM's --quantization list means "not quantized".
  EXPECT_EQ(run({"-q", "None"}).error, "");
}

TEST(ReferenceFlags, SwapSpaceWithRecomputePreemptionSaysItHasNoEffect) {
  const Outcome recompute = run({"--swap-space", "8"});
  ASSERT_EQ(recompute.error, "");
  EXPECT_THAT(recompute.warnings, ::testing::Contains(AllOf(HasSubstr("--swap-space"), HasSubstr("no effect"),
                                                            HasSubstr("--preemption-mode swap"))));
  const Outcome swap = run({"--swap-space", "8", "--preemption-mode", "swap"});
  EXPECT_THAT(swap.warnings, ::testing::Not(::testing::Contains(HasSubstr("--swap-space"))));
}

TEST(ReferenceFlags, NoFlagTurnsABooleanOff) {
  EngineConfig cfg;
  cfg.scheduler.multi_step_stream_outputs = true;
  parse_options({"--no-multi-step-stream-outputs", "--enforce-eager", "--no-enforce-eager"}, cfg, {}, false);
  EXPECT_FALSE(cfg.scheduler.multi_step_stream_outputs);
  EXPECT_FALSE(cfg.model.enforce_eager);
  // --no-ui is an option of its own, not "ui" turned off; a --no- of a non-boolean stays unknown.
  parse_options({"--no-ui"}, cfg, {}, false);
  EXPECT_TRUE(cfg.app.no_ui);
  EXPECT_THROW(parse_options({"--no-port"}, cfg, {}, false), Error);
}

}  // namespace
}  // namespace cypris
