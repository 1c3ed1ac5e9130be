#include "tests/support/fake_tokenizer.h"

#include "engine/common/error.h"

namespace cypris::fake {

FakeTokenizer::FakeTokenizer() {
  for (const char* s : {"<pad>", "<s>", "</s>"}) id_of(s);
}

int32_t FakeTokenizer::id_of(const std::string& piece) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(piece);
  if (it != ids_.end()) return it->second;
  CYPRIS_CHECK(static_cast<int32_t>(pieces_.size()) < kVocabSize, "fake tokenizer: vocabulary full");
  const int32_t id = static_cast<int32_t>(pieces_.size());
  pieces_.push_back(piece);
  ids_[piece] = id;
  return id;
}

std::vector<int32_t> FakeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens) out.push_back(1);
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && text[j] == ' ') ++j;
    while (j < text.size() && text[j] != ' ') ++j;
    out.push_back(id_of(std::string(text.substr(i, j - i))));
    i = j;
  }
  return out;
}

std::string FakeTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens, bool) const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (int32_t id : ids) {
    if (skip_special_tokens && id >= 0 && id <= 2) continue;
    if (id >= 0 && static_cast<size_t>(id) < pieces_.size()) out += pieces_[static_cast<size_t>(id)];
  }
  return out;
}

std::string FakeTokenizer::id_to_piece(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return "";
  return pieces_[static_cast<size_t>(id)];
}

std::optional<int32_t> FakeTokenizer::piece_to_id(std::string_view piece) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(std::string(piece));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace cypris::fake
