// TEMPORARY (the lead deletes this file at merge): a weak load_tokenizer so this branch links
// before the tokenizer module lands. It always reports that no tokenizer is available.
#include "engine/common/error.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris {

__attribute__((weak)) std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir,
                                                                const TokenizerOptions&) {
  CYPRIS_FAIL("{}: no tokenizer implementation in this build", dir.string());
}

}  // namespace cypris
