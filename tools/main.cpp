// conv3djit: the command-line tool. Parses, then dispatches to the chosen command; exit codes are
// 0 ok, 1 failure, 2 no GPU for a command that needs one, CLI11's (>= 100) for usage errors.
#include <fmt/format.h>

#include <cstdio>

#include "cli.hpp"
#include "core/log.hpp"

int main(int argc, char** argv) {
  using namespace conv3djit::cli;
  CLI::App app{"conv3djit: JIT-compiled 3D convolutions: warm and manage the kernel cache, verify, time"};
  app.set_version_flag("--version", std::string("conv3djit ") + conv3djit::version());
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand

  GlobalOptions global;
  app.add_option("--cache-dir", global.cache_dir,
                 "kernel cache folder (default: $CONV3DJIT_CACHE_DIR, $XDG_CACHE_HOME/conv3djit, "
                 "~/.cache/conv3djit)")
      ->type_name("DIR");
  app.add_flag("-v,--verbose", global.verbose, "log debug messages to stderr");

  std::vector<Command> commands = {add_precompile_command(app, global), add_verify_command(app, global),
                                   add_run_command(app, global), add_bench_command(app, global),
                                   add_families_command(app)};
  for (Command& command : add_cache_commands(app, global)) commands.push_back(std::move(command));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // The library's own logger (made on first use, level from CONV3DJIT_LOG_LEVEL).
  if (global.verbose) conv3djit::detail::log().set_level(spdlog::level::debug);

  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    try {
      return command.run();
    } catch (const conv3djit::Error& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      return e.category() == conv3djit::ErrorCategory::NoDevice ? kExitNoDevice : kExitFailed;
    } catch (const std::exception& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      return kExitFailed;
    }
  }
  return kExitFailed;  // unreachable: require_subcommand(1)
}
