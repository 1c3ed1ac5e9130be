// A DebugHook that writes every named intermediate of each forward pass as a .npy file
// (DIR/f<forward>.<name>.npy, float32, 2-D), so tests/tools/compare_dump.py can compare a run
// layer by layer with the torch reference.
#pragma once

#include <filesystem>

#include "models/model.h"

namespace cypris {

// Creates dir if needed. Throws Error when a file cannot be written.
DebugHook make_npy_dump_hook(const std::filesystem::path& dir);

}  // namespace cypris
