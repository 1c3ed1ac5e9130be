#include "engine/loader/online_quant_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <vector>

#include "engine/common/error.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* mode_name(quant::OnlineQuant m) {
  switch (m) {
    case quant::OnlineQuant::Fp8:
      return "-q fp8";
    case quant::OnlineQuant::Int8:
      return "--load-in-8bit";
    case quant::OnlineQuant::Int4:
      return "--load-in-4bit";
  }
  return "?";
}

class OnlineQuantWeightSource : public WeightSource {
 public:
  OnlineQuantWeightSource(std::unique_ptr<WeightSource> plain, quant::OnlineQuant mode)
      : plain_(std::move(plain)), mode_(mode) {}

  std::string describe() const override { return plain_->describe(); }
  bool contains(const std::string& name) const override { return plain_->contains(name); }
  std::optional<std::vector<int64_t>> stored_shape(const std::string& name) const override {
    return plain_->stored_shape(name);
  }

  std::optional<DType> native_dtype(const std::string& name) const override {
    if (!is_linear(name)) return plain_->native_dtype(name);
    const auto shape = plain_->stored_shape(name);
    return quant::online_quant_type(mode_, (*shape)[1]);
  }

  void read_into(const std::string& name, const std::vector<int64_t>& full_shape, DType dtype, const ShardSpec& shard,
                 void* dst) const override {
    if (!dtype_is_quantized(dtype) || !is_linear(name)) return plain_->read_into(name, full_shape, dtype, shard, dst);
    CYPRIS_CHECK(full_shape.size() == 2 && native_dtype(name) == dtype,
                 "{}: layer '{}' {} is quantized at load ({}) to {}, not read as {}", plain_->describe(), name,
                 fmt::format("[{}]", fmt::join(full_shape, ", ")), mode_name(mode_),
                 native_dtype(name) ? dtype_name(*native_dtype(name)) : "16 bits", dtype_name(dtype));
    const std::vector<int64_t> local = shard_shape(name, full_shape, shard);
    const int64_t k = full_shape[1];
    // Whole rows (the scales span the row): this rank's rows, or every row for a column split.
    const ShardSpec rows_spec = shard.dim == 0 ? shard : ShardSpec::replicated();
    const int64_t rows = shard.dim == 0 ? local[0] : full_shape[0];
    std::vector<float> w(static_cast<size_t>(rows * k));
    plain_->read_into(name, full_shape, DType::F32, rows_spec, w.data());
    const size_t full_row = dtype_nbytes(dtype, k);
    const int64_t block = dtype_block(dtype).elems;
    const int64_t k0 = shard.dim == 1 ? shard.rank * local[1] : 0;
    CYPRIS_CHECK(k0 % block == 0 && local[1] % block == 0,
                 "{}: layer '{}': columns {}..{} of a rank are not whole {}-value blocks", plain_->describe(), name, k0,
                 k0 + local[1], block);
    const size_t skip = dtype_nbytes(dtype, k0), part = dtype_nbytes(dtype, local[1]);
    shared_thread_pool().parallel_for(
        rows,
        [&](int64_t r0, int64_t r1) {
          std::vector<char> row(full_row);
          for (int64_t r = r0; r < r1; ++r) {
            quant::online_quantize_rows(mode_, dtype, w.data() + r * k, 1, k, row.data());
            std::memcpy(static_cast<char*>(dst) + r * part, row.data() + skip, part);
          }
        },
        16);
  }

 private:
  // A linear layer's weight: 2-D, not the embeddings, lm_head or a MoE router (kept in 16 bits, as
  // vLLM and Aphrodite keep them).
  bool is_linear(const std::string& name) const {
    if (!ends_with(name, ".weight") || name.find("embed") != std::string::npos ||
        name.find("lm_head") != std::string::npos || ends_with(name, "mlp.gate.weight") ||
        ends_with(name, "block_sparse_moe.gate.weight") || ends_with(name, "router.weight")) {
      return false;
    }
    const auto shape = plain_->stored_shape(name);
    return shape && shape->size() == 2;
  }

  std::unique_ptr<WeightSource> plain_;
  quant::OnlineQuant mode_;
};

}  // namespace

std::unique_ptr<WeightSource> make_online_quant_source(std::unique_ptr<WeightSource> plain, quant::OnlineQuant mode) {
  return std::make_unique<OnlineQuantWeightSource>(std::move(plain), mode);
}

std::optional<quant::OnlineQuant> online_quant_mode(const LoadOptions& options, const std::string& checkpoint_method,
                                                    const std::string& model) {
  CYPRIS_CHECK(!(options.load_in_8bit && options.load_in_4bit),
               "--load-in-8bit and --load-in-4bit: give one of them, not both");
  if (options.load_in_8bit || options.load_in_4bit) {
    const char* flag = options.load_in_8bit ? "--load-in-8bit" : "--load-in-4bit";
    CYPRIS_CHECK(checkpoint_method.empty(), "{}: {} is already quantized ({}); it loads as it is, leave {} out", flag,
                 model, checkpoint_method, flag);
    CYPRIS_CHECK(!options.quantization, "{} quantizes a 16-bit checkpoint at load; it cannot go with -q {}", flag,
                 *options.quantization);
    return options.load_in_8bit ? quant::OnlineQuant::Int8 : quant::OnlineQuant::Int4;
  }
  if (options.quantization && *options.quantization == "fp8" && checkpoint_method.empty()) {
    return quant::OnlineQuant::Fp8;
  }
  return std::nullopt;
}

}  // namespace cypris
