#pragma once
// Shared pieces of the conv3djit command-line tool: how commands are registered and dispatched,
// the options every command sees, and the shape flags / manifest that describe convolutions.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conv3djit/conv3d.hpp"
#include "conv3djit/engine.hpp"

namespace conv3djit::cli {

/// Exit codes beyond CLI11's own (which are >= 100 for usage errors).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,    ///< a library error, a failed compile, a failed verification
  kExitNoDevice = 2,  ///< the command needs a GPU and this machine has none (tests skip on it)
};

/// Options of the top-level app, valid for every subcommand.
struct GlobalOptions {
  std::string cache_dir;  ///< empty: the library's default location
  bool verbose = false;
  /// `kernel_config`: a forced configuration (`--config`), empty for the planner's choice.
  EngineOptions engine_options(const std::string& kernel_config = "") const {
    EngineOptions options;
    options.cache_dir = cache_dir;
    options.kernel_config = kernel_config;
    return options;
  }
};

/// A registered subcommand and what to do when it was the one given.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_precompile_command(CLI::App& app, const GlobalOptions& global);
std::vector<Command> add_cache_commands(CLI::App& app, const GlobalOptions& global);
Command add_verify_command(CLI::App& app, const GlobalOptions& global);
Command add_run_command(CLI::App& app, const GlobalOptions& global);
Command add_bench_command(CLI::App& app, const GlobalOptions& global);
Command add_tune_command(CLI::App& app, const GlobalOptions& global);
Command add_families_command(CLI::App& app);
Command add_plan_command(CLI::App& app, const GlobalOptions& global);

/// `requested` (checked) or, if empty, this GPU's arch; throws Error(NoDevice) without either.
std::string target_arch(const std::string& requested);

// Shared by the timing commands, run and bench (defined in cmd_run.cpp).

/// Adds --config, stored into `config` for EngineOptions::kernel_config. Only its form is
/// checked while parsing, before any device work; whether it fits a shape is the planner's call.
CLI::Option* add_config_flag(CLI::App& cmd, std::string& config);

/// The flags of the timing commands (run, bench): --config, --warmup, --iters, --seed, --json.
struct TimingFlags {
  std::string config;
  int warmup = 0;
  int iters = 0;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
  bool json = false;
  /// --prepared-weights: the weights prepared once (Engine::prepare_weights) before the timed calls.
  bool prepared_weights = false;
  /// --seed's value, else a fresh seed.
  uint64_t seed_or_fresh() const;
};

/// Adds the timing flags to `cmd` with these defaults and help texts for --warmup, --iters and --json.
void add_timing_flags(CLI::App& cmd, TimingFlags& flags, int warmup, const std::string& warmup_help, int iters,
                      const std::string& iters_help, const std::string& json_help);

/// The median of timings.
double median(std::vector<double> values);

/// The shape flags as parsed: `desc` is filled while CLI11 parses, so it must outlive the parse.
struct ShapeFlags {
  Conv3dDesc desc;
  std::vector<CLI::Option*> options;  ///< every shape flag, to exclude them against --manifest
  CLI::Option* input = nullptr;
  CLI::Option* out_channels = nullptr;
  CLI::Option* kernel = nullptr;
};

/// Adds --input, --out-channels, --kernel, --stride, --padding (or --padding-before/-after),
/// --padding-mode, --dilation, --groups, --bias, --precision, --dtype, --layout, --fp32-output and
/// the epilogue's flags to `cmd`; the first three are marked required when `required`.
void add_shape_flags(CLI::App& cmd, ShapeFlags& flags, bool required);

struct ValueRange;  // device.hpp
/// Adds --input-range LO,HI (default -1,1): the interval the random input values are drawn from,
/// for the accuracy checks of verify and bench (weights and bias stay in [-1, 1)).
CLI::Option* add_input_range_flag(CLI::App& cmd, ValueRange& range);

/// Throws CLI::RequiredError for the first of --input/--out-channels/--kernel not given.
void require_shape(const ShapeFlags& flags);

/// The shape flags or, instead of them, --manifest FILE (a JSON-lines file): when the command is
/// parsed without a manifest, the shape flags become required. `flags` and `manifest` must
/// outlive the parse.
void add_shape_or_manifest_flags(CLI::App& cmd, ShapeFlags& flags, std::string& manifest);

// Checks shared by the flags and the manifest. Each returns an error text for the user, empty
// when the value was accepted and stored.
std::string read_input(const std::vector<int64_t>& values, Conv3dDesc& desc);
std::string read_dims3(const std::vector<int64_t>& values, int64_t min, Dims3& out);
std::string read_padding(const std::vector<int64_t>& values, Padding& out);
std::string read_padding_word(const std::string& word, Padding& out);
/// padding_before (after = false) or padding_after: per-side padding, the other side kept (0 if unset).
std::string read_padding_side(const std::vector<int64_t>& values, bool after, Padding& out);
std::string read_count(int64_t value, int64_t& out);  ///< out_channels, groups: >= 1
std::string read_precision(const std::string& word, Precision& out);
/// An element type: fp32, bf16, fp16, or PyTorch's float32, bfloat16, float16 (any case).
std::string read_dtype(const std::string& word, DataType& out);
/// A layout: ncdhw or ndhwc (any case).
std::string read_layout(const std::string& word, Layout& out);
/// An activation's name (identity, relu, leaky_relu, gelu, gelu_tanh, silu, sigmoid, tanh,
/// hardswish, clamp).
std::string read_activation(const std::string& word, Activation& out);
std::string read_padding_mode(const std::string& word, PaddingMode& out);
/// An epilogue scalar: any finite number.
std::string read_scalar(double value, float& out);

/// Throws the Error that conv3d() would throw for an invalid description.
void require_valid(const Conv3dDesc& desc);

/// One description of a manifest line (or of the flags), with a name for reports.
struct NamedDesc {
  std::string name;
  Conv3dDesc desc;
};

/// Reads a JSON-lines manifest; throws Error(InvalidArgument) naming "file:line" and the key of
/// the first bad line.
std::vector<NamedDesc> read_manifest(const std::string& path);

/// The shapes a command was given: the manifest's lines, else the shape flags' one description
/// (validated, named by describe()). Throws as read_manifest, or Error for an invalid description.
std::vector<NamedDesc> read_shapes(const ShapeFlags& flags, const std::string& manifest);

/// Multiply-adds of a valid description: N*K*OD*OH*OW * C/groups * KD*KH*KW.
double macs(const Conv3dDesc& desc);

}  // namespace conv3djit::cli
