// A step's batch on a backend's device: the BatchContext's arrays uploaded, and the ForwardInputs
// (tokens, positions, logits rows, attention metadata; LoRA slots when the batch has any) that view
// them. The uploads live as long as this object, so it is neither copied nor moved.
#pragma once

#include "engine/backend/backend.h"
#include "engine/scheduler/batch_context.h"
#include "models/model.h"

namespace cypris {

class BatchUpload {
 public:
  BatchUpload(Backend& be, const BatchContext& b);
  BatchUpload(const BatchUpload&) = delete;
  BatchUpload& operator=(const BatchUpload&) = delete;

  // stage_in / stage_out are left for the caller.
  ForwardInputs in;

 private:
  DeviceTensor ids_, pos_, slots_, qsl_, lens_, tables_, lidx_, lora_slots_;
};

}  // namespace cypris
