// The vocabulary as guided decoding sees it: every token's decoded BYTES (byte-level BPE pieces
// mapped back through GPT-2's byte alphabet; SentencePiece's "▁" as a space and <0xNN> byte
// fallback pieces as that byte), the tokens sorted by their bytes (a token trie flattened in
// depth-first order: neighbours share prefixes, so a walk re-uses the matcher state of the common
// prefix), and the ids that end generation (EOS and friends), allowed exactly when the grammar can end.
// Special (control) tokens and tokens with no bytes are never allowed inside a grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cypris {
class Tokenizer;
}

namespace cypris::guided {

struct TokenVocab {
  int32_t size = 0;                 // mask width: the model's vocabulary (>= the tokenizer's)
  std::vector<std::string> bytes;   // [size]; empty = never allowed by the grammar
  std::vector<int32_t> end_ids;     // allowed when the grammar can end
  std::vector<int32_t> sorted;      // ids with bytes, sorted by bytes
  std::vector<uint16_t> lcp;        // [sorted.size()]: common prefix length with the previous sorted token

  // Sorts and indexes `bytes`; call after filling bytes and end_ids.
  void finalize();
};

// Builds the vocabulary from a tokenizer. model_vocab_size: the logits width (0 = the tokenizer's).
// end_ids: extra ids that end generation (generation_config eos ids); the tokenizer's EOS is added.
std::shared_ptr<const TokenVocab> vocab_from_tokenizer(const Tokenizer& tok, int32_t model_vocab_size,
                                                       std::vector<int32_t> end_ids);

// The GPT-2 byte-level alphabet: byte -> code point of its printable stand-in.
uint32_t byte_level_char(uint8_t b);

}  // namespace cypris::guided
