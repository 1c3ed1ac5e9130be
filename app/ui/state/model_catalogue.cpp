#include "app/ui/state/model_catalogue.h"

namespace cypris {

const std::vector<CatalogueEntry>& model_catalogue() {
  // Every architecture here must be one models/registry supports, and every supported family
  // must have an entry (tests/unit/ui_state/model_catalogue_test.cpp checks both).
  static const std::vector<CatalogueEntry> kEntries = {
      {"Llama 3.1", "meta-llama/Llama-3.1-8B-Instruct", "LlamaForCausalLM", "8B chat model (gated: accept the licence)",
       false},
      {"Mistral", "mistralai/Mistral-7B-Instruct-v0.3", "MistralForCausalLM", "7B chat model", false},
      {"Qwen2.5", "Qwen/Qwen2.5-7B-Instruct", "Qwen2ForCausalLM", "7B chat model, 128K context", false},
      {"Qwen3", "Qwen/Qwen3-8B", "Qwen3ForCausalLM", "8B chat model with thinking mode", false},
      {"Qwen3-MoE", "Qwen/Qwen3-30B-A3B", "Qwen3MoeForCausalLM", "30B mixture of experts, 3B active", false},
      {"Qwen1.5-MoE", "Qwen/Qwen1.5-MoE-A2.7B-Chat", "Qwen2MoeForCausalLM",
       "14B mixture of experts with a shared expert, 2.7B active", false},
      {"Mixtral", "mistralai/Mixtral-8x7B-Instruct-v0.1", "MixtralForCausalLM", "47B mixture of experts, 13B active",
       false},
      {"Phi-3.5", "microsoft/Phi-3.5-mini-instruct", "Phi3ForCausalLM", "3.8B chat model, 128K context", false},
      {"Phi-4", "microsoft/phi-4", "Phi3ForCausalLM", "14B chat model", false},
      {"Gemma 2", "google/gemma-2-9b-it", "Gemma2ForCausalLM", "9B chat model (gated: accept the licence)", false},
      {"Gemma 3", "google/gemma-3-12b-it", "Gemma3ForConditionalGeneration",
       "12B chat model, text only here (gated: accept the licence)", false},
      {"Gemma 3", "google/gemma-3-1b-it", "Gemma3ForCausalLM", "1B text model (gated: accept the licence)", false},
      {"Command-R", "CohereForAI/c4ai-command-r-v01", "CohereForCausalLM", "35B chat and RAG model", false},
      {"Command-R7B", "CohereForAI/c4ai-command-r7b-12-2024", "Cohere2ForCausalLM", "7B chat and RAG model", false},
      {"Llama 3.1 (GGUF)", "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "LlamaForCausalLM",
       "8B chat model, llama.cpp quants (pick one)", true},
      {"Qwen2.5 (GGUF)", "Qwen/Qwen2.5-7B-Instruct-GGUF", "Qwen2ForCausalLM", "7B chat model, official quants (pick one)",
       true},
      {"Qwen3 (GGUF)", "Qwen/Qwen3-8B-GGUF", "Qwen3ForCausalLM", "8B chat model, official quants (pick one)", true},
      {"Qwen3-MoE (GGUF)", "Qwen/Qwen3-30B-A3B-GGUF", "Qwen3MoeForCausalLM",
       "30B mixture of experts, 3B active; Q4_K_M fits 24 GB", true},
      {"Gemma 2 (GGUF)", "bartowski/gemma-2-9b-it-GGUF", "Gemma2ForCausalLM", "9B chat model, llama.cpp quants", true},
      {"Gemma 3 (GGUF)", "bartowski/google_gemma-3-12b-it-GGUF", "Gemma3ForCausalLM",
       "12B chat model (text), llama.cpp quants", true},
      {"Phi-4 (GGUF)", "bartowski/phi-4-GGUF", "Phi3ForCausalLM", "14B chat model, llama.cpp quants", true},
      {"Mixtral (GGUF)", "TheBloke/Mixtral-8x7B-Instruct-v0.1-GGUF", "MixtralForCausalLM",
       "47B mixture of experts, llama.cpp quants", true},
  };
  return kEntries;
}

}  // namespace cypris
