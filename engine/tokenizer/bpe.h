// Byte-pair-encoding model shared by the Hugging Face tokenizer.json and GPT-2 vocab/merges
// loaders: merge ranks in an open-addressing hash map, a heap-driven merge per word, and a bounded,
// thread-safe cache of word results.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cypris {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// token -> id, in any order.
using VocabList = std::vector<std::pair<std::string, int32_t>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // where: file name for error messages. Merges name tokens that must be in the vocabulary, in rank
  // order; a merge {line, ""} is a whole "a b" line to split where the vocabulary says (for tokens
  // that contain spaces).
  BpeModel(VocabList vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opts,
           const std::string& where);
  ~BpeModel();

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr for an id the model does not have.
  const std::string* id_to_token(int32_t id) const;
  int32_t size() const { return int32_t(id_to_token_.size()); }
  const BpeOptions& options() const { return opts_; }

 private:
  struct MergeTable;
  struct Cache;
  // token -> id lookup in one flat open-addressing table: two cache misses instead of a node chase.
  int32_t find_token(std::string_view token) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t char_id(std::string_view ch, bool first, bool last) const;

  struct TokenSlot {
    uint64_t hash = 0;  // 0: empty
    int32_t id = -1;
  };
  std::vector<TokenSlot> token_slots_;
  uint64_t token_mask_ = 0;
  std::vector<std::string> id_to_token_;
  std::vector<char> id_present_;
  BpeOptions opts_;
  std::optional<int32_t> unk_id_;
  int32_t byte_ids_[256];             // <0xXX> tokens for byte_fallback, -1 when missing
  std::vector<int32_t> bmp_char_id_;  // single code point tokens below U+10000, -1 when missing
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<Cache> cache_;
  // SentencePiece-style vocabularies with no pre-tokenizer hand whole texts to the model. When no
  // token has U+2581 after another character, merges never cross the start of a "▁" run, so the
  // text can be cut there into cacheable words without changing the result.
  bool split_at_metaspace_ = false;
};

}  // namespace cypris
