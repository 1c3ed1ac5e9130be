// A tiny word-level Tokenizer for front-end tests: a token is a run of spaces followed by a run of
// non-space characters (so decode(encode(s)) == s), ids are handed out on first sight. Ids 0, 1, 2
// are <pad>, <s> (BOS) and </s> (EOS). Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace cypris::fake {

class FakeTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kVocabSize = 32000;
  FakeTokenizer();

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true,
                     bool spaces_between_special_tokens = true) const override;
  int32_t vocab_size() const override { return kVocabSize; }
  std::string id_to_piece(int32_t id) const override;
  std::optional<int32_t> piece_to_id(std::string_view piece) const override;
  bool is_special(int32_t id) const override { return id >= 0 && id <= 2; }
  std::optional<int32_t> bos_id() const override { return 1; }
  std::optional<int32_t> eos_id() const override { return 2; }
  std::optional<int32_t> pad_id() const override { return 0; }
  std::optional<int32_t> unk_id() const override { return std::nullopt; }
  std::string bos_token() const override { return "<s>"; }
  std::string eos_token() const override { return "</s>"; }
  const std::vector<NamedChatTemplate>& chat_templates() const override { return templates_; }
  std::optional<int64_t> model_max_length() const override { return std::nullopt; }

  // The id of one piece, registering it when new.
  int32_t id_of(const std::string& piece) const;

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::string> pieces_;
  mutable std::map<std::string, int32_t> ids_;
  std::vector<NamedChatTemplate> templates_;
};

}  // namespace cypris::fake
