#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace conv3djit::detail {

spdlog::logger& log() {
  // Built once, thread-safely; stderr so that --json output on stdout stays machine-readable.
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("conv3djit");
    l->set_level(spdlog::level::warn);
    if (const char* level = std::getenv("CONV3DJIT_LOG_LEVEL")) {
      l->set_level(spdlog::level::from_str(level));
    }
    return l;
  }();
  return *logger;
}

}  // namespace conv3djit::detail
