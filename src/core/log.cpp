#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace conv3djit::detail {

std::optional<spdlog::level::level_enum> parse_log_level(const std::string& text) {
  std::string name = text;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  // Spelled out: spdlog's own names differ between its versions ("warning" / "warn").
  static constexpr std::pair<const char*, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},  {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},   {"warning", spdlog::level::warn}, {"error", spdlog::level::err},
      {"err", spdlog::level::err},     {"critical", spdlog::level::critical}, {"off", spdlog::level::off}};
  for (const auto& [known, level] : kLevels) {
    if (name == known) return level;
  }
  return std::nullopt;
}

spdlog::logger& log() {
  // Built once, thread-safely; stderr so that --json output on stdout stays machine-readable.
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("conv3djit");
    l->set_level(spdlog::level::warn);
    const char* value = std::getenv("CONV3DJIT_LOG_LEVEL");
    if (value != nullptr && *value != '\0') {
      if (const auto level = parse_log_level(value)) {
        l->set_level(*level);
      } else {
        // Not through the logger: an unknown level must not hide the warnings it exists to show.
        std::fprintf(stderr,
                     "conv3djit: CONV3DJIT_LOG_LEVEL = '%s' is not a level (trace, debug, info, warn, "
                     "error, critical, off); using warn\n",
                     value);
      }
    }
    return l;
  }();
  return *logger;
}

}  // namespace conv3djit::detail
