// conv3djit families: every kernel family, its fields and what they mean, from the same field
// tables that parse `--config` and name the fields of a key.
#include <fmt/format.h>

#include "cli.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::cli {

Command add_families_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("families", "list the kernel families and their --config fields");
  return {cmd, [] {
            fmt::print("{}", detail::config_help());
            return kExitOk;
          }};
}

}  // namespace conv3djit::cli
