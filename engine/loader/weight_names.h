// Small text helpers the weight sources share in their messages and tensor lookups: a shape as
// "[a, b]" and the layer a linear weight's name belongs to.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cypris {

// "[4096, 128]": the shape as Tensor::shape_str writes it.
inline std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// The layer prefix of a linear weight name ("...q_proj.weight" -> "...q_proj"), or "".
inline std::string layer_prefix(const std::string& name) {
  static const std::string kSuffix = ".weight";
  if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return "";
  }
  return name.substr(0, name.size() - kSuffix.size());
}

}  // namespace cypris
