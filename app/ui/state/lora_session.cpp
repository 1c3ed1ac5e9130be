// LoraSession; see lora_session.h.
#include "app/ui/state/lora_session.h"

#include <exception>
#include <filesystem>
#include <regex>

namespace cypris {

namespace fs = std::filesystem;

LoraSession::LoraSession(UiQueue& queue, BackgroundJobs& jobs) : queue_(queue), jobs_(jobs) {}

void LoraSession::refresh(const std::shared_ptr<EngineClient>& engine) {
  enabled_ = engine && engine->lora_enabled();
  if (engine) {
    adapters_ = engine->loras();
  } else {
    adapters_.clear();
  }
}

std::string LoraSession::default_name(const std::string& path) {
  if (looks_like_hub_repo(path)) {
    // "org/name@revision" -> "name"
    const std::string repo = path.substr(0, path.rfind('@'));
    return repo.substr(repo.find('/') + 1);
  }
  fs::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "a/b/" -> "a/b"
  return p.filename().string();
}

bool LoraSession::looks_like_hub_repo(const std::string& path) {
  static const std::regex kRepo(R"([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[^@\s]+)?)");
  std::error_code ec;
  return std::regex_match(path, kRepo) && !fs::exists(path, ec);
}

bool LoraSession::load(const std::shared_ptr<EngineClient>& engine, const std::string& name_in,
                       const std::string& path) {
  error_.clear();
  message_.clear();
  if (!engine) {
    error_ = "load a model first";
    return false;
  }
  if (!engine->lora_enabled()) {
    error_ = "the model was loaded without --enable-lora (Engine options → Advanced → LoRA), reload it with it";
    return false;
  }
  if (busy_) {
    error_ = "an adapter is still loading";
    return false;
  }
  if (path.empty()) {
    error_ = "give the adapter's folder (adapter_config.json and adapter_model.safetensors), .gguf file or Hugging Face repo (org/name[@revision])";
    return false;
  }
  const std::string name = name_in.empty() ? default_name(path) : name_in;
  if (name.empty()) {
    error_ = "cannot name an adapter after '" + path + "': give it a name";
    return false;
  }
  busy_ = true;
  jobs_.run("lora load", [this, engine, name, path](const std::atomic<bool>&) {
    std::string err;
    try {
      engine->load_lora(name, path);
    } catch (const std::exception& e) {
      err = e.what();
    }
    std::vector<LoraInfo> list;
    try {
      list = engine->loras();
    } catch (const std::exception&) {
    }
    queue_.post([this, err, name, path, list] {
      busy_ = false;
      adapters_ = list;
      if (!err.empty()) {
        // The engine's message names the file it read; say which folder the user gave too.
        error_ = err.find(path) == std::string::npos ? "cannot load " + path + ": " + err : err;
        return;
      }
      int64_t rank = 0;
      for (const auto& a : list) {
        if (a.name == name) rank = a.rank;
      }
      message_ = "loaded " + name + " (rank " + std::to_string(rank) + ")";
    });
  });
  return true;
}

bool LoraSession::unload(const std::shared_ptr<EngineClient>& engine, const std::string& name) {
  error_.clear();
  message_.clear();
  if (!engine) {
    error_ = "load a model first";
    return false;
  }
  if (busy_) {
    error_ = "an adapter is still loading";
    return false;
  }
  busy_ = true;
  jobs_.run("lora unload", [this, engine, name](const std::atomic<bool>&) {
    std::string err;
    bool found = false;
    try {
      found = engine->unload_lora(name);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (err.empty() && !found) err = "no adapter named '" + name + "' is loaded";
    std::vector<LoraInfo> list;
    try {
      list = engine->loras();
    } catch (const std::exception&) {
    }
    queue_.post([this, err, name, list] {
      busy_ = false;
      adapters_ = list;
      if (!err.empty()) {
        error_ = err;
      } else {
        message_ = "unloaded " + name;
      }
    });
  });
  return true;
}

}  // namespace cypris
