// The tokenizer a GGUF file carries: stories260k's `llama` vocabulary (written by llama.cpp's
// converter) encodes and decodes like stories260k's own tokenizer.json and reproduces the prompts
// and the published story of testdata/gguf/refs; `gpt2` vocabularies built from the Qwen2, Llama 3
// and GPT-2 test tokenizers (vocab, merges, token types, tokenizer.ggml.pre) give the reference
// ids of their cases.jsonl; special ids, add_bos and chat templates come from the metadata.
#include "engine/tokenizer/gguf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "tests/support/gguf_writer.h"
#include "tests/unit/tokenizer/tokenizer_test_util.h"

namespace cypris {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

const fs::path kGguf = fs::path(CYPRIS_TESTDATA_DIR) / "gguf";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<Tokenizer> from_bytes(const std::string& bytes) {
  GgufModel m(std::make_unique<GgufFile>("mem.gguf", bytes.data(), bytes.size()));
  return load_gguf_tokenizer(m);
}

const std::vector<std::string> kTexts = {
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park.",
    " leading space and  two  spaces",
    "Numbers 12345 and ünïcödé — dashes…",
    "emoji 🤗 bytes",
    "line\nbreaks\n\nand\ttabs",
    "",
};

TEST(GgufTokenizer, Stories260kEncodesAndDecodesLikeItsTokenizerJson) {
  auto g = load_tokenizer(kGguf / "stories260k-F32.gguf");
  auto hf = load_tokenizer(fs::path(CYPRIS_TESTDATA_DIR) / "models" / "stories260k");
  EXPECT_EQ(g->vocab_size(), 512);
  EXPECT_EQ(g->bos_id(), 1);
  EXPECT_EQ(g->eos_id(), 2);
  EXPECT_EQ(g->unk_id(), 0);
  EXPECT_EQ(g->bos_token(), "<s>");
  EXPECT_EQ(g->eos_token(), "</s>");
  EXPECT_TRUE(g->chat_templates().empty());
  for (const auto& t : kTexts) {
    SCOPED_TRACE(t);
    EXPECT_EQ(g->encode(t, true), hf->encode(t, true));
    EXPECT_EQ(g->encode(t, false), hf->encode(t, false));
    const auto ids = hf->encode(t, true);
    EXPECT_EQ(g->decode(ids), hf->decode(ids));
  }
  for (int32_t id = 0; id < 512; ++id) EXPECT_EQ(g->id_to_piece(id), hf->id_to_piece(id)) << id;
  // CONTROL tokens written in the text are the special tokens, as in llama.cpp (parse_special) and
  // Cypris's tokenizer.model loader; stories260k's tokenizer.json does not list them as added tokens.
  const auto ids = g->encode("<s>x</s>", false);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
}

TEST(GgufTokenizer, Stories260kGivesLlamaCppsPromptsAndStory) {
  auto tok = load_tokenizer(kGguf / "stories260k-Q8_0.gguf");
  const json ref = read_json(kGguf / "refs" / "stories260k-F32.json");
  // The 6-token prompt: its text encodes back to the same ids, BOS first (add_bos).
  const auto prompt = ref["prompts"][1].get<std::vector<int32_t>>();
  const std::string text = tok->decode(prompt);
  EXPECT_EQ(tok->encode(text, true), prompt) << text;
  // llama.cpp's greedy continuation spells the published story.
  const auto greedy = ref["greedy"].get<std::vector<int32_t>>();
  const std::string story = tok->decode(greedy);
  const std::string expected =
      read_text(fs::path(CYPRIS_TESTDATA_DIR) / "models" / "stories260k" / "expected_greedy_200_from_bos.txt");
  ASSERT_GT(story.size(), 40u);
  EXPECT_EQ(expected.substr(0, story.size()), story);
  EXPECT_THAT(story, ::testing::StartsWith("Once upon a time, there was a little girl named Lily."));
}

// A GGUF `gpt2` vocabulary made from a test tokenizer's tokenizer.json, the way llama.cpp's
// converter writes one: tokens by id, CONTROL for special added tokens, USER_DEFINED for others.
std::string gpt2_gguf(const std::string& name, const std::string& pre, std::optional<int> bos, bool add_bos) {
  const json j = read_json(testing::tokenizer_dir(name) / "tokenizer.json");
  std::map<int, std::pair<std::string, int>> by_id;  // id -> (text, type)
  for (const auto& [text, id] : j["model"]["vocab"].items()) by_id[id.get<int>()] = {text, 1};
  for (const auto& a : j["added_tokens"]) by_id[a["id"].get<int>()] = {a["content"], a["special"].get<bool>() ? 3 : 4};
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (const auto& [id, tt] : by_id) {
    EXPECT_EQ(id, static_cast<int>(tokens.size()));
    tokens.push_back(tt.first);
    types.push_back(tt.second);
  }
  std::vector<std::string> merges;
  for (const auto& m : j["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  test::GgufWriter w;
  w.kv_str("tokenizer.ggml.model", "gpt2");
  w.kv_str("tokenizer.ggml.pre", pre);
  w.kv_strs("tokenizer.ggml.tokens", tokens);
  w.kv_i32s("tokenizer.ggml.token_type", types);
  w.kv_strs("tokenizer.ggml.merges", merges);
  if (bos) w.kv_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos));
  w.kv_bool("tokenizer.ggml.add_bos_token", add_bos);
  w.kv_str("tokenizer.chat_template", "{{ messages[0]['content'] }}");
  return w.bytes();
}

TEST(GgufTokenizer, Gpt2VocabulariesGiveTheReferenceIds) {
  struct Case {
    const char* name;
    const char* pre;
  };
  for (const Case c : {Case{"qwen2-bpe", "qwen2"}, Case{"llama3-bpe", "llama-bpe"}, Case{"gpt2-bpe", "gpt-2"}}) {
    SCOPED_TRACE(c.name);
    const std::string bytes = gpt2_gguf(c.name, c.pre, std::nullopt, false);
    auto tok = from_bytes(bytes);
    const Tokenizer& ref = testing::cached_tokenizer(c.name);
    for (const auto& tc : testing::load_cases(c.name)) {
      EXPECT_EQ(tok->encode(tc.text, false), tc.ids) << "text: '" << tc.text << "'";
      EXPECT_EQ(tok->decode(tc.ids, false), ref.decode(tc.ids, false)) << "text: '" << tc.text << "'";
    }
    ASSERT_EQ(tok->chat_templates().size(), 1u);
    EXPECT_EQ(tok->chat_templates()[0].source, "{{ messages[0]['content'] }}");
  }
}

// Llama 2's tokenizer.model pieces (text, score, type) as llama.cpp's converter writes them into
// a `llama` vocabulary: the reference ids of its cases.jsonl (byte fallback included).
struct SpmPiece {
  std::string text;
  float score = 0;
  int32_t type = 1;
};
uint64_t varint(const std::string& b, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < b.size(); shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b[i++]);
    v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (c < 0x80) break;
  }
  return v;
}
std::vector<SpmPiece> read_spm_pieces(const fs::path& model) {
  const std::string b = read_text(model);
  std::vector<SpmPiece> out;
  for (size_t i = 0; i < b.size();) {
    const uint64_t key = varint(b, i);
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (wire == 0) {
      varint(b, i);
      continue;
    }
    if (wire == 5) {
      i += 4;
      continue;
    }
    if (wire == 1) {
      i += 8;
      continue;
    }
    const size_t len = varint(b, i);
    const std::string sub = b.substr(i, len);
    i += len;
    if (field != 1) continue;  // ModelProto.pieces
    SpmPiece p;
    for (size_t j = 0; j < sub.size();) {
      const uint64_t k = varint(sub, j);
      if ((k & 7) == 2) {
        const size_t l = varint(sub, j);
        p.text = sub.substr(j, l);
        j += l;
      } else if ((k & 7) == 5) {
        std::memcpy(&p.score, sub.data() + j, 4);
        j += 4;
      } else {
        p.type = static_cast<int32_t>(varint(sub, j));
      }
    }
    out.push_back(p);
  }
  return out;
}

TEST(GgufTokenizer, Llama2VocabularyGivesTheReferenceIds) {
  const auto pieces = read_spm_pieces(testing::tokenizer_dir("llama2-spm") / "tokenizer.model");
  ASSERT_EQ(pieces.size(), 32000u);
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const auto& p : pieces) {
    tokens.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(p.type);
  }
  test::GgufWriter w;
  w.kv_llama_vocab(tokens, scores, types);
  auto tok = from_bytes(w.bytes());
  const Tokenizer& ref = testing::cached_tokenizer("llama2-spm");
  for (const auto& c : testing::load_cases("llama2-spm")) {
    EXPECT_EQ(tok->encode(c.text, false), c.ids) << "text: '" << c.text << "'";
    EXPECT_EQ(tok->encode(c.text, true), ref.encode(c.text, true)) << "text: '" << c.text << "'";
    EXPECT_EQ(tok->decode(c.ids), ref.decode(c.ids)) << "text: '" << c.text << "'";
  }
}

TEST(GgufTokenizer, SpecialTokensAndAddBosComeFromTheMetadata) {
  // Llama 3: <|begin_of_text|> is 128000, a CONTROL token recognised in text.
  auto tok = from_bytes(gpt2_gguf("llama3-bpe", "llama-bpe", 128000, true));
  EXPECT_EQ(tok->bos_id(), 128000);
  EXPECT_EQ(tok->bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{128000, 9906, 1917}));
  EXPECT_EQ(tok->encode("Hello world", false), (std::vector<int32_t>{9906, 1917}));
  EXPECT_EQ(tok->encode("<|begin_of_text|>Hello", false), (std::vector<int32_t>{128000, 9906}));
  EXPECT_TRUE(tok->is_special(128000));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{128000, 9906}, true), "Hello");
}

TEST(GgufTokenizer, BadVocabulariesAreErrorsNamingTheKey) {
  test::GgufWriter none;
  none.kv_str("general.architecture", "llama");
  try {
    from_bytes(none.bytes());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("mem.gguf: the file has no tokenizer"));
  }
  test::GgufWriter kind;
  kind.kv_str("tokenizer.ggml.model", "rwkv");
  kind.kv_strs("tokenizer.ggml.tokens", {"a"});
  EXPECT_THAT([&] {
    try {
      from_bytes(kind.bytes());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }(), HasSubstr("tokenizer model 'rwkv' (tokenizer.ggml.model) is not supported; supported: llama, gpt2"));
  test::GgufWriter pre;
  pre.kv_str("tokenizer.ggml.model", "gpt2");
  pre.kv_str("tokenizer.ggml.pre", "martian");
  pre.kv_strs("tokenizer.ggml.tokens", {"a", "b", "ab"});
  pre.kv_strs("tokenizer.ggml.merges", {"a b"});
  try {
    from_bytes(pre.bytes());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'tokenizer.ggml.pre' is 'martian'; supported pre-tokenizers: default"));
  }
  test::GgufWriter scores;
  scores.kv_str("tokenizer.ggml.model", "llama");
  scores.kv_strs("tokenizer.ggml.tokens", {"<unk>", "a"});
  scores.kv_f32s("tokenizer.ggml.scores", {0.0f});
  try {
    from_bytes(scores.bytes());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'tokenizer.ggml.scores' has 1 entries for 2 tokens"));
  }
  test::GgufWriter bos;
  bos.kv_str("tokenizer.ggml.model", "llama");
  bos.kv_strs("tokenizer.ggml.tokens", {"<unk>", "a"});
  bos.kv_u32("tokenizer.ggml.bos_token_id", 7);
  try {
    from_bytes(bos.bytes());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'tokenizer.ggml.bos_token_id' is 7, outside the vocabulary of 2 tokens"));
  }
}

}  // namespace
}  // namespace cypris
