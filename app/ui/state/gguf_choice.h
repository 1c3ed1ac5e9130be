// The GGUF files of a hub repo as the Models panel offers them: one entry per model file (the
// parts of a split model joined), with its quantization type read from the file name and its
// total size, and the files to download when one is picked (only that one, all its parts).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "app/ui/state/services.h"

namespace cypris {

struct GgufChoice {
  std::string path;   // the file to load: the file itself, or part 1 of a split model
  std::string quant;  // "Q4_K_M", "Q8_0", "F16", ... ("" when the name does not say)
  int64_t size = 0;   // bytes of all parts; -1 when the hub did not give every size
  int parts = 1;
  std::vector<std::string> files;  // every part, in order
};

// The GGUF files of a listing, sorted by size (smallest first).
std::vector<GgufChoice> gguf_choices(const std::vector<HubFile>& files);
// llama.cpp's quantization name in a file name ("Llama-3.2-1B-Instruct-Q4_K_M.gguf" -> "Q4_K_M").
std::string gguf_quant_from_name(const std::string& file_name);
// The entry a repo offers first: Q4_K_M when present (the most common pick), else the smallest
// entry of 4 bits or more, else the first. -1 when there is none.
int default_gguf_choice(const std::vector<GgufChoice>& choices);

}  // namespace cypris
