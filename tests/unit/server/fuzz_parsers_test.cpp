// Bounded random-mutation fuzzing of the parsers that read untrusted bytes (issue #20): options
// files (YAML/JSON, also the /v1/model/load body), safetensors headers, HTTP JSON bodies (the
// sampler, Kobold and request-head screens). Each run starts from valid seeds and applies a fixed
// number of seeded mutations (flips, inserts of syntax-heavy tokens, deletions, duplications,
// splices), so CI runs the same inputs every time in a few seconds. The contract checked: every
// input is accepted or refused with the parser's own error type (cypris::Error or HttpError);
// nothing else escapes and nothing crashes, hangs or reads outside the file (a safetensors file
// that opens has every tensor's bytes read). Set CYPRIS_FUZZ_ITERATIONS to run longer locally.
#include <gtest/gtest.h>
#include <httplib.h>

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <typeinfo>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "app/server/connection_guard.h"
#include "app/server/errors.h"
#include "app/server/kobold/kobold_mapping.h"
#include "app/server/openai/sampling_from_json.h"
#include "app/server/router.h"
#include "engine/common/error.h"
#include "engine/config/options.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"
#include "models/registry/registry.h"

namespace cypris {
namespace {

int iterations(int def) {
  const char* e = std::getenv("CYPRIS_FUZZ_ITERATIONS");
  return e ? std::max(1, std::atoi(e)) : def;
}

// Tokens that push parsers into their corners: YAML anchors/aliases/tags, nesting, numbers at
// the edges of every integer type, escapes, NULs.
const std::vector<std::string> kTokens = {
    "&a ", "*a", "!!str ", "!!binary ", "<<: ", "[", "]", "{", "}", ":", ",", "\n", "\n  ", "- ", "\"", "'", "\\u0000",
    "\\ud800", "\\", "#", "?", "|", ">", "~", "null", "true", "-1", "0", "1e400", "-1e400", "NaN", "2147483648",
    "4294967297", "9223372036854775808", "18446744073709551616", "-9223372036854775809", "1.5", std::string(1, '\0'),
    "\xff", "\xc3\x28", "%"};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string mutate(const std::vector<std::string>& seeds) {
    std::string s = seeds[pick(seeds.size())];
    const int rounds = 1 + static_cast<int>(pick(4));
    for (int r = 0; r < rounds; ++r) {
      switch (pick(6)) {
        case 0:  // flip a byte
          if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 + pick(255));
          break;
        case 1:  // insert a token
          s.insert(pick(s.size() + 1), kTokens[pick(kTokens.size())]);
          break;
        case 2: {  // delete a range
          if (s.empty()) break;
          const size_t a = pick(s.size());
          s.erase(a, 1 + pick(std::min<size_t>(16, s.size() - a)));
          break;
        }
        case 3: {  // duplicate a range (nesting, repeated keys)
          if (s.empty()) break;
          const size_t a = pick(s.size());
          const size_t n = 1 + pick(std::min<size_t>(32, s.size() - a));
          s.insert(pick(s.size() + 1), s.substr(a, n));
          break;
        }
        case 4: {  // splice with another seed
          const std::string& o = seeds[pick(seeds.size())];
          const size_t cut = pick(s.size() + 1);
          s = s.substr(0, cut) + o.substr(pick(o.size() + 1));
          break;
        }
        default:  // replace a digit run with an edge number
          for (size_t i = 0; i < s.size(); ++i) {
            if (std::isdigit(static_cast<unsigned char>(s[i])) && pick(3) == 0) {
              size_t j = i;
              while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
              s.replace(i, j - i, kTokens[26 + pick(11)]);
              break;
            }
          }
      }
    }
    return s;
  }

 private:
  size_t pick(size_t n) { return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng_) : 0; }
  std::mt19937_64 rng_;
};

struct Tally {
  int runs = 0, accepted = 0, refused = 0;
};

void report(const char* what, const Tally& t) {
  // Any other outcome (an escaped exception, a crash) has failed the test already.
  std::printf("[fuzz] %s: %d executions, %d accepted, %d refused with a named error\n", what, t.runs, t.accepted,
              t.refused);
  ::testing::Test::RecordProperty(std::string(what) + "_executions", t.runs);
}

TEST(Fuzz, OptionsFilesAndLoadBodies) {
  const std::vector<std::string> seeds = {
      "model: m\nmax-model-len: 300\ndtype: auto\n",
      "{\"model\": \"m\", \"port\": 5, \"api-keys\": [\"a\", \"b\"], \"rope-scaling\": {\"rope_type\": \"linear\"}}",
      "a: &a [x, x]\nb: &b [*a, *a]\nmodel: *b\n",
      "model: m\nserved-model-name:\n  - one\n  - two\ncpu-kvcache-space: 1.5\nnum-gpu-blocks-override: 12\n",
      "model: 'q'\nseed: -1\nmax-num-seqs: 256\nlog-level: info\n"};
  Mutator m(20251125);
  Tally t;
  const int n = iterations(3000);
  for (int i = 0; i < n; ++i) {
    const std::string text = m.mutate(seeds);
    EngineConfig cfg;
    ++t.runs;
    try {
      load_options_text(text, "fuzz", cfg);
      validate_options(cfg);
      ++t.accepted;
    } catch (const Error&) {
      ++t.refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "input " << i << " escaped as " << typeid(e).name() << ": " << e.what() << "\n" << text;
    }
  }
  report("options", t);
}

TEST(Fuzz, ModelConfigJson) {
  const std::vector<std::string> seeds = {
      R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":128,
"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"vocab_size":100,"max_position_embeddings":256,
"eos_token_id":[2,3],"rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":64},
"sliding_window":16,"layer_types":["full_attention","sliding_attention","full_attention","full_attention"]})"};
  Mutator m(7);
  Tally t;
  const int n = iterations(3000);
  for (int i = 0; i < n; ++i) {
    const std::string text = m.mutate(seeds);
    ++t.runs;
    try {
      ModelConfig c = parse_model_config(model_families(), text, "fuzz/config.json");
      // Whatever parses must size its tables sanely.
      EXPECT_LE(c.max_model_len, kMaxPositions);
      ++t.accepted;
    } catch (const Error&) {
      ++t.refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "input " << i << " escaped as " << typeid(e).name() << ": " << e.what() << "\n" << text;
    }
  }
  report("model_config", t);
}

TEST(Fuzz, SafetensorsHeaders) {
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / ("cypris_fuzz_" + std::to_string(::getpid()) + ".safetensors");
  const std::string data(64, '\x11');
  const std::vector<std::string> seeds = {
      R"({"a":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]},"b":{"dtype":"BF16","shape":[16],"data_offsets":[32,64]},"__metadata__":{"format":"pt"}})",
      R"({"w":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}})"};
  Mutator m(99);
  Tally t;
  const int n = iterations(800);  // each writes a file: keep the run to a couple of seconds
  for (int i = 0; i < n; ++i) {
    const std::string header = m.mutate(seeds);
    uint64_t len = header.size();
    if (i % 10 == 0) len ^= uint64_t{1} << (i % 64);  // sometimes a lying length prefix
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      for (int b = 0; b < 8; ++b) out.put(static_cast<char>((len >> (8 * b)) & 0xff));
      out << header << data;
    }
    ++t.runs;
    try {
      SafetensorsFile f(path);
      // Touch every byte each tensor claims: out-of-file offsets would fault here.
      unsigned sum = 0;
      for (const auto& [name, tensor] : f.tensors()) {
        const auto* p = static_cast<const unsigned char*>(tensor.data);
        for (size_t k = 0; k < tensor.nbytes; ++k) sum += p[k];
        EXPECT_LE(tensor.nbytes, data.size());
      }
      (void)sum;
      ++t.accepted;
    } catch (const Error&) {
      ++t.refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "input " << i << " escaped as " << typeid(e).name() << ": " << e.what() << "\n" << header;
    }
  }
  fs::remove(path);
  report("safetensors", t);
}

TEST(Fuzz, HttpJsonBodiesAndHeads) {
  const std::vector<std::string> seeds = {
      R"({"prompt":"hello","max_tokens":16,"temperature":0.7,"top_k":40,"logit_bias":{"5":1.5},"stop":["\n"],"n":2})",
      R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":2,"logprobs":true,"seed":-1,"dry_sequence_breakers":"[\"\\n\"]"})",
      R"({"prompt":"x","max_length":80,"max_context_length":512,"rep_pen":1.1,"sampler_order":[6,0,1,3,4,2,5],"genkey":"K1","dynatemp_range":0.5})",
      R"({"prompt":[1,2,3],"best_of":3,"use_beam_search":true,"min_p":0.1,"mirostat_mode":2,"custom_token_bans":[1,2]})"};
  const std::vector<std::string> heads = {
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nContent-Type: application/json",
      "GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", "TRACE / HTTP/1.1\r\ncontent-length:  7 "};
  Mutator m(42);
  Tally t;
  const int n = iterations(6000);
  for (int i = 0; i < n; ++i) {
    httplib::Request req;
    req.body = m.mutate(seeds);
    ++t.runs;
    try {
      const nlohmann::json body = server::parse_json_body(req);
      try {
        SamplingParams p = server::sampling_from_json(body, server::SamplingDefaults{});
        p.validate(20, 32000);
      } catch (const Error&) {
      }
      server::kobold_request_from_json(body, 80, 512);
      ++t.accepted;
    } catch (const server::HttpError&) {
      ++t.refused;
    } catch (const Error&) {
      ++t.refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "input " << i << " escaped as " << typeid(e).name() << ": " << e.what() << "\n" << req.body;
    }
    std::string why;
    const std::string head = m.mutate(heads);
    const int status = server::screen_request_head(head, size_t{32} << 20, why);
    EXPECT_TRUE(status == 0 || ((status == 400 || status == 405 || status == 413) && !why.empty())) << head;
    (void)server::head_frames_body(head);
  }
  report("http_json", t);
}

}  // namespace
}  // namespace cypris
