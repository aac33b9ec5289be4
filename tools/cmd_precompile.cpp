// `conv3djit precompile`: warm the kernel cache for one shape (flags) or many (--manifest), on this
// GPU's arch or, with --arch, on a machine without a GPU (build servers, container images).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli.hpp"
#include "progress.hpp"

namespace conv3djit::cli {

std::string target_arch(const std::string& requested) {
  if (!requested.empty()) {
    check_arch(requested);  // before any description is read into a compile
    return requested;
  }
  const std::optional<DeviceInfo> device = current_device();
  if (!device) {
    throw Error(ErrorCategory::NoDevice, "no CUDA device; pass --arch sm_XX to work without one");
  }
  return device->arch;
}

namespace {

struct PrecompileOptions {
  ShapeFlags shape;
  std::string manifest;
  std::string arch;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool json = false;
  int repeat = 0;  // > 0: time this many cold compiles of each kernel instead of warming the cache
  std::string config;  // a forced configuration: the kernels a benchmark or a tuned record names
  int candidates = 0;  // > 0: also the first N configurations `tune` would time for each shape
};

// The descriptions compiled under one forced configuration ("" : the planner's choice).
struct ConfigGroup {
  std::string config;
  std::vector<NamedDesc> descs;
};

// --candidates N: each shape under the planner's choice and under each of the first N
// configurations `tune` would time for it (the planner's first), grouped by configuration, so
// that an engine that tunes on first use finds every candidate's kernels in the cache.
std::vector<ConfigGroup> config_groups(const GlobalOptions& global, const std::vector<NamedDesc>& descs,
                                       const std::string& arch, const std::string& config, int candidates) {
  std::vector<ConfigGroup> groups{{config, descs}};
  if (candidates <= 0) return groups;
  Engine planner(global.engine_options());
  std::map<std::string, size_t> group_of;
  for (const NamedDesc& d : descs) {
    const std::vector<std::string> configs = planner.explain(d.desc, arch, candidates).candidates;
    for (size_t i = 1; i < configs.size(); ++i) {  // (the first is the planner's: the group above)
      auto [it, inserted] = group_of.emplace(configs[i], groups.size());
      if (inserted) groups.push_back({configs[i], {}});
      groups[it->second].descs.push_back(d);
    }
  }
  return groups;
}

// What happened to one description.
struct Attempt {
  PrecompileResult result;
  std::string error;  // non-empty: failed
};

// One line of the report: a kernel (descriptions sharing a key are merged) or a failure.
struct Row {
  std::string key;
  std::string status;  // "compiled" | "cached" | "failed"
  double compile_ms = 0;
  std::string name;    // the first description that needed it
  std::string kernel;
  int descriptions = 0;
  std::string error;
  std::string notes;  // the compiler's notes on a kernel compiled now
  bool on_disk = false;
  std::vector<double> samples;  // --repeat: every compile's time; compile_ms is their median
  int registers = -1, stack_bytes = -1;  // from the cubin
  long long code_bytes = -1;
};

// One description to compile under one engine (its forced configuration).
struct Job {
  Engine* engine;
  const NamedDesc* desc;
};

// The jobs of every group, each group under an engine of its own configuration.
// `cold`: engines that keep kernels in memory only (every compile a compile, the disk cache left
// alone).
std::vector<Job> jobs_of(const std::vector<ConfigGroup>& groups, std::vector<std::unique_ptr<Engine>>& engines,
                         const GlobalOptions& global, bool cold) {
  std::vector<Job> jobs;
  for (const ConfigGroup& group : groups) {
    EngineOptions options = global.engine_options(group.config);
    if (cold) options.disk_cache = false;
    engines.push_back(std::make_unique<Engine>(options));
    for (const NamedDesc& d : group.descs) jobs.push_back({engines.back().get(), &d});
  }
  return jobs;
}

// Engine::precompile is thread-safe and single-flight per key, so workers just take the next
// job; identical keys compiled at once cost one compile.
std::vector<Attempt> compile_all(const std::vector<Job>& jobs, const std::string& arch, int threads) {
  std::vector<Attempt> attempts(jobs.size());
  std::atomic<size_t> next{0};
  Progress progress(jobs.size());
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      try {
        attempts[i].result = jobs[i].engine->precompile(jobs[i].desc->desc, arch);
      } catch (const std::exception& e) {
        attempts[i].error = e.what();
      }
      progress.advance(jobs[i].desc->name);
    }
  };
  std::vector<std::thread> workers;
  const size_t count = std::min(jobs.size(), static_cast<size_t>(threads));
  for (size_t t = 0; t < count; ++t) workers.emplace_back(work);
  for (std::thread& worker : workers) worker.join();
  return attempts;
}

// One row per distinct cache entry (the description's kernel and each helper kernel), in
// first-use order: an entry counts as compiled if any description compiled it, so a shared kernel
// is reported once, never as compiled and cached.
std::vector<Row> merge(const std::vector<Job>& jobs, const std::vector<Attempt>& attempts) {
  std::vector<Row> rows;
  std::map<std::string, size_t> row_of_key;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Attempt& a = attempts[i];
    const std::string& name = jobs[i].desc->name;
    if (!a.error.empty()) {
      rows.push_back({"", "failed", 0, name, "", 1, a.error, "", false, {}});
      continue;
    }
    for (const PrecompiledKernel& k : a.result.kernels) {
      auto [it, inserted] = row_of_key.emplace(k.key, rows.size());
      if (inserted) {
        rows.push_back({k.key, "cached", 0, name, k.kernel, 0, "", "", k.on_disk, {}, k.registers,
                        k.stack_bytes, k.code_bytes});
      }
      Row& row = rows[it->second];
      ++row.descriptions;
      if (k.compiled) {
        row.status = "compiled";
        row.compile_ms = std::max(row.compile_ms, k.compile_ms);
        if (row.notes.empty()) row.notes = k.compiler_notes;
      }
    }
  }
  return rows;
}

// --repeat: each round compiles every kernel once more, one at a time, in fresh Engines (one a
// configuration) that keep kernels in memory only, so that every compile is cold and the disk
// cache is left alone. Rounds
// interleave the kernels, so a slow spell of the host spreads over all of them, and each kernel
// reports the median of its rounds (rows come in the same order every round).
std::vector<Row> time_compiles(const GlobalOptions& global, const std::vector<ConfigGroup>& groups,
                               const std::string& arch, int repeat) {
  std::vector<Row> rows;
  for (int round = 0; round < repeat; ++round) {
    std::vector<std::unique_ptr<Engine>> engines;
    const std::vector<Job> jobs = jobs_of(groups, engines, global, true);
    const std::vector<Row> sampled = merge(jobs, compile_all(jobs, arch, 1));
    if (round == 0) rows = sampled;
    for (size_t i = 0; i < rows.size(); ++i) rows[i].samples.push_back(sampled[i].compile_ms);
  }
  for (Row& row : rows) {
    if (row.status == "compiled") row.compile_ms = median(row.samples);
  }
  return rows;
}

void print_json(const std::string& arch, const std::vector<Row>& rows, double wall_ms, int repeat) {
  nlohmann::json kernels = nlohmann::json::array();
  std::map<std::string, int> counts{{"compiled", 0}, {"cached", 0}, {"failed", 0}};
  for (const Row& row : rows) {
    ++counts[row.status];
    nlohmann::json k = {{"key", row.key},          {"status", row.status},
                        {"compile_ms", row.compile_ms}, {"name", row.name},
                        {"kernel", row.kernel},    {"descriptions", row.descriptions},
                        {"on_disk", row.on_disk}};
    if (row.status != "failed") {
      k["registers"] = row.registers;
      k["stack_bytes"] = row.stack_bytes;
      k["code_bytes"] = row.code_bytes;
    }
    if (!row.error.empty()) k["error"] = row.error;
    if (!row.notes.empty()) k["notes"] = row.notes;
    if (!row.samples.empty()) k["compile_ms_samples"] = row.samples;
    kernels.push_back(std::move(k));
  }
  nlohmann::json out = {{"arch", arch},
                        {"compiled", counts["compiled"]},
                        {"cached", counts["cached"]},
                        {"failed", counts["failed"]},
                        {"wall_ms", wall_ms},
                        {"repeat", repeat},
                        {"kernels", std::move(kernels)}};
  fmt::print("{}\n", out.dump());
}

void print_table(const std::string& arch, const std::vector<Row>& rows, double wall_ms) {
  std::map<std::string, int> counts;
  fmt::print("{:<8}  {:>10}  {}\n", "STATUS", "COMPILE_MS", "NAME / KERNEL");
  for (const Row& row : rows) {
    ++counts[row.status];
    fmt::print("{:<8}  {:>10.1f}  {}\n", row.status, row.compile_ms, row.name);
    if (!row.kernel.empty()) fmt::print("{:<8}  {:>10}  {}\n", "", "", row.kernel);
    if (row.stack_bytes > 0) {
      fmt::print("{:<8}  {:>10}  local memory: {} bytes of stack a thread at {} registers\n", "", "", row.stack_bytes,
                 row.registers);
    }
    if (!row.error.empty()) fmt::print("{:<8}  {:>10}  error: {}\n", "", "", row.error);
    if (!row.notes.empty()) fmt::print("{:<8}  {:>10}  compiler notes: {}\n", "", "", row.notes);
    if (!row.samples.empty()) {
      const auto [lo, hi] = std::minmax_element(row.samples.begin(), row.samples.end());
      fmt::print("{:<8}  {:>10}  {} compiles: median {:.1f} ms, min {:.1f}, max {:.1f}\n", "", "",
                 row.samples.size(), row.compile_ms, *lo, *hi);
    }
  }
  const auto stored = std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.on_disk; });
  fmt::print("{}: {} compiled, {} cached, {} failed in {:.1f} s; {} cache entries on disk\n", arch,
             counts["compiled"], counts["cached"], counts["failed"], wall_ms / 1000.0, stored);
}

int run_precompile(const PrecompileOptions& options, const GlobalOptions& global) {
  const std::vector<NamedDesc> descs = read_shapes(options.shape, options.manifest);
  const std::string arch = target_arch(options.arch);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ConfigGroup> groups = config_groups(global, descs, arch, options.config, options.candidates);
  std::vector<Row> rows;
  if (options.repeat > 0) {
    rows = time_compiles(global, groups, arch, options.repeat);
  } else {
    std::vector<std::unique_ptr<Engine>> engines;
    const std::vector<Job> jobs = jobs_of(groups, engines, global, false);
    rows = merge(jobs, compile_all(jobs, arch, options.jobs));
  }
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (options.json) {
    print_json(arch, rows, wall_ms, options.repeat);
  } else {
    print_table(arch, rows, wall_ms);
  }
  const bool failed = std::any_of(rows.begin(), rows.end(),
                                  [](const Row& row) { return row.status == "failed"; });
  return failed ? kExitFailed : kExitOk;
}

}  // namespace

Command add_precompile_command(CLI::App& app, const GlobalOptions& global) {
  auto options = std::make_shared<PrecompileOptions>();
  CLI::App* cmd = app.add_subcommand("precompile", "compile kernels into the cache ahead of use");
  add_shape_or_manifest_flags(*cmd, options->shape, options->manifest);
  cmd->add_option("--arch", options->arch, "target like sm_90 or sm_90a; needs no GPU (default: this GPU's)");
  CLI::Option* config = add_config_flag(*cmd, options->config);
  cmd->add_option("--candidates", options->candidates,
                  "also compile the first N configurations `tune` would time for each shape (the planner's "
                  "first), as `plan --candidates` lists them: a cache for engines that tune on first use")
      ->check(CLI::Range(1, 64))
      ->excludes(config);
  CLI::Option* jobs = cmd->add_option("-j,--jobs", options->jobs, "parallel compiles (default: all cores)")
                          ->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", options->json, "print one JSON object on stdout");
  cmd->add_option("--repeat", options->repeat,
                  "time N cold compiles of each kernel, one at a time and without the disk cache, "
                  "and report each kernel's median (a measurement: the cache is not warmed)")
      ->check(CLI::Range(1, 1000))
      ->excludes(jobs);
  return {cmd, [options, &global] { return run_precompile(*options, global); }};
}

}  // namespace conv3djit::cli
