// `conv3djit plan`: which kernel a shape runs on (Engine::explain), how it is launched, the kernels
// around it, and why each family before it in the planner's order passed the shape on. Plans
// only: nothing is compiled or launched, and no GPU is needed with --arch.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace conv3djit::cli {
namespace {

struct PlanOptions {
  ShapeFlags shape;
  std::string manifest;
  std::string arch;
  std::string config;
  int candidates = 0;  // > 0: also the configurations `tune` would time
  bool json = false;
};

nlohmann::json to_json(const NamedDesc& d, const PlanExplanation& e) {
  nlohmann::json steps = nlohmann::json::array(), passed = nlohmann::json::array();
  for (const PlanStep& s : e.steps) {
    steps.push_back({{"role", s.role}, {"kernel", s.kernel}, {"grid", s.grid}, {"block", s.block},
                     {"shared_bytes", s.shared_bytes}, {"scratch_bytes", s.scratch_bytes}});
  }
  for (const auto& [family, why] : e.passed) passed.push_back({{"family", family}, {"passed", why}});
  return {{"name", d.name},         {"description", describe(d.desc)}, {"kernel", e.kernel},
          {"grid", e.grid},         {"block", e.block},                {"shared_bytes", e.shared_bytes},
          {"source", e.source},     {"steps", std::move(steps)},       {"passed", std::move(passed)},
          {"candidates", e.candidates}};
}

void print(const NamedDesc& d, const PlanExplanation& e) {
  fmt::print("{}\n  kernel  {}\n  launch  {} blocks of {} threads, {} bytes of dynamic shared memory\n", d.name,
             e.kernel, e.grid, e.block, e.shared_bytes);
  for (const PlanStep& s : e.steps) {
    fmt::print("  {}: {}\n          {} blocks of {} threads", s.role, s.kernel, s.grid, s.block);
    if (s.scratch_bytes > 0) fmt::print(", {} bytes of scratch", s.scratch_bytes);
    fmt::print("\n");
  }
  if (e.source != "planner") fmt::print("  chosen by the {}\n", e.source);
  for (const auto& [family, why] : e.passed) fmt::print("  {:<16}passed: {}\n", family, why);
  if (e.source == "planner") fmt::print("  {:<16}takes it\n", e.kernel.substr(0, e.kernel.find(' ')));
  for (const std::string& c : e.candidates) fmt::print("  tune    {}\n", c);
}

int run_plan(const PlanOptions& options, const GlobalOptions& global) {
  const std::vector<NamedDesc> descs = read_shapes(options.shape, options.manifest);
  const std::string arch = target_arch(options.arch);
  Engine engine(global.engine_options(options.config));
  nlohmann::json plans = nlohmann::json::array();
  for (const NamedDesc& d : descs) {
    const PlanExplanation e = engine.explain(d.desc, options.arch, options.candidates);
    if (options.json) {
      plans.push_back(to_json(d, e));
    } else {
      print(d, e);
    }
  }
  if (options.json) fmt::print("{}\n", nlohmann::json{{"arch", arch}, {"plans", std::move(plans)}}.dump());
  return kExitOk;
}

}  // namespace

Command add_plan_command(CLI::App& app, const GlobalOptions& global) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "show the kernel a shape runs on, its launch and helpers, and why the families before it "
              "passed (nothing is compiled)");
  add_shape_or_manifest_flags(*cmd, options->shape, options->manifest);
  cmd->add_option("--arch", options->arch,
                  "target like sm_90 or sm_80; needs no GPU (default: this GPU's, where a tuned record counts)");
  CLI::Option* config = add_config_flag(*cmd, options->config);
  cmd->add_option("--candidates", options->candidates,
                  "also list the first N configurations `tune` would time (the planner's first), each a --config")
      ->check(CLI::Range(1, 64))
      ->excludes(config);
  cmd->add_flag("--json", options->json, "print one JSON object on stdout");
  return {cmd, [options, &global] { return run_plan(*options, global); }};
}

}  // namespace conv3djit::cli
