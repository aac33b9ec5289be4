// `conv3djit tune`: time the planner's best few kernels for one shape (flags) or each shape of a
// manifest on this GPU and keep the fastest accurate one as a tuned record in the disk cache,
// which every later plan of that description on this kind of device takes (Engine::tune).
// Descriptions are tuned one after another: each measurement needs the GPU to itself.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "build_info.hpp"
#include "cli.hpp"
#include "device.hpp"
#include "progress.hpp"

namespace conv3djit::cli {
namespace {

// File-local names differ from those of the other sources of its unity group (cmd_bench.cpp's
// Row, or_null, ...).

struct TuneCmdOptions {
  ShapeFlags shape;
  std::string manifest;
  TuneOptions tuning;
  bool retune = false;
  bool json = false;
};

// One description's outcome: the library's result, or why there is none.
struct TunedRow {
  NamedDesc named;
  TuneResult result;
  std::string error;  // non-empty: tune() threw, or the record could not be stored
};

// The planner's choice over the winner's time (> 1: the winner is faster), as measured now or
// when the record was made.
std::optional<double> tuned_speedup(const TunedRow& row) {
  const TuneResult& r = row.result;
  if (r.winner < 0 || r.heuristic_ms <= 0 || r.best().median_ms <= 0) return std::nullopt;
  return r.heuristic_ms / r.best().median_ms;
}

nlohmann::json tuned_number(double value) { return value < 0 ? nlohmann::json(nullptr) : nlohmann::json(value); }

nlohmann::json tuned_row_json(const TunedRow& row) {
  const TuneResult& r = row.result;
  nlohmann::json candidates = nlohmann::json::array();
  for (const TunedCandidate& c : r.candidates) {
    candidates.push_back({{"kernel", c.kernel},
                          {"config", c.config},
                          {"heuristic", c.heuristic},
                          {"median_ms", tuned_number(c.median_ms)},
                          {"rel_l2", tuned_number(c.rel_l2)},
                          {"ready_ms", tuned_number(c.ready_ms)},
                          {"accurate", c.accurate},
                          {"error", c.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.error)}});
  }
  const std::optional<double> speedup = tuned_speedup(row);
  return {{"name", row.named.name},
          {"description", r.description.empty() ? describe(row.named.desc) : r.description},
          {"device", r.device},
          {"tuning_ms", r.tuning_ms},
          {"from_record", r.from_record},
          {"stored", r.stored},
          {"store_problem", r.store_problem.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.store_problem)},
          {"winner", r.winner},
          {"heuristic_ms", tuned_number(r.heuristic_ms)},
          {"tuned_unix", r.tuned_unix},
          {"speedup", speedup ? nlohmann::json(*speedup) : nlohmann::json(nullptr)},
          {"candidates", std::move(candidates)},
          {"error", row.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.error)}};
}

// One description's table: every candidate with its time, its ratio to the planner's choice
// (heuristic ms / its ms) and its sampled rel-L2, the winner marked with '*'.
void print_tuned_row(const TunedRow& row) {
  const TuneResult& r = row.result;
  fmt::print("{}\n", row.named.name);
  if (row.named.name != describe(row.named.desc)) fmt::print("  {}\n", describe(row.named.desc));
  if (!r.device.empty()) fmt::print("  device {}\n", r.device);
  if (r.from_record) {
    fmt::print("  from the tuned record (nothing timed; --retune times again)\n");
  } else if (!r.candidates.empty()) {
    fmt::print("  tuned in {:.1f} ms\n", r.tuning_ms);
  }
  if (!r.candidates.empty()) {
    const double heuristic_ms = r.heuristic_ms;
    fmt::print("     {:>10}  {:>8}  {:>9}  {}\n", "MEDIAN_MS", "VS_PLAN", "REL_L2", "CONFIG / KERNEL");
    for (size_t i = 0; i < r.candidates.size(); ++i) {
      const TunedCandidate& c = r.candidates[i];
      const bool timed = c.median_ms >= 0;
      const std::string ms = timed ? fmt::format("{:.4f}", c.median_ms) : "n/a";
      const std::string ratio =
          timed && c.median_ms > 0 && heuristic_ms > 0 ? fmt::format("{:.2f}x", heuristic_ms / c.median_ms) : "n/a";
      std::string rel_l2 = c.rel_l2 >= 0 ? fmt::format("{:.1e}", c.rel_l2) : "n/a";
      if (c.rel_l2 >= 0 && !c.accurate) rel_l2 += " FAIL";
      const char* mark = static_cast<int>(i) == r.winner ? "*" : " ";
      fmt::print("  {}  {:>10}  {:>8}  {:>9}  {}{}\n", mark, ms, ratio, rel_l2, c.config,
                 c.heuristic ? "  (planner's choice)" : "");
      fmt::print("     {:>10}  {:>8}  {:>9}  {}\n", "", "", "", c.kernel);
      if (!c.error.empty()) fmt::print("     {:>10}  {:>8}  {:>9}  {}\n", "", "", "", c.error);
    }
  }
  if (!row.error.empty()) fmt::print("  error: {}\n", row.error);
  fmt::print("\n");
  std::fflush(stdout);  // a description takes up to the budget; show each as it comes
}

struct TuneTotals {
  int descriptions = 0, tuned = 0, from_records = 0, failed = 0;
  double tuning_ms = 0;
  int speedups = 0;  // descriptions in the geometric mean
  std::optional<double> geomean_speedup;
};

TuneTotals tune_totals(const std::vector<TunedRow>& rows) {
  TuneTotals t;
  double log_sum = 0;
  for (const TunedRow& row : rows) {
    ++t.descriptions;
    if (!row.error.empty()) {
      ++t.failed;
    } else if (row.result.from_record) {
      ++t.from_records;
    } else {
      ++t.tuned;
    }
    t.tuning_ms += row.result.tuning_ms;
    if (const std::optional<double> s = tuned_speedup(row)) {
      log_sum += std::log(*s);
      ++t.speedups;
    }
  }
  if (t.speedups > 0) t.geomean_speedup = std::exp(log_sum / t.speedups);
  return t;
}

void tune_throw_no_device() {
  throw Error(ErrorCategory::NoDevice, "no CUDA device: tuning times kernels on the GPU it tunes for");
}

int run_tune(const TuneCmdOptions& options, const GlobalOptions& global) {
  const std::vector<NamedDesc> descs = read_shapes(options.shape, options.manifest);
  const std::optional<DeviceInfo> device = current_device();
  if (!device) tune_throw_no_device();
  make_context_current();
  EngineOptions engine_options = global.engine_options();
  engine_options.tuning = options.tuning;
  Engine engine(engine_options);

  std::vector<TunedRow> rows;
  {
    // The table prints each description as it is tuned; under --json the bar shows the progress
    // (on a terminal), erased before the report.
    std::optional<Progress> progress;
    if (options.json) progress.emplace(descs.size());
    for (const NamedDesc& named : descs) {
      TunedRow row;
      row.named = named;
      try {
        row.result = engine.tune(named.desc, nullptr, options.retune);
        if (!row.result.stored) {
          row.error = fmt::format("the record is not in the disk cache '{}': {}", engine.cache_info().dir,
                                  row.result.store_problem);
        }
      } catch (const Error& e) {
        if (e.category() == ErrorCategory::NoDevice) throw;
        row.error = e.what();
      } catch (const std::exception& e) {
        row.error = e.what();
      }
      if (progress) {
        progress->advance(named.name);
      } else {
        print_tuned_row(row);
      }
      rows.push_back(std::move(row));
    }
  }

  const TuneTotals totals = tune_totals(rows);
  if (options.json) {
    nlohmann::json out_rows = nlohmann::json::array();
    for (const TunedRow& row : rows) out_rows.push_back(tuned_row_json(row));
    const nlohmann::json out = {
        {"device",
         {{"name", device->name}, {"arch", device->arch}, {"sm_count", device->sm_count},
          {"driver_version", device->driver_version}}},
        {"conv3djit_version", version()},
        {"commit", source_commit()},
        {"cache_dir", engine.cache_info().dir},
        {"max_candidates", options.tuning.max_candidates},
        {"budget_ms", options.tuning.budget_ms},
        {"runs", options.tuning.runs},
        {"retune", options.retune},
        {"descriptions", std::move(out_rows)},
        {"totals",
         {{"descriptions", totals.descriptions},
          {"tuned", totals.tuned},
          {"from_records", totals.from_records},
          {"failed", totals.failed},
          {"tuning_ms", totals.tuning_ms},
          {"geomean_speedup", totals.geomean_speedup ? nlohmann::json(*totals.geomean_speedup) : nlohmann::json(nullptr)},
          {"speedup_descriptions", totals.speedups}}}};
    fmt::print("{}\n", out.dump());
  } else {
    const std::string speedup =
        totals.geomean_speedup
            ? fmt::format("{:.2f}x over {} tuned", *totals.geomean_speedup, totals.speedups)
            : std::string("n/a (none tuned now)");
    fmt::print("{} descriptions: {} tuned, {} from records, {} failed; {:.1f} s tuning; geometric-mean speedup of "
               "the winners over the planner's choice: {}\n",
               totals.descriptions, totals.tuned, totals.from_records, totals.failed, totals.tuning_ms / 1000.0,
               speedup);
  }
  for (const TunedRow& row : rows) {
    if (!row.error.empty()) {
      fmt::print(stderr, "error: {}: {}\n", row.named.name, row.error);
    }
  }
  return totals.failed > 0 ? kExitFailed : kExitOk;
}

// Parses an int flag's text itself, so that every rejected value says what was expected.
CLI::Validator tune_int_at_least(int min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        int value = 0;
        const char* first = text.data();
        const char* last = first + text.size();
        const auto [ptr, ec] = std::from_chars(first, last, value);
        if (ec == std::errc::result_out_of_range && ptr == last) {
          return fmt::format("must be at most {}, got {}", std::numeric_limits<int>::max(), text);
        }
        if (text.empty() || ec != std::errc() || ptr != last) {
          return fmt::format("expected an integer >= {}, got '{}'", min, text);
        }
        if (value < min) return fmt::format("must be >= {}, got {}", min, value);
        return {};
      },
      "");
}

CLI::Validator tune_positive_ms() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value)) {
          return fmt::format("expected a number of milliseconds, got '{}'", text);
        }
        if (!(value > 0)) return fmt::format("must be > 0 ms, got {}", text);
        return {};
      },
      "");
}

}  // namespace

Command add_tune_command(CLI::App& app, const GlobalOptions& global) {
  auto options = std::make_shared<TuneCmdOptions>();
  const TuneOptions defaults;
  CLI::App* cmd = app.add_subcommand(
      "tune", "time the best few kernels for each shape on this GPU and keep the fastest accurate one in the cache");
  add_shape_or_manifest_flags(*cmd, options->shape, options->manifest);
  cmd->add_option("--max-candidates", options->tuning.max_candidates,
                  fmt::format("kernels timed per shape, the planner's choice first (default {})", defaults.max_candidates))
      ->type_name("N")
      ->check(tune_int_at_least(1));
  cmd->add_option("--budget-ms", options->tuning.budget_ms,
                  fmt::format("wall time per shape, compiles included; candidates after the planner's choice are "
                              "skipped once it is spent (default {})",
                              defaults.budget_ms))
      ->type_name("MS")
      ->check(tune_positive_ms());
  cmd->add_option("--runs", options->tuning.runs,
                  fmt::format("timed launches per candidate after one warm-up, the median counts (default {})",
                              defaults.runs))
      ->type_name("N")
      ->check(tune_int_at_least(1));
  cmd->add_flag("--retune", options->retune, "time again where a tuned record exists (default: use the record)");
  cmd->add_flag("--json", options->json, "print one JSON object on stdout");
  return {cmd, [options, &global] { return run_tune(*options, global); }};
}

}  // namespace conv3djit::cli
