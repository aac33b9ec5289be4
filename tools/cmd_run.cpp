// `conv3djit run`: time one shape, or each shape of a manifest, with CUDA events, back to back
// on one stream, and report the median and best time with the throughput they mean.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>

#include "build_info.hpp"
#include "cli.hpp"
#include "plan/forced_config.hpp"
#include "device.hpp"
#include "jit/kernel_sources.hpp"

namespace conv3djit::cli {
namespace {

struct RunOptions {
  ShapeFlags shape;
  std::string manifest;
  TimingFlags timing;
  int64_t input_offset = 0;
};

struct Timing {
  std::string kernel;
  double first_ms, median_ms, min_ms, tflops, gbps;
};

Timing time_shape(Engine& engine, const Conv3dDesc& desc, const TimingFlags& timing, int64_t input_offset) {
  const uint64_t seed = timing.seed_or_fresh();
  ProblemData data(desc, seed, input_offset);
  Stream stream;
  fill_nan(data.d_output);
  Conv3dTensors tensors = data.tensors();
  PreparedWeights prepared;
  if (timing.prepared_weights) {
    prepared = engine.prepare_weights(desc, tensors.weight, stream.get());
    tensors.prepared_weights = &prepared;
  }

  // The first call pays for the compile or the cache load; report it apart from the timings.
  const auto first_start = std::chrono::steady_clock::now();
  engine.run(desc, tensors, stream.get());
  stream.synchronize();
  const double first_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - first_start).count();
  for (int i = 0; i < timing.warmup; ++i) engine.run(desc, tensors, stream.get());

  // One event between consecutive launches keeps the queue full while timing each launch.
  std::vector<Event> events(static_cast<size_t>(timing.iters) + 1);
  events[0].record(stream);
  for (int i = 0; i < timing.iters; ++i) {
    engine.run(desc, tensors, stream.get());
    events[i + 1].record(stream);
  }
  stream.synchronize();
  std::vector<double> times_ms;
  for (size_t i = 1; i < events.size(); ++i) times_ms.push_back(events[i].since(events[i - 1]));

  const double median_ms = median(times_ms);
  return {engine.kernel_for(desc),
          first_ms,
          median_ms,
          *std::min_element(times_ms.begin(), times_ms.end()),
          2 * macs(desc) / (median_ms * 1e-3) / 1e12,
          static_cast<double>(data.traffic_bytes()) / (median_ms * 1e-3) / 1e9};
}

int run_run(const RunOptions& options, const GlobalOptions& global) {
  const bool manifest = !options.manifest.empty();
  const std::vector<NamedDesc> descs = read_shapes(options.shape, options.manifest);
  make_context_current();
  Engine engine(global.engine_options(options.timing.config));

  size_t width = 4;
  for (const NamedDesc& d : descs) width = std::max(width, d.name.size());
  if (manifest && !options.timing.json) {
    fmt::print("{:<{}}  {:>10}  {:>10}  {:>8}  {}\n", "NAME", width, "MEDIAN_MS", "MIN_MS", "TFLOP/S", "KERNEL");
  }
  bool refused = false;
  for (const NamedDesc& d : descs) {
    Timing t;
    try {
      t = time_shape(engine, d.desc, options.timing, options.input_offset);
    } catch (const Error& e) {
      // A manifest's other shapes still run (a forced configuration may refuse some of them); the
      // exit status tells.
      if (!manifest || e.category() == ErrorCategory::NoDevice) throw;
      refused = true;
      if (options.timing.json) {
        fmt::print("{}\n", nlohmann::json{{"name", d.name}, {"error", e.what()}}.dump());
      } else {
        fmt::print("{:<{}}  not run: {}\n", d.name, width, e.what());
      }
      std::fflush(stdout);
      continue;
    }
    if (options.timing.json) {  // one object a shape (JSON lines)
      const nlohmann::json out = {{"name", d.name},           {"kernel", t.kernel},
                                  {"dtype", dtype_name(d.desc.dtype)},
                                  {"output_dtype", dtype_name(output_dtype(d.desc))},
                                  {"layout", layout_name(d.desc.layout)},
                                  {"first_call_ms", t.first_ms}, {"median_ms", t.median_ms},
                                  {"min_ms", t.min_ms},       {"iters", options.timing.iters},
                                  {"warmup", options.timing.warmup}, {"tflops", t.tflops},
                                  {"prepared_weights", options.timing.prepared_weights},
                                  {"gbps", t.gbps},           {"commit", source_commit()},
                                  {"kernel_sources_sha256", detail::kernel_sources_hash()}};
      fmt::print("{}\n", out.dump());
    } else if (manifest) {
      fmt::print("{:<{}}  {:>10.4f}  {:>10.4f}  {:>8.2f}  {}\n", d.name, width, t.median_ms, t.min_ms, t.tflops,
                 t.kernel);
    } else {
      fmt::print("shape       {}\n", d.name);
      fmt::print("kernel      {}\n", t.kernel);
      fmt::print("first call  {:.1f} ms (compile or cache load included)\n", t.first_ms);
      fmt::print("median      {:.4f} ms   min {:.4f} ms   ({} iterations after {} warm-up)\n", t.median_ms,
                 t.min_ms, options.timing.iters, options.timing.warmup);
      fmt::print("compute     {:.2f} TFLOP/s\n", t.tflops);
      fmt::print("memory      {:.1f} GB/s\n", t.gbps);
    }
    std::fflush(stdout);
  }
  return refused ? kExitFailed : kExitOk;
}

}  // namespace

CLI::Option* add_config_flag(CLI::App& cmd, std::string& config) {
  // Checked against the families' field tables before any device work.
  const CLI::Validator check(
      [](std::string& value) -> std::string {
        try {
          detail::parse_config(value);
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      },
      "");
  return cmd
      .add_option("--config", config,
                  fmt::format("fixed kernel configuration instead of the planner's choice: FAMILY:V1,V2,... or "
                              "FAMILY:name=value,... (`conv3djit families` explains the fields): {}",
                              detail::config_forms()))
      ->type_name("CONFIG")
      ->check(check);
}

uint64_t TimingFlags::seed_or_fresh() const { return seed_option->count() > 0 ? seed : random_seed(); }

void add_timing_flags(CLI::App& cmd, TimingFlags& flags, int warmup, const std::string& warmup_help, int iters,
                      const std::string& iters_help, const std::string& json_help) {
  flags.warmup = warmup;
  flags.iters = iters;
  add_config_flag(cmd, flags.config);
  cmd.add_option("--warmup", flags.warmup, fmt::format("{} (default {})", warmup_help, warmup))
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--iters", flags.iters, fmt::format("{} (default {})", iters_help, iters))
      ->check(CLI::PositiveNumber);
  flags.seed_option = cmd.add_option("--seed", flags.seed, "random seed of the inputs (default: fresh)");
  cmd.add_flag("--json", flags.json, json_help);
  cmd.add_flag("--prepared-weights", flags.prepared_weights,
               "prepare the weights once before timing (Engine::prepare_weights), as a deployment with fixed "
               "weights can: the calls then skip the plan's weights step");
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

Command add_run_command(CLI::App& app, const GlobalOptions& global) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "time one shape, or each shape of a manifest, on the GPU");
  add_shape_or_manifest_flags(*cmd, options->shape, options->manifest);
  add_timing_flags(*cmd, options->timing, 5, "untimed runs before timing", 50, "timed runs",
                   "print JSON on stdout: one object (one line) per shape");
  cmd->add_option("--input-offset", options->input_offset,
                  "start the input this many elements (of --dtype) into its allocation (1: aligned to one "
                  "element only, like a view into a larger tensor; default 0)")
      ->check(CLI::NonNegativeNumber);
  return {cmd, [options, &global] { return run_run(*options, global); }};
}

}  // namespace conv3djit::cli
