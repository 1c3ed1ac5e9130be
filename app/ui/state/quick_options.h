// The Engine options panel's Quick view (as KoboldCpp's launcher and LM Studio open): the model,
// context length, GPU layers, weight type / quantization and KV-cache dtype, read from and written
// to the same OptionsForm the Advanced table edits (one config, two views), and what the choice
// will take on the GPU and in RAM beside what the machine has, estimated before loading from the
// model's headers (engine/core/memory_estimate.h).
#pragma once

#include <optional>
#include <string>

#include "app/ui/state/options_form.h"
#include "engine/core/memory_estimate.h"

namespace cypris {

class QuickOptions {
 public:
  explicit QuickOptions(OptionsForm& form) : form_(form) {}

  // The option behind the GPU-layers slider, looked up by name ("gpu-layers") so the view works
  // whichever way the engine's row arrives; nullptr when this build's table has none.
  static const OptionSpec* gpu_layers_option();
  // kGpuLayersUnset: the whole model on --device (the option unset); -1: auto (as many as fit);
  // N: the first N layers on the GPU. nullopt when the table has no gpu-layers option.
  static constexpr int kGpuLayersUnset = -2;
  std::optional<int> gpu_layers() const;
  // False (and the form's field error) when the value is refused. Throws Error without the option.
  bool set_gpu_layers(int n);
  // The slider's value for an option value (null: unset, "auto" or -1: auto), and back for the
  // option's type (an int whose range starts at -1, a nullable int, or a string).
  static int gpu_layers_from_value(const nlohmann::json& v);
  static nlohmann::json gpu_layers_value(const OptionSpec& s, int n);

  // --max-model-len; 0 when unset (the model's own).
  int64_t context() const;
  bool set_context(int64_t n);  // n <= 0: unset

  // The model the form names, read from its headers: nullptr when it cannot be read (no model,
  // not downloaded yet, malformed: footprint_error() says which). Re-read only when the model
  // options (--model, --gguf-file, --revision, --download-dir) change.
  const ModelFootprint* footprint();
  const std::string& footprint_error();
  // Reads the model again on the next footprint() (after a download, or files changed on disk).
  void reload_model() { key_.clear(); footprint_.reset(); }

  // What the machine has (query_gpu: also the first CUDA device, through the engine).
  void refresh_machine(bool query_gpu);
  void set_machine(MachineMemory m) { machine_ = std::move(m); }
  const MachineMemory& machine() const { return machine_; }

  // The estimate's inputs from the form's current values.
  MemoryChoice choice() const;
  // The estimate for the form's model and values; nullopt without a footprint (or on a bad
  // --dtype / --kv-cache-dtype, estimate_error() then says why).
  std::optional<MemoryEstimate> estimate();
  const std::string& estimate_error() const { return estimate_error_; }

 private:
  OptionsForm& form_;
  std::string key_;  // the model options footprint_ was read for
  std::optional<ModelFootprint> footprint_;
  std::string footprint_error_;
  std::string estimate_error_;
  MachineMemory machine_;
};

}  // namespace cypris
