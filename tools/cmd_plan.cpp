// `conv3djit plan`: which kernel the planner picks for a shape on an arch, how it is launched,
// the kernels that run before it, and why each family before it in the planner's order passed
// the shape on. Plans only: nothing is compiled or launched, and no GPU is needed with --arch.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "core/problem.hpp"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"
#include "plan/plan.hpp"
#include "tune/candidates.hpp"

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

// A kernel launched around the convolution: its role, key and launch.
struct PlanStep {
  std::string role, kernel;
  unsigned grid = 0, block = 0, shared_bytes = 0;
  uint64_t scratch_bytes = 0;
};

std::vector<PlanStep> steps_of(const detail::Plan& plan) {
  std::vector<PlanStep> steps;
  auto step = [&](const char* role, const detail::PrepPlan& p) {
    steps.push_back({role, detail::canonical_text(p.key), p.grid, p.block, 0, p.workspace_bytes});
  };
  if (plan.prep) step("weights", *plan.prep);
  if (plan.input_copy) {
    step(plan.input_copy->every_call ? "input copy" : "input copy, where rows or alignment need one", *plan.input_copy);
  }
  if (plan.unaligned) {
    const detail::Plan& twin = *plan.unaligned;
    steps.push_back({"instead, for an input off a 16-byte boundary", detail::canonical_text(twin.key), twin.grid,
                     twin.block, twin.shared_bytes, 0});
  }
  return steps;
}

int run_plan(const PlanOptions& options) {
  const std::vector<NamedDesc> descs = read_shapes(options.shape, options.manifest);
  const std::string arch = target_arch(options.arch);
  const detail::DeviceLimits limits = detail::limits_for_arch(arch);
  nlohmann::json plans = nlohmann::json::array();
  for (const NamedDesc& d : descs) {
    const detail::Problem prob = detail::make_problem(d.desc);
    std::vector<detail::FamilyVerdict> verdicts;
    const detail::Plan plan = options.config.empty() ? detail::explain_plan(prob, limits, &verdicts)
                                                     : detail::make_plan(prob, limits, options.config);
    const std::vector<PlanStep> steps = steps_of(plan);
    std::vector<std::string> tuned;
    if (options.candidates > 0) {
      for (const detail::Candidate& c : detail::tuning_candidates(prob, limits, options.candidates)) {
        tuned.push_back(c.config);
      }
    }
    if (options.json) {
      nlohmann::json j = {{"name", d.name},       {"description", describe(d.desc)},
                          {"kernel", detail::canonical_text(plan.key)},
                          {"grid", plan.grid},    {"block", plan.block},
                          {"shared_bytes", plan.shared_bytes}};
      if (!options.config.empty()) j["config"] = options.config;
      nlohmann::json js = nlohmann::json::array();
      for (const PlanStep& s : steps) {
        js.push_back({{"role", s.role}, {"kernel", s.kernel}, {"grid", s.grid}, {"block", s.block},
                      {"shared_bytes", s.shared_bytes}, {"scratch_bytes", s.scratch_bytes}});
      }
      j["steps"] = std::move(js);
      nlohmann::json jv = nlohmann::json::array();
      for (const detail::FamilyVerdict& v : verdicts) {
        jv.push_back({{"family", v.family->kernel().name}, {"passed", v.passed.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.passed)}});
      }
      j["families"] = std::move(jv);
      if (options.candidates > 0) j["candidates"] = tuned;
      plans.push_back(std::move(j));
      continue;
    }
    fmt::print("{}\n  kernel  {}\n  launch  {} blocks of {} threads, {} bytes of dynamic shared memory\n", d.name,
               detail::canonical_text(plan.key), plan.grid, plan.block, plan.shared_bytes);
    for (const PlanStep& s : steps) {
      fmt::print("  {}: {}\n          {} blocks of {} threads", s.role, s.kernel, s.grid, s.block);
      if (s.scratch_bytes > 0) fmt::print(", {} bytes of scratch", s.scratch_bytes);
      fmt::print("\n");
    }
    if (!options.config.empty()) fmt::print("  forced  {}\n", options.config);
    for (const detail::FamilyVerdict& v : verdicts) {
      fmt::print("  {:<16}{}\n", v.family->kernel().name, v.passed.empty() ? "takes it" : "passed: " + v.passed);
    }
    for (const std::string& c : tuned) fmt::print("  tune    {}\n", c);
  }
  if (options.json) fmt::print("{}\n", nlohmann::json{{"arch", arch}, {"plans", std::move(plans)}}.dump());
  return kExitOk;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "show the kernel the planner picks for a shape, its launch and helpers, and why the families "
              "before it passed (nothing is compiled)");
  add_shape_or_manifest_flags(*cmd, options->shape, options->manifest);
  cmd->add_option("--arch", options->arch, "target like sm_90 or sm_80; needs no GPU (default: this GPU's)");
  CLI::Option* config = add_config_flag(*cmd, options->config);
  cmd->add_option("--candidates", options->candidates,
                  "also list the first N configurations `tune` would time (the planner's first), each a --config")
      ->check(CLI::Range(1, 64))
      ->excludes(config);
  cmd->add_flag("--json", options->json, "print one JSON object on stdout");
  return {cmd, [options] { return run_plan(*options); }};
}

}  // namespace conv3djit::cli
