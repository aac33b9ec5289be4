#pragma once
// The library's one spdlog logger ("conv3djit"), level from CONV3DJIT_LOG_LEVEL (default warn).
#include <spdlog/spdlog.h>

#include <optional>
#include <string>

namespace conv3djit::detail {
spdlog::logger& log();
/// A level name in any case ("WARN", "warning", "Off"); nullopt for anything else.
std::optional<spdlog::level::level_enum> parse_log_level(const std::string& text);
}  // namespace conv3djit::detail
