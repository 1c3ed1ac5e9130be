// The tensor element types of the GGUF format (ggml's type ids) and their block layouts: how many
// elements one block holds and how many bytes it takes. Shared by the GGUF reader (which checks
// that a tensor's bytes fit its shape), the CPU quantized kernels and the CUDA ones.
//
// The ids are the numbers GGUF files store, so they must never be renumbered. Types ggml has
// retired (31-33, the repacked Q4_0_4_4 family) are unknown here, like any id not in the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cypris {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;    // llama.cpp's spelling: "Q4_K", "IQ4_XS", "F16"
  uint32_t block_elems;     // elements per block (1 for plain types)
  uint32_t block_bytes;     // bytes per block
  bool quantized;
};

// Every type the format defines, in id order.
inline constexpr GgmlTypeTraits kGgmlTypes[] = {
    {GgmlType::F32, "F32", 1, 4, false},          {GgmlType::F16, "F16", 1, 2, false},
    {GgmlType::Q4_0, "Q4_0", 32, 18, true},       {GgmlType::Q4_1, "Q4_1", 32, 20, true},
    {GgmlType::Q5_0, "Q5_0", 32, 22, true},       {GgmlType::Q5_1, "Q5_1", 32, 24, true},
    {GgmlType::Q8_0, "Q8_0", 32, 34, true},       {GgmlType::Q8_1, "Q8_1", 32, 36, true},
    {GgmlType::Q2_K, "Q2_K", 256, 84, true},      {GgmlType::Q3_K, "Q3_K", 256, 110, true},
    {GgmlType::Q4_K, "Q4_K", 256, 144, true},     {GgmlType::Q5_K, "Q5_K", 256, 176, true},
    {GgmlType::Q6_K, "Q6_K", 256, 210, true},     {GgmlType::Q8_K, "Q8_K", 256, 292, true},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, true}, {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, true},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, true}, {GgmlType::IQ1_S, "IQ1_S", 256, 50, true},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, true},   {GgmlType::IQ3_S, "IQ3_S", 256, 110, true},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82, true},    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, true},
    {GgmlType::I8, "I8", 1, 1, false},            {GgmlType::I16, "I16", 1, 2, false},
    {GgmlType::I32, "I32", 1, 4, false},          {GgmlType::I64, "I64", 1, 8, false},
    {GgmlType::F64, "F64", 1, 8, false},          {GgmlType::IQ1_M, "IQ1_M", 256, 56, true},
    {GgmlType::BF16, "BF16", 1, 2, false},
};

// The traits of a type id read from a file; nullopt for an id the format does not define.
inline std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

inline const GgmlTypeTraits& ggml_traits(GgmlType type) {
  for (const auto& t : kGgmlTypes)
    if (t.type == type) return t;
  return kGgmlTypes[0];  // unreachable for a valid enum value
}

// Bytes of one row of `elems` elements; nullopt when the row is not a whole number of blocks.
inline std::optional<uint64_t> ggml_row_bytes(GgmlType type, uint64_t elems) {
  const auto& t = ggml_traits(type);
  if (elems % t.block_elems != 0) return std::nullopt;
  return elems / t.block_elems * t.block_bytes;
}

}  // namespace cypris
