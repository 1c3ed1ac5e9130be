#include "engine/runtime/batch_upload.h"

namespace cypris {

BatchUpload::BatchUpload(Backend& be, const BatchContext& b) {
  const int64_t n = b.num_tokens();
  ids_ = be.upload(b.token_ids.data(), DType::I32, {n});
  pos_ = be.upload(b.positions.data(), DType::I32, {n});
  slots_ = be.upload(b.slot_mapping.data(), DType::I64, {n});
  qsl_ = be.upload(b.query_start_loc.data(), DType::I32, {b.num_seqs() + 1});
  lens_ = be.upload(b.seq_lens.data(), DType::I32, {b.num_seqs()});
  tables_ = be.upload(b.block_tables.data(), DType::I32, {b.num_seqs(), int64_t{b.max_blocks_per_seq}});
  lidx_ = be.upload(b.logits_indices.data(), DType::I32, {static_cast<int64_t>(b.logits_indices.size())});
  in.token_ids = ids_.view;
  in.positions = pos_.view;
  in.logits_indices = lidx_.view;
  in.attn.query_start_loc = qsl_.view;
  in.attn.seq_lens = lens_.view;
  in.attn.block_tables = tables_.view;
  in.attn.slot_mapping = slots_.view;
  in.attn.num_seqs = b.num_seqs();
  in.attn.max_blocks_per_seq = b.max_blocks_per_seq;
  in.attn.max_query_len = b.max_query_len;  // the scheduler's maxima (validate() checked them)
  in.attn.max_seq_len = b.max_seq_len;
  if (!b.lora_slots.empty()) {
    lora_slots_ = be.upload(b.lora_slots.data(), DType::I32, {n});
    in.lora_slots = lora_slots_.view;
  }
}

}  // namespace cypris
