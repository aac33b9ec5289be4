#include "build_info.hpp"

// Set on this file alone (tools/CMakeLists.txt), so that a new commit recompiles nothing else.
#ifndef CONV3DJIT_COMMIT
#define CONV3DJIT_COMMIT "unknown"
#endif

namespace conv3djit::cli {

const char* source_commit() noexcept { return CONV3DJIT_COMMIT; }

}  // namespace conv3djit::cli
