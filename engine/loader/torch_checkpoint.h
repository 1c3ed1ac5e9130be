// PyTorch checkpoints (pytorch_model*.bin, --load-format pt) read without Python and without
// running any of their code. torch.save writes a zip archive of stored entries: data.pkl (a pickle
// of the state dict) and data/<key> (each storage's raw bytes). The pickle is read by a small
// interpreter that knows only what a state dict needs: containers, numbers, strings, the storage
// persistent ids, and three callables (torch._utils._rebuild_tensor_v2 / _rebuild_parameter,
// collections.OrderedDict). Any other global or call, which Python's unpickler would import and
// run, is refused with an error naming it; nothing is ever executed. Tensors must be contiguous
// views of their storage (torch.save of a state dict writes them so); their bytes stay in the
// mapping, as with safetensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/loader/safetensors.h"

namespace cypris {

class TorchFile {
 public:
  // Maps the file, reads its zip directory and unpickles the state dict. Throws Error naming the
  // file (and the entry or tensor) for anything malformed, unsupported or unsafe.
  explicit TorchFile(const std::filesystem::path& path);
  ~TorchFile();
  TorchFile(const TorchFile&) = delete;
  TorchFile& operator=(const TorchFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// The .bin files of a model folder: pytorch_model.bin.index.json when present (its weight_map
// names each tensor's file), else pytorch_model.bin, else every pytorch_model*.bin. Files matching
// ignore_patterns are skipped, as for safetensors.
class TorchCheckpoint {
 public:
  using File = TorchFile;
  explicit TorchCheckpoint(const std::filesystem::path& dir, const std::vector<std::string>& ignore_patterns = {});

  const SafetensorsTensor* find(const std::string& name, const TorchFile** file = nullptr) const;
  static bool present(const std::filesystem::path& dir);

 private:
  std::vector<std::unique_ptr<TorchFile>> files_;
  std::map<std::string, std::pair<const SafetensorsTensor*, const TorchFile*>> index_;
};

}  // namespace cypris
