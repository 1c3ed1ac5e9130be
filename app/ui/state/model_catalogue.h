// The Models panel's "Popular models": a short curated list with a well-known repo of each model
// family the engine runs, so a first start need not begin with a hub search. Choosing an entry is
// the same as picking that repo from the search results (HubSession::select_repo).
#pragma once

#include <string>
#include <vector>

namespace cypris {

struct CatalogueEntry {
  std::string family;        // "Llama 3.1", "Qwen3-MoE", ...
  std::string repo;          // Hugging Face repo id
  std::string architecture;  // as in config.json `architectures` (for a GGUF repo: of the model it holds)
  std::string note;          // one line: size, what it is
  bool gguf = false;         // a repo of GGUF files (a quant file is picked after listing)
};

// The catalogue, in the order the panel shows it.
const std::vector<CatalogueEntry>& model_catalogue();

}  // namespace cypris
