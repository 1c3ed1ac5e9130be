// The request the LoRA tests compare with a fixture's reference greedy continuation: the first 12
// prompt ids, 8 tokens at temperature 0 with EOS ignored, on one adapter ("" for the base model).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/engine_client.h"
#include "engine/request/sampling_params.h"

namespace cypris::testing_support {

inline GenerateRequest reference_greedy_request(const std::string& id, const std::vector<int32_t>& ids,
                                                const std::string& lora_name) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_token_ids.assign(ids.begin(), ids.begin() + 12);
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = 8;
  p->ignore_eos = true;
  r.params = p;
  r.lora_name = lora_name;
  return r;
}

}  // namespace cypris::testing_support
