// The engine's LoRA adapters: names, ids, host copies and device slots. Pure bookkeeping, on the
// engine thread; the engine moves the weights (ModelRunner::load_lora) where this table says.
//
// As in Aphrodite and vLLM, two caches: up to --max-cpu-loras adapters keep their weights in host
// memory (least recently used dropped first; a dropped one is read again from its path when a
// request names it), and up to --max-loras sit in device slots. A request runs only once its adapter
// holds a slot: the scheduler's admission check places it (place()), in an empty slot or else in the
// least recently used slot that no running request uses; when every slot is in use the request
// waits. Ids are never reused (prefix-cache keys and requests name adapters by id). An unloaded
// adapter leaves the list at once but keeps its entry (and slot) until no request uses it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/engine_client.h"

namespace cypris {

struct LoraAdapter;

class LoraTable {
 public:
  // max_cpu_loras >= max_loras >= 1 (Error naming the flags otherwise).
  LoraTable(int max_loras, int max_cpu_loras);

  struct Entry {
    LoraInfo info;
    std::shared_ptr<const LoraAdapter> adapter;  // the host copy; null once dropped from host memory
    int slot = -1;                               // the device slot holding it; -1: none
    bool listed = true;                          // false once unloaded
    uint64_t host_used = 0;                      // host-memory LRU tick
  };
  // A loaded (listed) adapter by name; null when none.
  const Entry* find(const std::string& name) const;
  // Any entry, unloaded ones still in use included; null when none.
  const Entry* by_id(uint64_t id) const;
  const Entry& add(const std::string& name, const std::string& path, int64_t rank,
                   std::shared_ptr<const LoraAdapter> adapter);
  // Takes the name off the list (false when unknown); the entry stays until collect() drops it.
  bool remove(const std::string& name);
  // Drops the unloaded entries no request uses (used(id) false); their slots become empty.
  void collect(const std::function<bool(uint64_t)>& used);
  std::vector<LoraInfo> list() const;

  // Host memory. A request naming the adapter marks it used (and gives it a copy read again).
  void use_host_copy(uint64_t id, std::shared_ptr<const LoraAdapter> adapter = nullptr);
  // Drops host copies past max_cpu_loras, least recently used first, never one pinned(id) says a
  // request still needs. The ids whose copies were dropped.
  std::vector<uint64_t> trim_host(const std::function<bool(uint64_t)>& pinned);
  int num_host_copies() const;

  // Device slots. For adapter id: the slot it holds (load false), else an empty slot, else the
  // least recently used slot busy(slot) says no running request uses (load true; evicted: the id it
  // held). nullopt when every slot is busy with other adapters.
  struct Placement {
    int slot = -1;
    bool load = false;
    uint64_t evicted = 0;
  };
  std::optional<Placement> place(uint64_t id, const std::function<bool(int)>& busy) const;
  // The slot now holds id (after its weights were written there); marks it most recently used.
  void occupy(int slot, uint64_t id);
  // Marks the slot most recently used (a request was admitted with it).
  void touch_slot(int slot);
  // The adapter id the slot holds; 0: empty.
  uint64_t slot_holder(int slot) const { return slot_id_.at(static_cast<size_t>(slot)); }
  // An empty slot, or -1.
  int empty_slot() const;

  int max_loras() const { return static_cast<int>(slot_id_.size()); }
  int max_cpu_loras() const { return max_cpu_loras_; }
  bool has_unlisted() const { return num_unlisted_ > 0; }

 private:
  int max_cpu_loras_ = 1;
  uint64_t next_id_ = 1;
  uint64_t tick_ = 0;
  int num_unlisted_ = 0;
  std::map<uint64_t, Entry> by_id_;
  std::map<std::string, uint64_t> by_name_;  // listed adapters
  std::vector<uint64_t> slot_id_;            // [max_loras]: the id each slot holds, 0 empty
  std::vector<uint64_t> slot_used_;          // [max_loras]: LRU ticks
};

// "name=path", or vLLM's JSON form {"name": ..., "path": ...} (--lora-modules). Error naming the
// entry otherwise.
std::pair<std::string, std::string> parse_lora_module(const std::string& spec);

// The prefix-cache salt of an adapter id (0 for none).
uint64_t lora_cache_salt(uint64_t lora_id);

}  // namespace cypris
