#include "engine/core/lora_table.h"

#include <nlohmann/json.hpp>

#include "engine/common/error.h"

namespace cypris {

const LoraTable::Entry* LoraTable::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

int LoraTable::free_slot(const std::function<bool(int)>& in_use) const {
  std::vector<bool> held(static_cast<size_t>(max_loras_), false);
  for (const auto& [name, e] : by_name_) held[static_cast<size_t>(e.slot)] = true;
  for (int s = 0; s < max_loras_; ++s) {
    if (!held[static_cast<size_t>(s)] && !in_use(s)) return s;
  }
  return -1;
}

const LoraTable::Entry& LoraTable::add(const std::string& name, const std::string& path, int64_t rank, int slot) {
  CYPRIS_CHECK(slot >= 0 && slot < max_loras_, "LoRA slot {} is outside [0, {})", slot, max_loras_);
  Entry e;
  e.info.name = name;
  e.info.path = path;
  e.info.rank = rank;
  e.info.id = next_id_++;
  e.slot = slot;
  return by_name_[name] = std::move(e);
}

std::optional<LoraTable::Entry> LoraTable::remove(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  Entry e = std::move(it->second);
  by_name_.erase(it);
  return e;
}

std::vector<LoraInfo> LoraTable::list() const {
  std::vector<LoraInfo> out;
  for (const auto& [name, e] : by_name_) out.push_back(e.info);
  return out;
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
