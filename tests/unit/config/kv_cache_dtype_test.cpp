// --kv-cache-dtype's names, parsed once in engine/config: each name means the cache type vLLM gives
// it, the option table offers exactly these names, every one is a type the attention kernels store,
// and a bad name is refused with the choices.
#include "engine/config/kv_cache_dtype.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/config/options.h"
#include "kernels/cpu/attention.h"

namespace cypris {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(KvCacheDtype, NamesMapToTypesAndBadNamesListTheChoices) {
  EXPECT_FALSE(parse_kv_cache_dtype("auto").has_value());  // auto: the engine's default (float16 on the CPU)
  EXPECT_EQ(parse_kv_cache_dtype("fp8"), DType::F8E4M3);  // as vLLM: fp8 means e4m3
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e4m3"), DType::F8E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e5m2"), DType::F8E5M2);
  EXPECT_EQ(parse_kv_cache_dtype("float16"), DType::F16);
  EXPECT_EQ(parse_kv_cache_dtype("bfloat16"), DType::BF16);
  EXPECT_EQ(parse_kv_cache_dtype("float32"), DType::F32);
  for (const char* bad : {"int8", "fp16", "", "FP8"}) {
    try {
      parse_kv_cache_dtype(bad);
      FAIL() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("--kv-cache-dtype"), HasSubstr("fp8_e5m2"), HasSubstr("float32")));
    }
  }
}

TEST(KvCacheDtype, OptionTableOffersTheParsedNamesAndTheKernelsStoreThem) {
  const OptionSpec* opt = find_option("--kv-cache-dtype");
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->choices, kv_cache_dtype_names());
  EXPECT_EQ(opt->metavar, "{auto,fp8,fp8_e5m2,fp8_e4m3,float16,bfloat16,float32}");
  for (const std::string& name : kv_cache_dtype_names()) {
    const std::optional<DType> t = parse_kv_cache_dtype(name);
    if (t) EXPECT_TRUE(is_kv_cache_dtype(*t)) << name;
  }
}

}  // namespace
}  // namespace cypris
