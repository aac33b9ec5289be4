#pragma once
// The library's one spdlog logger ("conv3djit"), level from CONV3DJIT_LOG_LEVEL (default warn).
#include <spdlog/spdlog.h>

namespace conv3djit::detail {
spdlog::logger& log();
}  // namespace conv3djit::detail
