// `conv3djit verify`: run one shape on the GPU with fresh random inputs and a NaN-poisoned output,
// and measure it against a float64 reference with the accuracy class's tolerances.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "conv3djit/reference.hpp"
#include "device.hpp"

namespace conv3djit::cli {
namespace {

// Above this the multi-core CPU reference takes minutes; the GPU reference takes milliseconds.
constexpr double kCpuReferenceMacs = 2e9;

struct VerifyOptions {
  ShapeFlags shape;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
  std::string reference = "auto";
  std::string config;  // empty: the planner's choice
  bool json = false;
  ValueRange input_range;
};

int run_verify(const VerifyOptions& options, const GlobalOptions& global) {
  const Conv3dDesc& desc = options.shape.desc;
  require_valid(desc);
  make_context_current();
  Engine engine(global.engine_options(options.config));
  const uint64_t seed = options.seed_option->count() > 0 ? options.seed : random_seed();
  ProblemData data(desc, seed, 0, options.input_range);
  Stream stream;

  fill_nan(data.d_output);
  engine.run(desc, data.tensors(), stream.get());
  stream.synchronize();
  const std::vector<float> got = data.output();  // every output type as floats, exactly

  const bool on_gpu = options.reference == "gpu" ||
                      (options.reference == "auto" && macs(desc) > kCpuReferenceMacs);
  const std::vector<double> reference = reference_output(engine, desc, data, stream, on_gpu);
  const Tolerance tol = tolerance(desc);  // the description's class: its precision's, or its half type's
  const Comparison result = compare(got.data(), reference.data(), data.output_elements, tol);
  const std::string kernel = engine.kernel_for(desc);

  if (options.json) {
    const nlohmann::json out = {
        {"name", describe(desc)},        {"kernel", kernel},
        {"dtype", dtype_name(desc.dtype)},
        {"output_dtype", dtype_name(output_dtype(desc))},
        {"layout", layout_name(desc.layout)},
        {"seed", seed},                  {"reference", on_gpu ? "gpu" : "cpu"},
        {"input_range", {options.input_range.lo, options.input_range.hi}},
        {"elements", data.output_elements},
        {"rel_l2", result.rel_l2},       {"rel_l2_limit", tol.rel_l2},
        {"max_abs_error", result.max_abs_error},
        {"outside_tolerance", result.outside_tolerance},
        {"non_finite", result.non_finite},
        {"atol", tol.atol},              {"rtol", tol.rtol},
        {"passed", result.passed}};
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("shape       {}\n", describe(desc));
    fmt::print("kernel      {}\n", kernel);
    fmt::print("reference   float64 on the {} (seed {})\n", on_gpu ? "GPU" : "CPU", seed);
    fmt::print("rel-L2      {:.3e} (limit {:.0e})\n", result.rel_l2, tol.rel_l2);
    fmt::print("max error   {:.3e}\n", result.max_abs_error);
    if (tol.atol >= 0) {
      fmt::print("outside     {} of {} elements (atol {:.0e}, rtol {:.0e})\n", result.outside_tolerance,
                 data.output_elements, tol.atol, tol.rtol);
    }
    fmt::print("non-finite  {}\n", result.non_finite);
    fmt::print("{}\n", result.passed ? "PASS" : "FAIL");
  }
  return result.passed ? kExitOk : kExitFailed;
}

}  // namespace

Command add_verify_command(CLI::App& app, const GlobalOptions& global) {
  auto options = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand("verify", "check one shape on the GPU against a float64 reference");
  add_shape_flags(*cmd, options->shape, true);
  options->seed_option = cmd->add_option("--seed", options->seed, "random seed of the inputs (default: fresh)");
  add_input_range_flag(*cmd, options->input_range);
  cmd->add_option("--reference", options->reference,
                  "where the float64 reference runs: auto (CPU up to 2e9 MACs), cpu, gpu")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  add_config_flag(*cmd, options->config);
  cmd->add_flag("--json", options->json, "print one JSON object on stdout");
  return {cmd, [options, &global] { return run_verify(*options, global); }};
}

}  // namespace conv3djit::cli
