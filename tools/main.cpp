// conv3djit: the command-line tool. Parses, then dispatches to the chosen command; the exit codes
// are kExitCodesHelp's.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli.hpp"
#include "core/log.hpp"

namespace {

using namespace conv3djit::cli;

// Printed under every --help, and the README's table says the same.
constexpr const char* kExitCodesHelp =
    "Exit codes: 0 success; 1 failure (a library error, a failed compile or verification);\n"
    "2 the command needs a GPU and this machine has none; 100-127 usage error (CLI11's code for\n"
    "the kind: 105 a bad value, 106 a required option or command missing, 108 options that exclude\n"
    "each other, 109 an unknown command or argument). conv3djit alone prints its help and exits 106.";

// Edits (insertions, deletions, substitutions) that turn a into b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The usage error for `word`, which is no command in `names`: the closest command when one is
// near enough to be a typo, else the list of commands.
CLI::ExtrasError unknown_command(const std::vector<std::string>& names, const std::string& word) {
  const auto closest = std::min_element(names.begin(), names.end(), [&](const auto& a, const auto& b) {
    return edit_distance(word, a) < edit_distance(word, b);
  });
  // Two edits, or a third of the word for longer ones: close enough to be a typo.
  if (closest != names.end() && edit_distance(word, *closest) <= std::max<size_t>(2, word.size() / 3)) {
    return CLI::ExtrasError(fmt::format("unknown command '{}': did you mean {}?", word, *closest),
                            CLI::ExitCodes::ExtrasError);
  }
  return CLI::ExtrasError(fmt::format("unknown command '{}': expected one of {}", word, fmt::join(names, ", ")),
                          CLI::ExitCodes::ExtrasError);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conv3djit: JIT-compiled 3D convolutions: warm and manage the kernel cache, verify, time, tune",
               "conv3djit"};
  app.set_version_flag("--version", std::string("conv3djit ") + conv3djit::version());
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand
  app.footer(kExitCodesHelp);  // before the subcommands: each copies its parent's footer

  GlobalOptions global;
  app.add_option("--cache-dir", global.cache_dir,
                 "kernel cache folder (default: $CONV3DJIT_CACHE_DIR, $XDG_CACHE_HOME/conv3djit, "
                 "~/.cache/conv3djit)")
      ->type_name("DIR")
      // An empty name would silently mean the default folder.
      ->check([](const std::string& dir) { return dir.empty() ? std::string("must not be empty") : std::string(); });
  app.add_flag("-v,--verbose", global.verbose, "log debug messages to stderr");

  std::vector<Command> commands = {add_precompile_command(app, global), add_verify_command(app, global),
                                   add_run_command(app, global), add_bench_command(app, global),
                                   add_tune_command(app, global),
                                   add_families_command(app), add_plan_command(app, global)};
  for (Command& command : add_cache_commands(app, global)) commands.push_back(std::move(command));

  if (argc == 1) {
    fmt::print("{}", app.help());
    return static_cast<int>(CLI::ExitCodes::RequiredError);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // The first argument that CLI11 left over while no command was given was meant as the command.
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    const std::vector<std::string> left = app.remaining();
    const auto word = std::find_if(left.begin(), left.end(), [](const std::string& a) { return a.rfind('-', 0) != 0; });
    if (app.get_subcommands().empty() && word != left.end() &&
        std::find(names.begin(), names.end(), *word) == names.end()) {
      return app.exit(unknown_command(names, *word));
    }
    return app.exit(e);
  }
  // The library's own logger (made on first use, level from CONV3DJIT_LOG_LEVEL).
  if (global.verbose) conv3djit::detail::log().set_level(spdlog::level::debug);

  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    try {
      return command.run();
    } catch (const conv3djit::Error& e) {
      fmt::print(stderr, "error: {}: {}\n", conv3djit::to_string(e.category()), e.message());
      return e.category() == conv3djit::ErrorCategory::NoDevice ? kExitNoDevice : kExitFailed;
    } catch (const std::exception& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      return kExitFailed;
    }
  }
  return kExitFailed;  // unreachable: require_subcommand(1)
}
