// A deterministic fake EngineClient for front-end tests (HTTP server, bench client).
// Output k (0-based) of choice i is the word " t<k>" for choice 0 and " c<i>t<k>" for the others,
// one token per engine step (every token_delay). It honours max_tokens (else the rest of
// max_model_len; finish_reason "length"), stop strings (finish_reason "stop", stop_reason the
// string, the string itself left out unless include_stop_str_in_output), stop_token_ids, n,
// logprobs (each token logprob -0.5; the top list is the token then ids+1.. at -1.5, -2.5, ...),
// prompt_logprobs, and abort (recorded in aborted()). A prompt containing "FAIL_NOW" ends with an
// error output after its first token; one containing "CLIENT_FAIL" ends likewise with an error the
// request's parameters caused ("banned_strings: ...", RequestOutput::client_error). submit() throws cypris::Error when
// prompt + max_tokens exceeds max_model_len, with the engine's message.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/engine_client.h"
#include "tests/support/fake_tokenizer.h"

namespace cypris::fake {

struct FakeEngineOptions {
  int64_t max_model_len = 512;
  std::chrono::microseconds token_delay{500};
  // Time before a request's first token (a long prefill).
  std::chrono::milliseconds first_token_delay{0};
  std::vector<std::string> served_names = {"fake-model"};
  bool with_tokenizer = true;
  // Served instead of the word-level fake (for /v1/tokenize and chat templates); generation still
  // produces the fake words.
  std::shared_ptr<const Tokenizer> tokenizer;
  // --enable-lora: load_lora reads the adapter folder with the real loader (so a bad folder is
  // refused as the engine would refuse it) and lists it; requests may then name it.
  bool lora = false;
};

class FakeEngine : public EngineClient {
 public:
  explicit FakeEngine(FakeEngineOptions opts = {});
  ~FakeEngine() override;

  std::shared_ptr<RequestStream> submit(GenerateRequest req) override;
  // Counted (submit_all_calls()), then submit() for each.
  std::vector<std::shared_ptr<RequestStream>> submit_all(std::vector<GenerateRequest> reqs) override;
  void abort(const std::string& request_id) override;
  EngineStats stats() const override;
  ModelInfo model_info() const override;
  const Tokenizer* tokenizer() const override;
  bool lora_enabled() const override { return opts_lora_; }
  std::vector<LoraInfo> loras() const override;
  void load_lora(const std::string& name, const std::string& path) override;
  bool unload_lora(const std::string& name) override;

  // Ids of the requests aborted while they were running, in order.
  std::vector<std::string> aborted() const;
  // Every request submitted so far (copies).
  std::vector<GenerateRequest> submitted() const;
  size_t num_submitted() const;
  // How many times submit_all() was called.
  int submit_all_calls() const;
  // Waits (up to timeout) until an abort of a request id starting with prefix is recorded.
  bool wait_for_abort(const std::string& prefix, std::chrono::milliseconds timeout) const;

  // The text choice i would produce for k tokens, without stop strings.
  static std::string expected_text(int choice, int num_tokens);
  static std::string word(int choice, int k);

  struct Core;

 private:
  std::shared_ptr<Core> core_;
  bool opts_lora_ = false;
  mutable std::mutex lora_mu_;
  std::vector<LoraInfo> loras_;
};

}  // namespace cypris::fake
