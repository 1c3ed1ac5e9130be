// Small checked accessors for tokenizer JSON files: every failure names the file and field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "engine/common/error.h"

namespace cypris::hf {

inline std::string get_type(const nlohmann::json& j, const std::string& where) {
  CYPRIS_CHECK(j.is_object(), "{}: expected an object, got {}", where, j.type_name());
  auto it = j.find("type");
  CYPRIS_CHECK(it != j.end() && it->is_string(), "{}: missing string field 'type'", where);
  return it->get<std::string>();
}

inline std::string get_string(const nlohmann::json& j, const char* key, const std::string& where,
                              const char* def = nullptr) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    CYPRIS_CHECK(def != nullptr, "{}: missing string field '{}'", where, key);
    return def;
  }
  CYPRIS_CHECK(it->is_string(), "{}: field '{}' must be a string, got {}", where, key, it->type_name());
  return it->get<std::string>();
}

inline bool get_bool(const nlohmann::json& j, const char* key, const std::string& where, bool def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  CYPRIS_CHECK(it->is_boolean(), "{}: field '{}' must be true or false, got {}", where, key, it->type_name());
  return it->get<bool>();
}

inline const nlohmann::json& get_array(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  CYPRIS_CHECK(it != j.end() && it->is_array(), "{}: missing array field '{}'", where, key);
  return *it;
}

}  // namespace cypris::hf
