// The Chat panel's controller: sends the transcript through the chat template to the engine on a
// worker, streams the reply back into the transcript through the UiQueue, and stops, regenerates
// and reports errors (a failed request shows its message in the reply, never crashes the app).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/chat_transcript.h"
#include "app/ui/state/sampler_table.h"
#include "app/ui/state/services.h"
#include "app/ui/state/structured_output.h"
#include "app/ui/state/ui_queue.h"

namespace cypris {

class EngineClient;
class RequestStream;

class ChatSession {
 public:
  // now_s: a monotonic clock in seconds (tests pass a fake one).
  ChatSession(AppServices& services, UiQueue& queue, BackgroundJobs& jobs, std::function<double()> now_s);

  ChatTranscript& transcript() { return transcript_; }
  const ChatTranscript& transcript() const { return transcript_; }
  SamplerSettings& samplers() { return samplers_; }
  // Checks samplers().structured() (the panel polls it every frame; send() validates it now). A
  // valid field goes into the request as its guided-decoding fields; an invalid one does not stop
  // the message: it is sent without the grammar and last_error() says so.
  StructuredOutputValidator& structured_check() { return structured_check_; }

  // Adds the user's text and starts the reply. Returns false with a reason in last_error() when
  // there is no engine, the text is empty or a reply is already streaming. Returns true with a
  // warning in last_error() when the structured-output field is invalid and was left out.
  bool send(const std::shared_ptr<EngineClient>& engine, const std::string& text);
  // Answers the last user message again (dropping the previous answer).
  bool regenerate(const std::shared_ptr<EngineClient>& engine);
  // Stops the reply being generated (Esc). The partial reply stays, marked stopped.
  void stop();
  const std::string& last_error() const { return last_error_; }
  // The LoRA adapter this chat's requests run with, by the name it was loaded under (Models panel);
  // empty: the base model. It goes into the request as its "model", as an OpenAI request names its
  // adapter; an adapter unloaded since fails the reply with the engine's message.
  void set_adapter(std::string name) { adapter_ = std::move(name); }
  const std::string& adapter() const { return adapter_; }

 private:
  bool start_reply(const std::shared_ptr<EngineClient>& engine);

  AppServices& services_;
  UiQueue& queue_;
  BackgroundJobs& jobs_;
  std::function<double()> now_s_;
  ChatTranscript transcript_;
  SamplerSettings samplers_;
  StructuredOutputValidator structured_check_;
  std::string last_error_;
  std::string adapter_;
  uint64_t next_id_ = 1;
  // The stream of the reply in flight; the worker sets it, stop() cancels it.
  struct InFlight {
    std::mutex mu;
    std::shared_ptr<RequestStream> stream;
    bool stop_requested = false;
  };
  std::shared_ptr<InFlight> in_flight_;
};

}  // namespace cypris
