// FakeServices and FakeEngineClient; see fake_services.h.
#include "tests/support/fake_services.h"

#include <stdexcept>
#include <thread>

namespace cypris::fake {

std::shared_ptr<RequestStream> FakeEngineClient::submit(GenerateRequest req) {
  return std::make_shared<RequestStream>(req.request_id);
}

void FakeEngineClient::abort(const std::string& request_id) {
  aborted_.push_back(request_id);
}

std::shared_ptr<EngineClient> FakeServices::load_engine(const EngineConfig& cfg,
                                                        const std::function<void(const LoadProgress&)>& progress,
                                                        const std::atomic<bool>& cancel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    load_calls.push_back(cfg);
  }
  for (const auto& p : load_steps) {
    if (cancel) throw std::runtime_error("load cancelled");
    progress(p);
  }
  if (!engine_to_load) throw std::runtime_error(load_error);
  return engine_to_load;
}

void FakeServices::start_server(const EngineConfig& cfg, std::shared_ptr<EngineClient>) {
  if (!server_error.empty()) throw std::runtime_error(server_error);
  std::lock_guard<std::mutex> lock(mu_);
  server_cfg = cfg;
  running_ = true;
}

void FakeServices::stop_server() {
  running_ = false;
}

std::vector<std::string> FakeServices::take_server_log() {
  std::lock_guard<std::mutex> lock(mu_);
  auto out = std::move(server_log_lines);
  server_log_lines.clear();
  return out;
}

std::vector<HubModelSummary> FakeServices::hub_search(const std::string& query) {
  if (!hub_error.empty()) throw std::runtime_error(hub_error);
  std::vector<HubModelSummary> out;
  for (const auto& r : search_results) {
    if (r.repo.find(query) != std::string::npos) out.push_back(r);
  }
  return out;
}

std::vector<HubRef> FakeServices::hub_refs(const std::string& repo) {
  if (!hub_error.empty()) throw std::runtime_error(hub_error);
  auto it = refs.find(repo);
  if (it == refs.end()) throw std::runtime_error("repository not found: " + repo);
  return it->second;
}

std::vector<HubFile> FakeServices::hub_files(const std::string& repo, const std::string& revision) {
  if (!hub_error.empty()) throw std::runtime_error(hub_error);
  auto it = files.find(repo + "@" + revision);
  if (it == files.end()) throw std::runtime_error("revision not found: " + repo + "@" + revision);
  return it->second;
}

std::string FakeServices::hub_download(const std::string& repo, const std::string& revision,
                                       const std::vector<std::string>& names,
                                       const std::function<void(const FileProgress&)>& progress,
                                       const std::atomic<bool>& cancel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    download_calls.push_back(names);
  }
  const auto& listing = files.at(repo + "@" + revision);
  for (const auto& name : names) {
    int64_t size = -1;
    for (const auto& f : listing) {
      if (f.path == name) size = f.size;
    }
    for (int64_t done = 0; done < size; done += download_chunk) {
      if (cancel) throw std::runtime_error("cancelled");
      progress(FileProgress{name, std::min(done + download_chunk, size), size, false});
    }
    progress(FileProgress{name, std::max<int64_t>(size, 0), size, true});
  }
  while (download_blocks_until_cancel && !cancel) std::this_thread::yield();
  if (cancel) throw std::runtime_error("cancelled");
  return "/cache/" + repo + "/" + revision;
}

std::vector<CachedModel> FakeServices::cached_models() {
  std::lock_guard<std::mutex> lock(mu_);
  return cache;
}

void FakeServices::delete_cached(const std::string& repo, const std::string& revision) {
  std::lock_guard<std::mutex> lock(mu_);
  delete_calls.emplace_back(repo, revision);
  for (auto it = cache.begin(); it != cache.end();) {
    it = (it->repo == repo && it->revision == revision) ? cache.erase(it) : it + 1;
  }
}

std::vector<int32_t> FakeServices::apply_chat_template(const EngineClient&,
                                                       const std::vector<ChatTemplateMessage>& messages) {
  std::lock_guard<std::mutex> lock(mu_);
  template_calls.push_back(messages);
  return template_ids;
}

std::shared_ptr<RequestStream> FakeServices::generate(EngineClient&, const std::string& request_id,
                                                      std::vector<int32_t> prompt_ids, const nlohmann::json& sampler) {
  if (!generate_error.empty()) throw std::runtime_error(generate_error);
  // Like the engine, a cancelled request ends with an "abort" output.
  auto self = std::make_shared<std::weak_ptr<RequestStream>>();
  auto stream = std::make_shared<RequestStream>(request_id, [self](const std::string& id) {
    if (auto s = self->lock()) {
      RequestOutput out;
      out.request_id = id;
      out.finished = true;
      CompletionDelta d;
      d.finish_reason = "abort";
      out.outputs.push_back(d);
      s->push(out);
    }
  });
  *self = stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generate_calls.push_back(sampler);
    last_stream_ = stream;
  }
  if (hold_stream) return stream;
  for (size_t i = 0; i < reply_pieces.size(); ++i) {
    RequestOutput out;
    out.request_id = request_id;
    out.num_prompt_tokens = static_cast<int64_t>(prompt_ids.size());
    CompletionDelta d;
    d.text = reply_pieces[i];
    d.token_ids = {static_cast<int32_t>(100 + i)};
    if (i + 1 == reply_pieces.size()) d.finish_reason = "stop";
    out.outputs.push_back(d);
    out.finished = i + 1 == reply_pieces.size();
    stream->push(out);
  }
  return stream;
}

}  // namespace cypris::fake
