// SentencePiece tokenizer.model via libsentencepiece: the library encodes; decoding uses the same
// decoder chain as Llama's tokenizer.json ("▁" -> " ", byte pieces, strip one leading space) so the
// two files of one model decode alike and stream exactly.
#include <sentencepiece_processor.h>

#include "engine/common/error.h"
#include "engine/tokenizer/tokenizer_base.h"

namespace cypris {
namespace {

class SentencePieceTokenizer : public TokenizerBase {
 public:
  explicit SentencePieceTokenizer(const std::filesystem::path& file) : where_(file.string()) {
    auto status = sp_.Load(file.string());
    CYPRIS_CHECK(status.ok(), "{}: not a valid SentencePiece model: {}", where_, status.ToString());
    init();
  }
  // A serialized ModelProto (a GGUF `llama` vocabulary turned into one); where names its source.
  SentencePieceTokenizer(const std::string& proto, std::string where) : where_(std::move(where)) {
    auto status = sp_.LoadFromSerializedProto(proto);
    CYPRIS_CHECK(status.ok(), "{}: the vocabulary is not a valid SentencePiece model: {}", where_, status.ToString());
    init();
  }
  void init() {
    int n = sp_.GetPieceSize();
    CYPRIS_CHECK(n > 0, "{}: the SentencePiece model has no pieces", where_);
    std::vector<std::string> pieces(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) pieces[i] = sp_.IdToPiece(i);
    chunkable_ = can_chunk(pieces);
    init_vocab(std::move(pieces), n);
  }
  const sentencepiece::SentencePieceProcessor& sp() const { return sp_; }

 protected:
  void encode_model(std::string_view text, bool, std::vector<int32_t>& out) const override {
    if (!chunkable_ || text.size() <= kChunk) {
      encode_sp(text, out);
      return;
    }
    // Cut before a space that follows a non-space, and drop that one space: SentencePiece's dummy
    // prefix puts the "▁" back, so each chunk is encoded exactly as inside the whole text.
    size_t start = 0;
    while (start < text.size()) {
      size_t cut = text.size();
      for (size_t p = start + kChunk; p < text.size(); ++p) {
        if (text[p] == ' ' && text[p - 1] != ' ') {
          cut = p;
          break;
        }
      }
      std::string_view chunk = text.substr(start, cut - start);
      if (start > 0) chunk.remove_prefix(1);
      encode_sp(chunk, out);
      start = cut;
    }
  }
  std::optional<int32_t> model_token_to_id(std::string_view piece) const override {
    int id = sp_.PieceToId(piece);
    // PieceToId answers unk_id for unknown pieces; only the unk piece itself maps there.
    if (id == sp_.unk_id() && sp_.IdToPiece(id) != piece) return std::nullopt;
    return id;
  }

 private:
  static constexpr size_t kChunk = 2048;

  void encode_sp(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    auto status = sp_.Encode(text, &ids);
    CYPRIS_CHECK(status.ok(), "{}: SentencePiece could not encode the text: {}", where_, status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // SentencePiece's BPE slows down more than linearly on long inputs, so long texts are encoded in
  // chunks where that provably changes nothing: the model adds a dummy "▁" prefix, keeps runs of
  // spaces, and no piece has "▁" after another character (so no piece spans a cut).
  bool can_chunk(const std::vector<std::string>& pieces) const {
    static const std::string kMeta = "\xE2\x96\x81";
    std::vector<std::string> probe;
    if (!sp_.Encode("a  b", &probe).ok()) return false;
    std::string joined;
    for (const auto& p : probe) joined += p;
    if (joined != kMeta + "a" + kMeta + kMeta + "b") return false;
    for (const auto& piece : pieces) {
      for (size_t p = piece.find(kMeta, 1); p != std::string::npos; p = piece.find(kMeta, p + 3))
        if (p < 3 || piece.compare(p - 3, 3, kMeta) != 0) return false;
    }
    return true;
  }

  std::string where_;
  bool chunkable_ = false;
  sentencepiece::SentencePieceProcessor sp_;
};

std::unique_ptr<Tokenizer> finish_sentencepiece(std::unique_ptr<SentencePieceTokenizer> tok, const TokenizerConfig& cfg) {
  const auto& sp = tok->sp();
  // Control and unknown pieces (<s>, </s>, <unk>) are special tokens, recognised in text.
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    if (sp.IsControl(i) || sp.IsUnknown(i)) tok->add_token({i, sp.IdToPiece(i), true, false, false, false, false});
  }
  TokenizerConfig c = cfg;
  // Without a config, the model's own BOS/EOS/UNK pieces name the special tokens.
  auto piece = [&](int id) -> std::optional<std::string> {
    if (id < 0 || id >= sp.GetPieceSize()) return std::nullopt;
    return sp.IdToPiece(id);
  };
  if (!c.bos_token) c.bos_token = piece(sp.bos_id());
  if (!c.eos_token) c.eos_token = piece(sp.eos_id());
  if (!c.unk_token) c.unk_token = piece(sp.unk_id());
  tok->apply_config(c);
  std::vector<int32_t> prefix, suffix;
  if (c.add_bos_token.value_or(true) && tok->bos_id()) prefix.push_back(*tok->bos_id());
  if (c.add_eos_token.value_or(false) && tok->eos_id()) suffix.push_back(*tok->eos_id());
  tok->set_post_processor(hf::make_affix_post_processor(std::move(prefix), std::move(suffix)));
  tok->set_decoder(hf::make_sentencepiece_decoder());
  tok->set_slow_decode(true);
  tok->finalize();
  return tok;
}

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& file, const TokenizerConfig& cfg) {
  return finish_sentencepiece(std::make_unique<SentencePieceTokenizer>(file), cfg);
}

std::unique_ptr<Tokenizer> load_sentencepiece_proto(const std::string& proto, const std::string& where,
                                                    const TokenizerConfig& cfg) {
  return finish_sentencepiece(std::make_unique<SentencePieceTokenizer>(proto, where), cfg);
}

}  // namespace cypris
