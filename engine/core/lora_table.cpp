#include "engine/core/lora_table.h"

#include <nlohmann/json.hpp>

#include "engine/common/error.h"

namespace cypris {

LoraTable::LoraTable(int max_loras, int max_cpu_loras) : max_cpu_loras_(max_cpu_loras) {
  CYPRIS_CHECK(max_loras >= 1, "--max-loras {} must be at least 1", max_loras);
  CYPRIS_CHECK(max_cpu_loras >= max_loras, "--max-cpu-loras {} must be at least --max-loras {}", max_cpu_loras,
               max_loras);
  slot_id_.assign(static_cast<size_t>(max_loras), 0);
  slot_used_.assign(static_cast<size_t>(max_loras), 0);
}

const LoraTable::Entry* LoraTable::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : by_id(it->second);
}

const LoraTable::Entry* LoraTable::by_id(uint64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

const LoraTable::Entry& LoraTable::add(const std::string& name, const std::string& path, int64_t rank,
                                       std::shared_ptr<const LoraAdapter> adapter) {
  CYPRIS_CHECK(!by_name_.count(name), "a LoRA adapter named '{}' is already loaded; unload it first", name);
  Entry e;
  e.info.name = name;
  e.info.path = path;
  e.info.rank = rank;
  e.info.id = next_id_++;
  e.adapter = std::move(adapter);
  e.host_used = ++tick_;
  by_name_[name] = e.info.id;
  return by_id_[e.info.id] = std::move(e);
}

bool LoraTable::remove(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return false;
  by_id_.at(it->second).listed = false;
  by_name_.erase(it);
  ++num_unlisted_;
  return true;
}

void LoraTable::collect(const std::function<bool(uint64_t)>& used) {
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    const Entry& e = it->second;
    if (e.listed || used(e.info.id)) {
      ++it;
      continue;
    }
    if (e.slot >= 0) slot_id_[static_cast<size_t>(e.slot)] = 0;
    --num_unlisted_;
    it = by_id_.erase(it);
  }
}

std::vector<LoraInfo> LoraTable::list() const {
  std::vector<LoraInfo> out;
  for (const auto& [name, id] : by_name_) out.push_back(by_id_.at(id).info);
  return out;
}

void LoraTable::use_host_copy(uint64_t id, std::shared_ptr<const LoraAdapter> adapter) {
  Entry& e = by_id_.at(id);
  if (adapter) e.adapter = std::move(adapter);
  e.host_used = ++tick_;
}

std::vector<uint64_t> LoraTable::trim_host(const std::function<bool(uint64_t)>& pinned) {
  std::vector<uint64_t> dropped;
  int copies = num_host_copies();
  while (copies > max_cpu_loras_) {
    Entry* lru = nullptr;
    for (auto& [id, e] : by_id_) {
      if (e.adapter && !pinned(id) && (!lru || e.host_used < lru->host_used)) lru = &e;
    }
    if (!lru) break;  // the rest are needed by requests; trimmed once those are done
    lru->adapter.reset();
    dropped.push_back(lru->info.id);
    --copies;
  }
  return dropped;
}

int LoraTable::num_host_copies() const {
  int n = 0;
  for (const auto& [id, e] : by_id_) n += e.adapter ? 1 : 0;
  return n;
}

std::optional<LoraTable::Placement> LoraTable::place(uint64_t id, const std::function<bool(int)>& busy) const {
  const Entry& e = by_id_.at(id);
  if (e.slot >= 0) return Placement{e.slot, false, 0};
  const int empty = empty_slot();
  if (empty >= 0) return Placement{empty, true, 0};
  int lru = -1;
  for (int s = 0; s < max_loras(); ++s) {
    if (busy(s)) continue;
    if (lru < 0 || slot_used_[static_cast<size_t>(s)] < slot_used_[static_cast<size_t>(lru)]) lru = s;
  }
  if (lru < 0) return std::nullopt;
  return Placement{lru, true, slot_id_[static_cast<size_t>(lru)]};
}

void LoraTable::occupy(int slot, uint64_t id) {
  CYPRIS_CHECK(slot >= 0 && slot < max_loras(), "LoRA slot {} is outside [0, {})", slot, max_loras());
  const auto s = static_cast<size_t>(slot);
  if (slot_id_[s] != 0) {
    auto old = by_id_.find(slot_id_[s]);
    if (old != by_id_.end()) old->second.slot = -1;
  }
  Entry& e = by_id_.at(id);
  if (e.slot >= 0) slot_id_[static_cast<size_t>(e.slot)] = 0;
  e.slot = slot;
  slot_id_[s] = id;
  slot_used_[s] = ++tick_;
}

void LoraTable::touch_slot(int slot) { slot_used_.at(static_cast<size_t>(slot)) = ++tick_; }

int LoraTable::empty_slot() const {
  for (int s = 0; s < max_loras(); ++s) {
    if (slot_id_[static_cast<size_t>(s)] == 0) return s;
  }
  return -1;
}

std::pair<std::string, std::string> parse_lora_module(const std::string& spec) {
  if (!spec.empty() && spec.front() == '{') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(spec);
    } catch (const nlohmann::json::exception& e) {
      CYPRIS_FAIL("--lora-modules '{}': not valid JSON ({})", spec, e.what());
    }
    CYPRIS_CHECK(j.is_object() && j.contains("name") && j["name"].is_string() && j.contains("path") &&
                     j["path"].is_string(),
                 "--lora-modules '{}': the JSON form needs string fields \"name\" and \"path\"", spec);
    return {j["name"].get<std::string>(), j["path"].get<std::string>()};
  }
  const size_t eq = spec.find('=');
  CYPRIS_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(),
               "--lora-modules '{}': expected name=path (or {{\"name\": ..., \"path\": ...}})", spec);
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

uint64_t lora_cache_salt(uint64_t lora_id) {
  if (lora_id == 0) return 0;
  // splitmix64: distinct ids give unrelated salts.
  uint64_t z = lora_id + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) | 1;
}

}  // namespace cypris
