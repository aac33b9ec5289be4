// `conv3djit verify`: run one shape, or every layer of a manifest, on the GPU with fresh random
// inputs and a NaN-poisoned output, and measure it against a float64 reference with the accuracy
// class's tolerances.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "build_info.hpp"
#include "cli.hpp"
#include "conv3djit/reference.hpp"
#include "device.hpp"

namespace conv3djit::cli {
namespace {

// Above this the multi-core CPU reference takes minutes; the GPU reference takes milliseconds.
constexpr double kCpuReferenceMacs = 2e9;

struct VerifyOptions {
  ShapeFlags shape;
  std::string manifest;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
  std::string reference = "auto";
  std::string config;  // empty: the planner's choice
  bool json = false;
  ValueRange input_range;
};

struct Verified {
  std::string kernel;
  bool on_gpu = false;
  int64_t elements = 0;
  Tolerance tol;
  Comparison result;
};

// One description with inputs from `seed` and a NaN-poisoned output, against its float64 reference.
Verified verify_one(const Conv3dDesc& desc, uint64_t seed, const VerifyOptions& options, Engine& engine,
                    const Stream& stream) {
  ProblemData data(desc, seed, 0, options.input_range);
  fill_nan(data.d_output);
  engine.run(desc, data.tensors(), stream.get());
  stream.synchronize();
  const std::vector<float> got = data.output();  // every output type as floats, exactly

  Verified v;
  v.on_gpu = options.reference == "gpu" || (options.reference == "auto" && macs(desc) > kCpuReferenceMacs);
  const std::vector<double> reference = reference_output(engine, desc, data, stream, v.on_gpu);
  v.tol = tolerance(desc);  // the description's class: its precision's, or its half type's
  v.result = compare(got.data(), reference.data(), data.output_elements, v.tol);
  v.kernel = engine.kernel_for(desc);
  v.elements = data.output_elements;
  return v;
}

nlohmann::json verified_json(const NamedDesc& named, uint64_t seed, const VerifyOptions& options,
                             const Verified& v) {
  const Conv3dDesc& desc = named.desc;
  return {{"name", named.name},
          {"shape", describe(desc)},
          {"kernel", v.kernel},
          {"dtype", dtype_name(desc.dtype)},
          {"output_dtype", dtype_name(output_dtype(desc))},
          {"layout", layout_name(desc.layout)},
          {"seed", seed},
          {"reference", v.on_gpu ? "gpu" : "cpu"},
          {"input_range", {options.input_range.lo, options.input_range.hi}},
          {"elements", v.elements},
          {"rel_l2", v.result.rel_l2},
          {"rel_l2_limit", v.tol.rel_l2},
          {"max_abs_error", v.result.max_abs_error},
          {"outside_tolerance", v.result.outside_tolerance},
          {"non_finite", v.result.non_finite},
          {"atol", v.tol.atol},
          {"rtol", v.tol.rtol},
          {"passed", v.result.passed}};
}

int verify_shape(const VerifyOptions& options, const GlobalOptions& global) {
  const Conv3dDesc& desc = options.shape.desc;
  require_valid(desc);
  make_context_current();
  Engine engine(global.engine_options(options.config));
  const uint64_t seed = options.seed_option->count() > 0 ? options.seed : random_seed();
  Stream stream;
  const Verified v = verify_one(desc, seed, options, engine, stream);

  if (options.json) {
    fmt::print("{}\n", verified_json({describe(desc), desc}, seed, options, v).dump());
  } else {
    fmt::print("shape       {}\n", describe(desc));
    fmt::print("kernel      {}\n", v.kernel);
    fmt::print("reference   float64 on the {} (seed {})\n", v.on_gpu ? "GPU" : "CPU", seed);
    fmt::print("rel-L2      {:.3e} (limit {:.0e})\n", v.result.rel_l2, v.tol.rel_l2);
    fmt::print("max error   {:.3e}\n", v.result.max_abs_error);
    if (v.tol.atol >= 0) {
      fmt::print("outside     {} of {} elements (atol {:.0e}, rtol {:.0e})\n", v.result.outside_tolerance,
                 v.elements, v.tol.atol, v.tol.rtol);
    }
    fmt::print("non-finite  {}\n", v.result.non_finite);
    fmt::print("{}\n", v.result.passed ? "PASS" : "FAIL");
  }
  return v.result.passed ? kExitOk : kExitFailed;
}

// Every line of a manifest, each with its own inputs (seed + line index). A line whose call
// throws is a failure with the error's text, and the rest still run: a sweep reports every
// layer that is wrong, not the first.
int verify_manifest(const VerifyOptions& options, const GlobalOptions& global) {
  const std::vector<NamedDesc> descs = read_manifest(options.manifest);
  make_context_current();
  Engine engine(global.engine_options(options.config));
  const uint64_t seed = options.seed_option->count() > 0 ? options.seed : random_seed();
  Stream stream;
  size_t width = 4;
  for (const NamedDesc& named : descs) width = std::max(width, named.name.size());
  if (!options.json) {
    fmt::print("{:<{}}  {:>9}  {:>7}  {:>6}  {}\n", "name", width, "rel-L2", "limit", "", "kernel");
  }
  nlohmann::json rows = nlohmann::json::array();
  int failed = 0;
  for (size_t i = 0; i < descs.size(); ++i) {
    const NamedDesc& named = descs[i];
    const uint64_t row_seed = seed + i;
    try {
      const Verified v = verify_one(named.desc, row_seed, options, engine, stream);
      failed += v.result.passed ? 0 : 1;
      if (options.json) {
        rows.push_back(verified_json(named, row_seed, options, v));
      } else {
        fmt::print("{:<{}}  {:>9.2e}  {:>7.0e}  {:>6}  {}\n", named.name, width, v.result.rel_l2, v.tol.rel_l2,
                   v.result.passed ? "PASS" : "FAIL", v.kernel);
      }
    } catch (const Error& e) {
      if (e.category() == ErrorCategory::NoDevice) throw;
      ++failed;
      if (options.json) {
        rows.push_back({{"name", named.name}, {"shape", describe(named.desc)}, {"seed", row_seed},
                        {"error", e.what()}, {"passed", false}});
      } else {
        fmt::print("{:<{}}  {:>9}  {:>7}  {:>6}  error: {}\n", named.name, width, "", "", "FAIL", e.what());
      }
    }
  }
  const int passed = static_cast<int>(descs.size()) - failed;
  if (options.json) {
    const std::optional<DeviceInfo> device = current_device();
    const nlohmann::json config = options.config.empty() ? nlohmann::json(nullptr) : nlohmann::json(options.config);
    const nlohmann::json out = {{"device", device ? device->name : ""},
                                {"commit", source_commit()},
                                {"manifest", options.manifest},
                                {"seed", seed},
                                {"reference", options.reference},
                                {"config", config},
                                {"passed", passed},
                                {"failed", failed},
                                {"rows", std::move(rows)}};
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{} of {} layers passed (seed {})\n", passed, descs.size(), seed);
  }
  return failed == 0 ? kExitOk : kExitFailed;
}

int run_verify(const VerifyOptions& options, const GlobalOptions& global) {
  return options.manifest.empty() ? verify_shape(options, global) : verify_manifest(options, global);
}

}  // namespace

Command add_verify_command(CLI::App& app, const GlobalOptions& global) {
  auto options = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "check a shape, or every layer of a manifest, on the GPU against a float64 reference");
  add_shape_or_manifest_flags(*cmd, options->shape, options->manifest);
  options->seed_option = cmd->add_option(
      "--seed", options->seed, "random seed of the inputs, a manifest's line i seed + i (default: fresh)");
  add_input_range_flag(*cmd, options->input_range);
  cmd->add_option("--reference", options->reference,
                  "where the float64 reference runs: auto (CPU up to 2e9 MACs), cpu, gpu")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  add_config_flag(*cmd, options->config);
  cmd->add_flag("--json", options->json, "print one JSON object on stdout");
  return {cmd, [options, &global] { return run_verify(*options, global); }};
}

}  // namespace conv3djit::cli
