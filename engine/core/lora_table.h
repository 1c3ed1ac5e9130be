// The engine's LoRA adapters by name: which device slot each holds and its id. Ids are never
// reused (prefix-cache keys and requests name adapters by id); a slot freed by an unload is taken
// again only once no request still runs with it. Pure bookkeeping, on the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/engine_client.h"

namespace cypris {

class LoraTable {
 public:
  explicit LoraTable(int max_loras) : max_loras_(max_loras) {}

  struct Entry {
    LoraInfo info;
    int slot = -1;
  };
  const Entry* find(const std::string& name) const;
  // A slot no loaded adapter holds and no running request uses (in_use(slot)); -1 when none.
  int free_slot(const std::function<bool(int)>& in_use) const;
  const Entry& add(const std::string& name, const std::string& path, int64_t rank, int slot);
  // The entry removed, or nullopt for an unknown name.
  std::optional<Entry> remove(const std::string& name);
  std::vector<LoraInfo> list() const;
  int max_loras() const { return max_loras_; }

 private:
  int max_loras_ = 0;
  uint64_t next_id_ = 1;
  std::map<std::string, Entry> by_name_;
};

// "name=path", or vLLM's JSON form {"name": ..., "path": ...} (--lora-modules). Error naming the
// entry otherwise.
std::pair<std::string, std::string> parse_lora_module(const std::string& spec);

// The prefix-cache salt of an adapter id (0 for none).
uint64_t lora_cache_salt(uint64_t lora_id);

}  // namespace cypris
