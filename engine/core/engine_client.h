// EngineClient: the one API every front end (HTTP server, desktop UI, `cypris generate`) uses to
// talk to a loaded model. The AsyncEngine implements it; tests of the front ends use a fake.
// Front ends never touch the scheduler or the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
};

}  // namespace cypris
