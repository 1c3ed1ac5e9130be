// Where Cypris's data files (resources/: chat templates, sampler presets, fonts) are at run time.
#pragma once

#include <filesystem>

namespace cypris {

// $CYPRIS_RESOURCES_DIR when set; else <prefix>/share/cypris next to an installed binary; else
// the source tree's resources/ (a build that was not installed).
std::filesystem::path resources_dir();

}  // namespace cypris
