// EngineClient: the one API every front end (HTTP server, desktop UI, `cypris generate`) uses to
// talk to a loaded model. The AsyncEngine implements it; tests of the front ends use a fake.
// Front ends never touch the scheduler or the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/request/outputs.h"
#include "engine/core/stats.h"

namespace cypris {

struct SamplingParams;
class Tokenizer;

struct GenerateRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::string prompt;  // the text, for request logging only (may be empty)
  std::shared_ptr<const SamplingParams> params;
  int priority = 0;  // --scheduling-policy priority: lower runs first
  // The LoRA adapter to run with, by the name it was loaded under (EngineClient::load_lora); empty:
  // the base model. The engine resolves it when the request is added (an Error if not loaded).
  std::string lora_name;
  // Set by the engine from lora_name: the adapter's slot (-1: none) and its id (never reused, so KV
  // computed under one adapter is never served to another).
  int32_t lora_slot = -1;
  uint64_t lora_id = 0;
};

// A loaded LoRA adapter, as /v1/models lists it.
struct LoraInfo {
  std::string name;
  std::string path;
  uint64_t id = 0;
  int64_t rank = 0;
};

struct ModelInfo {
  std::string model;                      // --model as given
  std::vector<std::string> served_names;  // --served-model-name, else {model}
  int64_t max_model_len = 0;
  bool context_shift = false;  // --context-shift: prompt + max_tokens may exceed max_model_len
  int64_t vocab_size = 0;
  std::string dtype;
  std::string device;  // "cpu" or "cuda"
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;

  // Queues a request. Throws cypris::Error for a request that can never run (prompt plus
  // max_tokens over max_model_len, invalid sampling parameters); the message is for the user.
  virtual std::shared_ptr<RequestStream> submit(GenerateRequest req) = 0;
  // Queues the prompts of one client request together: all of them are accepted or none (the
  // Error of the first that can never run; those queued before it are aborted). Its cost is linear
  // in the number of requests: AsyncEngine hands them all to its engine thread at once, where
  // one submit() each would wait for an engine step each. The default calls submit() in turn.
  virtual std::vector<std::shared_ptr<RequestStream>> submit_all(std::vector<GenerateRequest> reqs) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    streams.reserve(reqs.size());
    try {
      for (auto& r : reqs) streams.push_back(submit(std::move(r)));
    } catch (...) {
      for (auto& s : streams) s->cancel();
      throw;
    }
    return streams;
  }
  virtual void abort(const std::string& request_id) = 0;

  virtual EngineStats stats() const = 0;
  virtual ModelInfo model_info() const = 0;
  // nullptr with --skip-tokenizer-init.
  virtual const Tokenizer* tokenizer() const = 0;

  // LoRA adapters (--enable-lora). load_lora reads the PEFT folder or llama.cpp GGUF LoRA file at
  // path and makes it available under name (any number; --max-loras of them hold device slots at a
  // time, docs/lora.md); throws Error when LoRA is off, the name is taken, or the adapter is
  // malformed or does not fit the model (the message names the file, module and shapes). unload_lora returns false for an unknown name; requests already running with the
  // adapter finish with it, new ones cannot name it.
  virtual bool lora_enabled() const { return false; }
  virtual std::vector<LoraInfo> loras() const { return {}; }
  virtual void load_lora(const std::string& name, const std::string& path) {
    throw Error("LoRA adapters need --enable-lora (cannot load '" + name + "' from " + path + ")");
  }
  virtual bool unload_lora(const std::string& name) { return false; }
};

}  // namespace cypris
