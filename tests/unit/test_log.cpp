// CONV3DJIT_LOG_LEVEL's names: any case, spdlog's spellings and the short ones; anything else is
// no level (the logger then warns on stderr and keeps its default).
#include "catch.hpp"
#include "core/log.hpp"

using conv3djit::detail::parse_log_level;

TEST_CASE("log levels parse in any case; unknown names are no level") {
  CHECK(parse_log_level("warn") == spdlog::level::warn);
  CHECK(parse_log_level("WARN") == spdlog::level::warn);
  CHECK(parse_log_level("Warning") == spdlog::level::warn);
  CHECK(parse_log_level("DEBUG") == spdlog::level::debug);
  CHECK(parse_log_level("error") == spdlog::level::err);
  CHECK(parse_log_level("off") == spdlog::level::off);
  CHECK(parse_log_level("trace") == spdlog::level::trace);
  CHECK(parse_log_level("critical") == spdlog::level::critical);
  for (const char* bad : {"loud", "3", "", " warn", "warnx"}) {
    INFO(bad);
    CHECK_FALSE(parse_log_level(bad));
  }
}
