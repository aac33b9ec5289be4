// `conv3djit bench`: conv3djit against cuDNN in one process, on the same device buffers and the
// same stream, for one shape or a manifest. Each implementation is timed on its own (median of
// CUDA-event timings, L2 flushed before every run) and measured against the float64 reference.
// Built without cudnn.h (CONV3DJIT_HAVE_CUDNN unset) it times conv3djit alone, cuDNN n/a.
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "build_info.hpp"
#include "cli.hpp"
#include "conv3djit/reference.hpp"
#include "device.hpp"
#include "jit/kernel_sources.hpp"
#ifdef CONV3DJIT_HAVE_CUDNN
#include "cudnn_api.hpp"
#endif

namespace conv3djit::cli {

#ifndef CONV3DJIT_HAVE_CUDNN
// The stand-in for cudnn_api.hpp's Cudnn in a build without cudnn.h: it never opens.
class Cudnn {
 public:
  static std::unique_ptr<Cudnn> open(CUstream, std::string& why) {
    why = "this conv3djit was built without the cuDNN headers (cudnn.h)";
    return nullptr;
  }
  std::string version() const { return {}; }
};
#endif

namespace {

using nlohmann::json;

// Writing this much evicts every line of any current GPU's L2 (the H200's is 60 MB), so each
// timed run starts from DRAM, as a layer does after its predecessor.
constexpr size_t kFlushBytes = 256ull << 20;

struct BenchOptions {
  ShapeFlags shape;
  std::string manifest;
  TimingFlags timing;
  ValueRange input_range;
};

// One implementation on one row; no time means n/a, and `note` says why.
struct Measured {
  std::optional<double> ms;
  std::optional<Comparison> accuracy;
  std::string note;
};

struct Row {
  NamedDesc named;
  double traffic_bytes = 0;  ///< the minimum: inputs read once, output written once
  std::string kernel;
  std::optional<KernelResources> resources;  ///< of conv3djit's kernel, once it ran
  std::string cudnn_algo, cudnn_math;
  Measured conv3djit, cudnn;

  std::optional<double> speedup() const {
    if (!conv3djit.ms || !cudnn.ms) return std::nullopt;
    return *cudnn.ms / *conv3djit.ms;
  }
};

// Runs implementations on one stream: each timed run follows an L2 flush, outside its events.
class Timer {
 public:
  Timer(const Stream& stream, int warmup, int iters)
      : stream_(stream), scratch_(kFlushBytes), warmup_(warmup), iters_(iters) {}

  double median_ms(const std::function<void()>& call) {
    for (int i = 0; i < warmup_; ++i) call();
    std::vector<Event> starts(static_cast<size_t>(iters_)), ends(static_cast<size_t>(iters_));
    for (int i = 0; i < iters_; ++i) {
      // cuMemsetD32 goes to the legacy default stream, which the (blocking) bench stream waits
      // for, so the flush completes before the start event.
      detail::check_cu(detail::driver().cuMemsetD32(scratch_.handle(), 0u, kFlushBytes / 4), "cuMemsetD32");
      starts[i].record(stream_);
      call();
      ends[i].record(stream_);
    }
    stream_.synchronize();
    std::vector<double> times;
    for (int i = 0; i < iters_; ++i) times.push_back(ends[i].since(starts[i]));
    return median(times);
  }

 private:
  const Stream& stream_;
  DeviceBuffer scratch_;
  int warmup_, iters_;
};

// One untimed run into a NaN-poisoned output, compared with the reference, then the timing.
Measured measure(const std::function<void()>& call, const ProblemData& data,
                 const std::vector<double>& reference, Tolerance tol, const Stream& stream, Timer& timer) {
  Measured m;
  fill_nan(data.d_output);
  call();
  stream.synchronize();
  std::vector<float> got(static_cast<size_t>(data.output_elements));
  copy_to_host(data.d_output, got.data());
  m.accuracy = compare(got.data(), reference.data(), data.output_elements, tol);
  m.ms = timer.median_ms(call);
  return m;
}

// Every buffer of the row is freed when it returns, before the next row allocates.
Row bench_row(const NamedDesc& named, uint64_t seed, ValueRange input_range, Engine& engine, const Cudnn* cudnn,
              const Stream& stream, Timer& timer) {
  Row row;
  row.named = named;
  const Conv3dDesc& desc = named.desc;
  const ProblemData data(desc, seed, 0, input_range);
  row.traffic_bytes = static_cast<double>(data.traffic_bytes());
  const std::vector<double> reference = reference_output(engine, desc, data, stream, /*on_gpu=*/true);
  const Tolerance tol = tolerance(desc.precision);
  // A failure of either side (a forced --config that does not fit, a cuDNN refusal) is reported
  // in its row, and the other side still runs.
  try {
    row.kernel = engine.kernel_for(desc);
    const Conv3dTensors tensors = data.tensors();
    row.conv3djit =
        measure([&] { engine.run(desc, tensors, stream.get()); }, data, reference, tol, stream, timer);
    row.resources = engine.resources(desc, stream.get());
  } catch (const std::exception& e) {
    row.conv3djit.note = e.what();
  }
  if (cudnn == nullptr) {
    row.cudnn.note = "cuDNN not loaded";
    return row;
  }
#ifdef CONV3DJIT_HAVE_CUDNN
  try {
    const CudnnConv conv(*cudnn, desc, data.tensors());
    row.cudnn_algo = conv.algorithm();
    row.cudnn_math = conv.math();
    row.cudnn = measure([&] { conv.run(); }, data, reference, tol, stream, timer);
  } catch (const std::exception& e) {
    row.cudnn.note = e.what();
  }
#endif
  return row;
}

const char* precision_name(Precision precision) { return precision == Precision::Fp32 ? "fp32" : "tf32"; }

double tflops(const Row& row, double ms) { return 2 * macs(row.named.desc) / (ms * 1e-3) / 1e12; }

double gbps(const Row& row, double ms) { return row.traffic_bytes / (ms * 1e-3) / 1e9; }

std::optional<double> geomean_speedup(const std::vector<Row>& rows) {
  double log_sum = 0;
  int count = 0;
  for (const Row& row : rows) {
    if (auto s = row.speedup()) {
      log_sum += std::log(*s);
      ++count;
    }
  }
  if (count == 0) return std::nullopt;
  return std::exp(log_sum / count);
}

int counted_rows(const std::vector<Row>& rows) {
  int count = 0;
  for (const Row& row : rows) count += row.speedup() ? 1 : 0;
  return count;
}

json or_null(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }

json row_json(const Row& row) {
  const Conv3dDesc& desc = row.named.desc;
  auto rel_l2 = [](const Measured& m) { return m.accuracy ? json(m.accuracy->rel_l2) : json(nullptr); };
  auto passed = [](const Measured& m) { return m.accuracy ? json(m.accuracy->passed) : json(nullptr); };
  auto rate = [&row](const Measured& m, double (*f)(const Row&, double)) {
    return m.ms ? json(f(row, *m.ms)) : json(nullptr);
  };
  json out = {{"name", row.named.name},
              {"shape", describe(desc)},
              {"precision", precision_name(desc.precision)},
              {"conv3djit_ms", or_null(row.conv3djit.ms)},
              {"cudnn_ms", or_null(row.cudnn.ms)},
              {"speedup", or_null(row.speedup())},
              {"conv3djit_rel_l2", rel_l2(row.conv3djit)},
              {"cudnn_rel_l2", rel_l2(row.cudnn)},
              {"conv3djit_passed", passed(row.conv3djit)},
              {"cudnn_passed", passed(row.cudnn)},
              {"tflops", rate(row.conv3djit, tflops)},
              {"gbps", rate(row.conv3djit, gbps)},
              {"cudnn_tflops", rate(row.cudnn, tflops)},
              {"kernel", row.kernel},
              {"registers", row.resources ? json(row.resources->registers) : json(nullptr)},
              {"local_bytes", row.resources ? json(row.resources->local_bytes) : json(nullptr)},
              {"cudnn_algo", row.cudnn_algo.empty() ? json(nullptr) : json(row.cudnn_algo)},
              {"cudnn_math", row.cudnn_math.empty() ? json(nullptr) : json(row.cudnn_math)}};
  if (!row.conv3djit.note.empty()) out["conv3djit_error"] = row.conv3djit.note;
  if (!row.cudnn.note.empty()) out["cudnn_note"] = row.cudnn.note;
  return out;
}

// The text table: a header sized to the names, then one line per row as it completes.
class Table {
 public:
  explicit Table(const std::vector<NamedDesc>& descs) {
    for (const NamedDesc& d : descs) name_width_ = std::max(name_width_, d.name.size());
    fmt::print("{:<{}}  {:<4}  {:>10}  {:>10}  {:>7}  {:>7}  {:>7}  {:>13}  {:>13}  {:<21}  {:>9}  {}\n", "NAME",
               name_width_, "PREC", "CONV3DJIT", "CUDNN", "SPEEDUP", "TFLOP/S", "GB/S", "REL_L2",
               "CUDNN_REL_L2", "CUDNN_ALGO", "REGS/LMEM", "KERNEL");
  }

  void print(const Row& row) const {
    const Conv3dDesc& desc = row.named.desc;
    auto ms = [](const Measured& m) { return m.ms ? fmt::format("{:.3f}", *m.ms) : std::string("n/a"); };
    auto rel_l2 = [](const Measured& m) {
      if (!m.accuracy) return std::string("n/a");
      return fmt::format("{:.1e}{}", m.accuracy->rel_l2, m.accuracy->passed ? "" : " FAIL");
    };
    const std::optional<double> speedup = row.speedup();
    fmt::print("{:<{}}  {:<4}  {:>10}  {:>10}  {:>7}  {:>7}  {:>7}  {:>13}  {:>13}  {:<21}  {:>9}  {}\n",
               row.named.name, name_width_, precision_name(desc.precision), ms(row.conv3djit), ms(row.cudnn),
               speedup ? fmt::format("{:.2f}x", *speedup) : "n/a",
               row.conv3djit.ms ? fmt::format("{:.1f}", tflops(row, *row.conv3djit.ms)) : "n/a",
               row.conv3djit.ms ? fmt::format("{:.0f}", gbps(row, *row.conv3djit.ms)) : "n/a",
               rel_l2(row.conv3djit), rel_l2(row.cudnn), row.cudnn_algo.empty() ? "n/a" : row.cudnn_algo,
               row.resources ? fmt::format("{}/{}", row.resources->registers, row.resources->local_bytes) : "n/a",
               row.kernel);
    std::fflush(stdout);  // rows take seconds each; show them as they come
  }

 private:
  size_t name_width_ = 4;
};

std::string today() {
  std::tm tm{};
  const std::time_t now = std::time(nullptr);
  localtime_r(&now, &tm);
  return fmt::format("{:%Y-%m-%d}", tm);
}

int run_bench(const BenchOptions& options, const GlobalOptions& global) {
  const std::vector<NamedDesc> descs = read_shapes(options.shape, options.manifest);
  make_context_current();
  const std::optional<DeviceInfo> device = current_device();
  Engine engine(global.engine_options(options.timing.config));
  Stream stream;
  Timer timer(stream, options.timing.warmup, options.timing.iters);
  std::string why;
  const std::unique_ptr<Cudnn> cudnn = Cudnn::open(stream.get(), why);
  if (!cudnn) fmt::print(stderr, "warning: cuDNN not available, its columns are n/a: {}\n", why);
  const uint64_t seed = options.timing.seed_or_fresh();

  std::optional<Table> table;
  if (!options.timing.json) table.emplace(descs);
  std::vector<Row> rows;
  for (size_t i = 0; i < descs.size(); ++i) {
    rows.push_back(bench_row(descs[i], seed + i, options.input_range, engine, cudnn.get(), stream, timer));
    const Row& row = rows.back();
    if (!row.conv3djit.note.empty())
      fmt::print(stderr, "{}: conv3djit failed: {}\n", row.named.name, row.conv3djit.note);
    if (cudnn && !row.cudnn.note.empty())
      fmt::print(stderr, "{}: cuDNN n/a: {}\n", row.named.name, row.cudnn.note);
    if (table) table->print(row);
  }

  const std::optional<double> geomean = geomean_speedup(rows);
  if (options.timing.json) {
    json out_rows = json::array();
    for (const Row& row : rows) out_rows.push_back(row_json(row));
    const json out = {{"device", device ? device->name : ""},
                      {"arch", device ? device->arch : ""},
                      {"date", today()},
                      {"conv3djit_version", version()},
                      {"commit", source_commit()},
                      {"kernel_sources_sha256", detail::kernel_sources_hash()},
                      {"cudnn_version", cudnn ? json(cudnn->version()) : json(nullptr)},
                      {"cudnn_note", cudnn ? json(nullptr) : json(why)},
                      {"config", options.timing.config.empty() ? json(nullptr) : json(options.timing.config)},
                      {"warmup", options.timing.warmup},
                      {"iters", options.timing.iters},
                      {"flush_bytes", kFlushBytes},
                      {"seed", seed},
                      {"input_range", {options.input_range.lo, options.input_range.hi}},
                      {"geomean_speedup", or_null(geomean)},
                      {"rows", std::move(out_rows)}};
    fmt::print("{}\n", out.dump());
  } else if (geomean) {
    fmt::print("geometric-mean speedup (cuDNN ms / conv3djit ms) over {} rows: {:.2f}x\n", counted_rows(rows),
               *geomean);
  } else {
    fmt::print("geometric-mean speedup: n/a (no row ran on both)\n");
  }
  // cuDNN's own refusals and errors are reported, not failures of conv3djit.
  for (const Row& row : rows) {
    if (!row.conv3djit.accuracy || !row.conv3djit.accuracy->passed) return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

Command add_bench_command(CLI::App& app, const GlobalOptions& global) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "time conv3djit against cuDNN on the GPU, with accuracy");
  add_shape_or_manifest_flags(*cmd, options->shape, options->manifest);
  add_timing_flags(*cmd, options->timing, 3, "untimed runs before timing, per implementation", 20,
                   "timed runs, each after an L2 flush", "print one JSON object on stdout");
  add_input_range_flag(*cmd, options->input_range);
  return {cmd, [options, &global] { return run_bench(*options, global); }};
}

}  // namespace conv3djit::cli
