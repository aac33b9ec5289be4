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

// cuDNN on one row's tensors: its time and error, and the algorithm it chose.
struct CudnnMeasured {
  Measured measured;
  std::string algo, math;
};

struct Row {
  NamedDesc named;
  double traffic_bytes = 0;  ///< the minimum: inputs read once, output written once
  std::string kernel;
  std::optional<KernelResources> resources;  ///< of conv3djit's kernel, once it ran
  Measured conv3djit;
  CudnnMeasured cudnn;  ///< in the row's layout, on conv3djit's buffers
  /// Half rows: cuDNN on the same problem in the other layout (its own buffers), since cuDNN's
  /// half kernels are much faster in one of them; a user would choose that one.
  std::optional<CudnnMeasured> cudnn_other;

  std::optional<double> speedup() const {
    if (!conv3djit.ms || !cudnn.measured.ms) return std::nullopt;
    return *cudnn.measured.ms / *conv3djit.ms;
  }
  Layout other_layout() const { return named.desc.layout == Layout::NCDHW ? Layout::NDHWC : Layout::NCDHW; }
  /// Half rows: cuDNN's layout of the two with the shorter time, if either ran.
  std::optional<Layout> cudnn_best_layout() const {
    if (!cudnn_other) return std::nullopt;
    const std::optional<double> same = cudnn.measured.ms, other = cudnn_other->measured.ms;
    if (!same && !other) return std::nullopt;
    return !other || (same && *same <= *other) ? named.desc.layout : other_layout();
  }
  std::optional<double> cudnn_best_ms() const {
    const std::optional<Layout> best = cudnn_best_layout();
    if (!best) return std::nullopt;
    return *best == named.desc.layout ? cudnn.measured.ms : cudnn_other->measured.ms;
  }
  /// cuDNN's time in its faster layout over conv3djit's in the row's.
  std::optional<double> speedup_vs_cudnn_best() const {
    const std::optional<double> best = cudnn_best_ms();
    if (!conv3djit.ms || !best) return std::nullopt;
    return *best / *conv3djit.ms;
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
  const std::vector<float> got = data.output();  // every output type as floats, exactly
  m.accuracy = compare(got.data(), reference.data(), data.output_elements, tol);
  m.ms = timer.median_ms(call);
  return m;
}

// cuDNN on a problem's tensors; a refusal or failure is the result's note.
CudnnMeasured measure_cudnn(const Cudnn* cudnn, const Conv3dDesc& desc, const ProblemData& data,
                            const std::vector<double>& reference, const Stream& stream, Timer& timer) {
  CudnnMeasured out;
  if (cudnn == nullptr) {
    out.measured.note = "cuDNN not loaded";
    return out;
  }
#ifdef CONV3DJIT_HAVE_CUDNN
  try {
    const CudnnConv conv(*cudnn, desc, data.tensors());
    out.algo = conv.algorithm();
    out.math = conv.math();
    out.measured = measure([&] { conv.run(); }, data, reference, tolerance(desc), stream, timer);
  } catch (const std::exception& e) {
    out.measured.note = e.what();
  }
#else
  (void)desc, (void)data, (void)reference, (void)stream, (void)timer;
#endif
  return out;
}

// Every buffer of the row is freed when it returns, before the next row allocates; the other
// layout's buffers are made after the row's own are freed.
Row bench_row(const NamedDesc& named, uint64_t seed, ValueRange input_range, bool prepared_weights, Engine& engine,
              const Cudnn* cudnn, const Stream& stream, Timer& timer) {
  Row row;
  row.named = named;
  const Conv3dDesc& desc = named.desc;
  {
    const ProblemData data(desc, seed, 0, input_range);
    row.traffic_bytes = static_cast<double>(data.traffic_bytes());
    const std::vector<double> reference = reference_output(engine, desc, data, stream, /*on_gpu=*/true);
    // The description's class: its precision's for float32 inputs, its type's for half ones.
    const Tolerance tol = tolerance(desc);
    // A failure of either side (a forced --config that does not fit, a cuDNN refusal) is reported
    // in its row, and the other side still runs.
    try {
      row.kernel = engine.kernel_for(desc);
      Conv3dTensors tensors = data.tensors();
      PreparedWeights prepared;
      if (prepared_weights) {
        prepared = engine.prepare_weights(desc, tensors.weight, stream.get());
        tensors.prepared_weights = &prepared;
      }
      row.conv3djit =
          measure([&] { engine.run(desc, tensors, stream.get()); }, data, reference, tol, stream, timer);
      row.resources = engine.resources(desc, stream.get());
    } catch (const std::exception& e) {
      row.conv3djit.note = e.what();
    }
    row.cudnn = measure_cudnn(cudnn, desc, data, reference, stream, timer);
  }
  if (desc.dtype != DataType::Float32 && cudnn != nullptr) {
    Conv3dDesc other = desc;
    other.layout = row.other_layout();
    const ProblemData data(other, seed, 0, input_range);
    const std::vector<double> reference = reference_output(engine, other, data, stream, /*on_gpu=*/true);
    row.cudnn_other = measure_cudnn(cudnn, other, data, reference, stream, timer);
  }
  return row;
}

// The accuracy class of a row: fp32 or tf32 for float32 inputs, else the half type, with "_out32"
// for a float32 output.
std::string class_name(const Conv3dDesc& desc) {
  if (desc.dtype == DataType::Float32) return desc.precision == Precision::Fp32 ? "fp32" : "tf32";
  return std::string(dtype_name(desc.dtype)) + (desc.fp32_output ? "_out32" : "");
}

bool half_row(const Row& row) { return row.named.desc.dtype != DataType::Float32; }

double tflops(const Row& row, double ms) { return 2 * macs(row.named.desc) / (ms * 1e-3) / 1e12; }

double gbps(const Row& row, double ms) { return row.traffic_bytes / (ms * 1e-3) / 1e9; }

using Speedup = std::optional<double> (Row::*)() const;

std::optional<double> geomean_speedup(const std::vector<Row>& rows, Speedup speedup = &Row::speedup) {
  double log_sum = 0;
  int count = 0;
  for (const Row& row : rows) {
    if (auto s = (row.*speedup)()) {
      log_sum += std::log(*s);
      ++count;
    }
  }
  if (count == 0) return std::nullopt;
  return std::exp(log_sum / count);
}

int counted_rows(const std::vector<Row>& rows, Speedup speedup = &Row::speedup) {
  int count = 0;
  for (const Row& row : rows) count += (row.*speedup)() ? 1 : 0;
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
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  const Measured& cudnn = row.cudnn.measured;
  json out = {{"name", row.named.name},
              {"shape", describe(desc)},
              {"precision", class_name(desc)},
              {"dtype", dtype_name(desc.dtype)},
              {"output_dtype", dtype_name(output_dtype(desc))},
              {"layout", layout_name(desc.layout)},
              {"conv3djit_ms", or_null(row.conv3djit.ms)},
              {"cudnn_ms", or_null(cudnn.ms)},
              {"speedup", or_null(row.speedup())},
              {"conv3djit_rel_l2", rel_l2(row.conv3djit)},
              {"cudnn_rel_l2", rel_l2(cudnn)},
              {"conv3djit_passed", passed(row.conv3djit)},
              {"cudnn_passed", passed(cudnn)},
              {"tflops", rate(row.conv3djit, tflops)},
              {"gbps", rate(row.conv3djit, gbps)},
              {"cudnn_tflops", rate(cudnn, tflops)},
              {"kernel", row.kernel},
              {"registers", row.resources ? json(row.resources->registers) : json(nullptr)},
              {"local_bytes", row.resources ? json(row.resources->local_bytes) : json(nullptr)},
              {"cudnn_algo", text(row.cudnn.algo)},
              {"cudnn_math", text(row.cudnn.math)}};
  if (!row.conv3djit.note.empty()) out["conv3djit_error"] = row.conv3djit.note;
  if (!cudnn.note.empty()) out["cudnn_note"] = cudnn.note;
  if (row.cudnn_other) {
    const Measured& other = row.cudnn_other->measured;
    const std::optional<Layout> best = row.cudnn_best_layout();
    out["cudnn_other_layout"] = layout_name(row.other_layout());
    out["cudnn_other_layout_ms"] = or_null(other.ms);
    out["cudnn_other_layout_rel_l2"] = rel_l2(other);
    out["cudnn_other_layout_passed"] = passed(other);
    out["cudnn_other_layout_algo"] = text(row.cudnn_other->algo);
    out["cudnn_other_layout_math"] = text(row.cudnn_other->math);
    if (!other.note.empty()) out["cudnn_other_layout_note"] = other.note;
    out["cudnn_best_layout"] = best ? json(layout_name(*best)) : json(nullptr);
    out["cudnn_best_ms"] = or_null(row.cudnn_best_ms());
    out["speedup_vs_cudnn_best"] = or_null(row.speedup_vs_cudnn_best());
  }
  return out;
}

// The text table: a header sized to the names, then one line per row as it completes. With half
// rows it also shows each row's layout and cuDNN's time in its faster layout.
class Table {
 public:
  explicit Table(const std::vector<NamedDesc>& descs) {
    for (const NamedDesc& d : descs) {
      name_width_ = std::max(name_width_, d.name.size());
      class_width_ = std::max(class_width_, class_name(d.desc).size());
      half_ = half_ || d.desc.dtype != DataType::Float32;
    }
    print_line("NAME", "PREC", "LAYOUT", "CONV3DJIT", "CUDNN", "SPEEDUP", "CUDNN_BEST_LAYOUT", "VS_BEST", "TFLOP/S",
               "GB/S", "REL_L2", "CUDNN_REL_L2", "CUDNN_ALGO", "REGS/LMEM", "KERNEL");
  }

  void print(const Row& row) const {
    const Conv3dDesc& desc = row.named.desc;
    auto ms = [](const std::optional<double>& t) { return t ? fmt::format("{:.3f}", *t) : std::string("n/a"); };
    auto times = [](const std::optional<double>& x) { return x ? fmt::format("{:.2f}x", *x) : std::string("n/a"); };
    auto rel_l2 = [](const Measured& m) {
      if (!m.accuracy) return std::string("n/a");
      return fmt::format("{:.1e}{}", m.accuracy->rel_l2, m.accuracy->passed ? "" : " FAIL");
    };
    std::string best = "n/a";
    if (const std::optional<Layout> layout = row.cudnn_best_layout()) {
      best = fmt::format("{} {}", ms(row.cudnn_best_ms()), layout_name(*layout));
    }
    print_line(row.named.name, class_name(desc), layout_name(desc.layout), ms(row.conv3djit.ms),
               ms(row.cudnn.measured.ms), times(row.speedup()), best, times(row.speedup_vs_cudnn_best()),
               row.conv3djit.ms ? fmt::format("{:.1f}", tflops(row, *row.conv3djit.ms)) : "n/a",
               row.conv3djit.ms ? fmt::format("{:.0f}", gbps(row, *row.conv3djit.ms)) : "n/a",
               rel_l2(row.conv3djit), rel_l2(row.cudnn.measured), row.cudnn.algo.empty() ? "n/a" : row.cudnn.algo,
               row.resources ? fmt::format("{}/{}", row.resources->registers, row.resources->local_bytes) : "n/a",
               row.kernel);
    std::fflush(stdout);  // rows take seconds each; show them as they come
  }

 private:
  // One line; the layout and cuDNN's best-layout columns only in a table with half rows.
  void print_line(const std::string& name, const std::string& precision, const std::string& layout,
                  const std::string& conv3djit, const std::string& cudnn, const std::string& speedup,
                  const std::string& best, const std::string& vs_best, const std::string& tflops,
                  const std::string& gbps, const std::string& rel_l2, const std::string& cudnn_rel_l2,
                  const std::string& algo, const std::string& regs, const std::string& kernel) const {
    std::string line = fmt::format("{:<{}}  {:<{}}  ", name, name_width_, precision, class_width_);
    if (half_) line += fmt::format("{:<6}  ", layout);
    line += fmt::format("{:>10}  {:>10}  {:>7}  ", conv3djit, cudnn, speedup);
    if (half_) line += fmt::format("{:>17}  {:>7}  ", best, vs_best);
    line += fmt::format("{:>7}  {:>7}  {:>13}  {:>13}  {:<21}  {:>9}  {}", tflops, gbps, rel_l2, cudnn_rel_l2,
                        algo, regs, kernel);
    fmt::print("{}\n", line);
  }

  size_t name_width_ = 4;
  size_t class_width_ = 4;
  bool half_ = false;
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
    rows.push_back(bench_row(descs[i], seed + i, options.input_range, options.timing.prepared_weights, engine,
                             cudnn.get(), stream, timer));
    const Row& row = rows.back();
    if (!row.conv3djit.note.empty())
      fmt::print(stderr, "{}: conv3djit failed: {}\n", row.named.name, row.conv3djit.note);
    if (cudnn && !row.cudnn.measured.note.empty())
      fmt::print(stderr, "{}: cuDNN n/a: {}\n", row.named.name, row.cudnn.measured.note);
    if (row.cudnn_other && !row.cudnn_other->measured.note.empty()) {
      fmt::print(stderr, "{}: cuDNN in {} n/a: {}\n", row.named.name, layout_name(row.other_layout()),
                 row.cudnn_other->measured.note);
    }
    if (table) table->print(row);
  }

  const std::optional<double> geomean = geomean_speedup(rows);
  const bool any_half = std::any_of(rows.begin(), rows.end(), half_row);
  const std::optional<double> geomean_best = geomean_speedup(rows, &Row::speedup_vs_cudnn_best);
  if (options.timing.json) {
    json out_rows = json::array();
    for (const Row& row : rows) out_rows.push_back(row_json(row));
    json out = {{"device", device ? device->name : ""},
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
                      {"prepared_weights", options.timing.prepared_weights},
                      {"flush_bytes", kFlushBytes},
                      {"seed", seed},
                      {"input_range", {options.input_range.lo, options.input_range.hi}},
                      {"geomean_speedup", or_null(geomean)},
                      {"rows", std::move(out_rows)}};
    if (any_half) out["geomean_speedup_vs_cudnn_best"] = or_null(geomean_best);
    fmt::print("{}\n", out.dump());
  } else {
    if (geomean) {
      fmt::print("geometric-mean speedup (cuDNN ms / conv3djit ms) over {} rows: {:.2f}x\n", counted_rows(rows),
                 *geomean);
    } else {
      fmt::print("geometric-mean speedup: n/a (no row ran on both)\n");
    }
    if (any_half && geomean_best) {
      fmt::print("against cuDNN in its faster layout, over {} rows: {:.2f}x\n",
                 counted_rows(rows, &Row::speedup_vs_cudnn_best), *geomean_best);
    }
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
