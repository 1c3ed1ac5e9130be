// LoRA in the model's linear layers: the sites (one per checkpoint tensor of a linear layer, so a
// stacked q/k/v or gate/up layer has one site per part, each adding to its own output columns),
// their adapter weights for every slot, and the product (Backend::lora_linear, one call per site
// over all rows of the batch). One LoraSites per tensor-parallel rank, owned by the model runner:
// the layers register their sites at build time (ModelBuildOptions::lora), the runner loads an
// adapter into a slot and binds each batch's per-row slots before a forward pass.
//
// Tensor parallelism follows the base weight: a column-parallel part keeps this rank's rows of B
// (A whole), a row-parallel layer this rank's columns of A (B whole), so the partial products the
// all-reduce sums add up to the whole update.
//
// Memory: a site's stacked weights, [max_loras, max_rank, in] and [max_loras, out, max_rank] in the
// activation dtype, are allocated when the first adapter that targets the site is loaded (sites no
// adapter touches cost nothing); ranks below max_rank are zero-padded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/loader/lora_adapter.h"
#include "engine/loader/weights.h"
#include "engine/backend/backend.h"

namespace cypris {

class LoraSites {
 public:
  LoraSites(Backend& backend, int max_loras, int64_t max_rank);

  int max_loras() const { return max_loras_; }
  int64_t max_rank() const { return max_rank_; }

  // Registration by the linear layers. module: the base weight's name without ".weight". Returns the
  // site's index, or -1 for a layer LoRA does not apply to (a MoE expert, run by grouped_linear).
  // A column-parallel part: rows [row0, row0 + rows) of a [full_rows, in] tensor (row0 0 and rows
  // full_rows for a whole tensor), this rank's share of them split like `shard`, written to output
  // columns [column0, column0 + local rows). neox_head_dim > 0: the rows are reordered within each
  // head from interleaved rotary pairs to halves, as the base weight was (deinterleave_rows).
  int add_column(const std::string& module, int64_t in, int64_t full_rows, int64_t row0, int64_t rows,
                 const ShardSpec& shard, int64_t column0, int neox_head_dim = 0);
  // A row-parallel layer: a [out, in] tensor whose input columns are split like `shard`.
  int add_row(const std::string& module, int64_t out, int64_t in, const ShardSpec& shard);

  // out[:, site's columns] += the LoRA update of each row of x whose bound slot holds an adapter
  // targeting the site. No-op when no batch slots are bound or no adapter targets it.
  void apply(Backend& b, int site, const Tensor& x, Tensor& out) const;

  // The per-row slots of the coming forward pass (I32 [num_tokens] on the device; empty: none).
  void bind(const Tensor& slots) { slots_ = slots; }

  // Throws Error naming the module and the shapes when the adapter does not fit this model.
  void check(const LoraAdapter& adapter) const;
  // Allocates the stacked weights of every site the adapter targets (check() first), so that writing
  // it into a slot later allocates nothing.
  void reserve(const LoraAdapter& adapter);
  // Writes the adapter into slot [0, max_loras) (check() first); the slot's other sites are zeroed.
  void load(int slot, const LoraAdapter& adapter);
  // Removes whatever adapter the slot holds.
  void clear(int slot);
  // Device bytes of the allocated stacked weights.
  size_t device_bytes() const;

 private:
  struct Site {
    std::string module;
    bool column = true;
    int64_t in_local = 0, out_local = 0;  // this rank's shape of the site
    int64_t in_full = 0, out_full = 0;    // the module's whole tensor
    int64_t b_row0 = 0;                   // column parts: first of B's rows this rank keeps
    int64_t a_col0 = 0;                   // row-parallel: first of A's columns this rank keeps
    int64_t column0 = 0;
    int neox_head_dim = 0;
    DeviceTensor a, b, scales;  // [L, R, in_local], [L, out_local, R], F32 [L]
    std::vector<float> host_scales;
  };
  void allocate(Site& s);
  Tensor slot_view(const DeviceTensor& t, int slot) const;
  void write_slot(Site& s, int slot, const LoraModule* m, float scale);

  Backend& backend_;
  int max_loras_ = 1;
  int64_t max_rank_ = 16;
  DType dtype_ = DType::F32;
  std::vector<Site> sites_;
  Tensor slots_;
};

}  // namespace cypris
