#include "engine/config/kv_cache_dtype.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/common/error.h"

namespace cypris {
namespace {

struct KvCacheDtypeName {
  const char* name;
  std::optional<DType> dtype;
};

constexpr KvCacheDtypeName kNames[] = {
    {"auto", std::nullopt},        {"fp8", DType::F8E4M3},  {"fp8_e5m2", DType::F8E5M2}, {"fp8_e4m3", DType::F8E4M3},
    {"float16", DType::F16},       {"bfloat16", DType::BF16}, {"float32", DType::F32},
};

}  // namespace

const std::vector<std::string>& kv_cache_dtype_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& n : kNames) v.emplace_back(n.name);
    return v;
  }();
  return names;
}

std::optional<DType> parse_kv_cache_dtype(const std::string& name) {
  for (const auto& n : kNames) {
    if (name == n.name) return n.dtype;
  }
  CYPRIS_FAIL("--kv-cache-dtype '{}' is not one of {}", name, fmt::join(kv_cache_dtype_names(), ", "));
}

}  // namespace cypris
