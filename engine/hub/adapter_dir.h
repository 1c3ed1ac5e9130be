// What a LoRA adapter path names (--lora-modules, --qlora-adapter-name-or-path, /v1/lora/load, the
// desktop picker): an existing local folder or file is returned as is; otherwise "org/name" or
// "org/name@revision" (default "main") is a Hub repo, of which only adapter_config.json and
// adapter_model.safetensors (or, when the repo has no safetensors, adapter_model.bin) are fetched
// into the cache, or served from it when offline or when the hub cannot be reached.
#pragma once

#include <string>

namespace cypris::hub {

// Throws HubError naming the repo, revision and missing file, or BadInput for a path that neither
// exists nor is a repo id.
std::string resolve_adapter_dir(const std::string& path_or_repo, bool allow_download = true);

}  // namespace cypris::hub
