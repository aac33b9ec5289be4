#include "tune/tuner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "conv3djit/half.hpp"
#include "conv3djit/reference.hpp"
#include "core/log.hpp"
#include "core/reference_at.hpp"
#include "driver/driver_api.hpp"
#include "driver/module_loader.hpp"

namespace conv3djit::detail {

DeviceIdentity identify_device(CUdevice device) {
  const DriverApi& d = driver();
  DeviceIdentity id;
  char name[256] = {};
  check_cu(d.cuDeviceGetName(name, sizeof(name), device), "cuDeviceGetName");
  id.name = name;
  const auto attribute = [&](CUdevice_attribute a) {
    int v = 0;
    check_cu(d.cuDeviceGetAttribute(&v, a, device), "cuDeviceGetAttribute");
    return v;
  };
  id.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  id.clock_mhz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) / 1000;
  id.memory_clock_mhz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) / 1000;
  check_cu(d.cuDriverGetVersion(&id.driver_version), "cuDriverGetVersion");
  return id;
}

bool stream_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check_cu(driver().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

namespace {

using Clock = std::chrono::steady_clock;

// Every scratch tensor repeats one pattern of values, each tensor from its own offset into it: a
// host reference of any output needs only the pattern, however large the tensors are. The period
// is prime, so no stride of a tensor walks the same few values.
constexpr int64_t kPeriod = 1000003;
constexpr int64_t kOffsets[] = {0, 314159, 271828, 161803};  // by RefTensor
// Outputs checked per candidate: runs of consecutive elements (one copy each) spread over the output.
constexpr int64_t kSampleRuns = 32, kRunLength = 32;
// A timed run this many times the best median so far ends a candidate's runs.
constexpr double kHopeless = 2.0;

struct Pattern {
  std::vector<float> values;  // in [-1, 1), exactly representable in the tensors' types
  std::vector<uint16_t> half_bits;  // the same values as bf16 or fp16 (half types only)
  std::vector<float> wide_values;   // the same pattern for float32 outputs' residual
};

// A device buffer of the tuner's own, freed when it goes.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(uint64_t bytes) {
    if (bytes > 0) check_cu(driver().cuMemAlloc(&ptr_, bytes), "cuMemAlloc (tuning scratch)");
  }
  ~DeviceBuffer() {
    if (ptr_ != 0) driver().cuMemFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }

 private:
  CUdeviceptr ptr_ = 0;
};

class TuningStream {
 public:
  TuningStream() { check_cu(driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~TuningStream() { driver().cuStreamDestroy(stream_); }
  TuningStream(const TuningStream&) = delete;
  TuningStream& operator=(const TuningStream&) = delete;
  CUstream get() const { return stream_; }

 private:
  CUstream stream_ = nullptr;
};

// Fills `elements` of `type` with the pattern from `offset`: the host holds one period (plus the
// run-in an offset needs) and copies it again and again.
void fill(CUdeviceptr dst, int64_t elements, DataType type, int64_t offset, const std::vector<float>& values) {
  if (elements == 0) return;
  const int bytes = dtype_bytes(type);
  const int64_t span = std::min<int64_t>(elements, 4 * kPeriod);
  std::vector<char> host(static_cast<size_t>((span + kPeriod) * bytes));
  std::vector<float> run(static_cast<size_t>(span + kPeriod));
  for (size_t i = 0; i < run.size(); ++i) run[i] = values[i % kPeriod];
  from_float(type, run.data(), static_cast<int64_t>(run.size()), host.data());
  for (int64_t at = 0; at < elements; at += span) {
    const int64_t count = std::min(span, elements - at);
    const int64_t from = (at + offset) % kPeriod;
    check_cu(driver().cuMemcpyHtoD(dst + static_cast<CUdeviceptr>(at * bytes), host.data() + from * bytes,
                                   static_cast<size_t>(count * bytes)),
             "cuMemcpyHtoD (tuning scratch)");
  }
}

// Pseudo-random run starts, the same for every candidate of one problem.
std::vector<int64_t> sample_starts(int64_t elements) {
  std::vector<int64_t> starts;
  const int64_t runs = std::min<int64_t>(kSampleRuns, (elements + kRunLength - 1) / kRunLength);
  uint64_t state = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(elements);
  for (int64_t r = 0; r < runs; ++r) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t room = std::max<int64_t>(1, elements - kRunLength + 1);
    starts.push_back(r == 0 ? 0 : static_cast<int64_t>((state >> 17) % static_cast<uint64_t>(room)));
  }
  starts.push_back(std::max<int64_t>(0, elements - kRunLength));  // the last elements: a tile's edge
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::vector<TunedCandidate> time_candidates(const Problem& prob, const std::vector<Candidate>& candidates,
                                            const TuneOptions& options, CUcontext ctx, const TuneHooks& hooks) {
  const auto start = Clock::now();
  const auto elapsed_ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); };
  std::vector<TunedCandidate> out(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    out[i].kernel = canonical_text(candidates[i].plan.key);
    out[i].config = candidates[i].config;
    out[i].heuristic = candidates[i].heuristic;
  }
  // Compiles first, all at once: NVRTC runs on every core while the device waits for none of it.
  {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < candidates.size(); i = next++) {
        const auto ready_start = Clock::now();
        try {
          hooks.prepare(candidates[i].plan);
        } catch (const std::exception& e) {
          out[i].error = e.what();
        }
        out[i].ready_ms = std::chrono::duration<double, std::milli>(Clock::now() - ready_start).count();
      }
    };
    const size_t threads = std::min<size_t>(candidates.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> workers;
    for (size_t t = 1; t < threads; ++t) workers.emplace_back(work);
    work();
    for (std::thread& w : workers) w.join();
  }

  ContextScope scope(ctx);
  const Conv3dDesc& d = prob.desc;
  const DataType out_type = prob.out_dtype;
  std::vector<float> values(kPeriod);
  {
    uint64_t state = 0x2545f4914f6cdd1dull;
    for (float& v : values) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      v = static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    // Rounded once to the input type, so that the host reads the values the device holds.
    std::vector<char> bits(values.size() * 4);
    from_float(d.dtype, values.data(), kPeriod, bits.data());
    to_float(d.dtype, bits.data(), kPeriod, values.data());
  }
  std::vector<float> residual_values = values;  // exact in the output's type too: a subset of the input's
  DeviceBuffer input(static_cast<uint64_t>(prob.input_elements) * dtype_bytes(d.dtype));
  DeviceBuffer weight(static_cast<uint64_t>(prob.weight_elements) * dtype_bytes(d.dtype));
  DeviceBuffer bias(d.bias ? static_cast<uint64_t>(d.k) * dtype_bytes(d.dtype) : 0);
  DeviceBuffer output(static_cast<uint64_t>(prob.output_elements) * dtype_bytes(out_type));
  DeviceBuffer residual(d.epilogue.residual ? static_cast<uint64_t>(prob.output_elements) * dtype_bytes(out_type) : 0);
  fill(input.ptr(), prob.input_elements, d.dtype, kOffsets[0], values);
  fill(weight.ptr(), prob.weight_elements, d.dtype, kOffsets[1], values);
  if (d.bias) fill(bias.ptr(), d.k, d.dtype, kOffsets[2], values);
  if (d.epilogue.residual) fill(residual.ptr(), prob.output_elements, out_type, kOffsets[3], residual_values);
  Conv3dTensors tensors;
  tensors.input = input.data();
  tensors.weight = weight.data();
  tensors.bias = d.bias ? bias.data() : nullptr;
  tensors.output = output.data();
  tensors.residual = d.epilogue.residual ? residual.data() : nullptr;
  tensors.shapes_checked = true;

  // The exact outputs of the samples, once for all candidates.
  const std::vector<int64_t> starts = sample_starts(prob.output_elements);
  std::vector<int64_t> sampled;
  for (size_t r = 0; r < starts.size(); ++r) {
    const int64_t end = std::min(prob.output_elements, starts[r] + kRunLength);
    for (int64_t i = std::max(starts[r], sampled.empty() ? 0 : sampled.back() + 1); i < end; ++i) sampled.push_back(i);
  }
  const TensorReader read = [&](RefTensor t, int64_t i) {
    const int which = static_cast<int>(t);
    return static_cast<double>((t == RefTensor::Residual ? residual_values : values)[(i + kOffsets[which]) % kPeriod]);
  };
  std::vector<double> exact(sampled.size());
  {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < sampled.size(); i = next++) exact[i] = reference_at(prob, read, sampled[i]);
    };
    std::vector<std::thread> workers;
    for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t) workers.emplace_back(work);
    work();
    for (std::thread& w : workers) w.join();
  }
  const Tolerance tol = tolerance(d);
  const int out_bytes = dtype_bytes(out_type);

  const DriverApi& drv = driver();
  TuningStream stream;
  CUevent begin = nullptr, end = nullptr;
  check_cu(drv.cuEventCreate(&begin, CU_EVENT_DEFAULT), "cuEventCreate");
  check_cu(drv.cuEventCreate(&end, CU_EVENT_DEFAULT), "cuEventCreate");
  struct Events {
    CUevent a, b;
    ~Events() {
      driver().cuEventDestroy(a);
      driver().cuEventDestroy(b);
    }
  } events{begin, end};

  double best_ms = -1;  // of the accurate candidates timed so far
  for (size_t i = 0; i < candidates.size(); ++i) {
    TunedCandidate& c = out[i];
    if (!c.error.empty()) continue;
    if (i > 0 && elapsed_ms() > options.budget_ms) {
      c.error = fmt::format("not timed: the tuning budget of {} ms was spent", options.budget_ms);
      continue;
    }
    const Plan& plan = candidates[i].plan;
    try {
      // All ones: NaN in every type, so an output the kernel never writes fails the check.
      check_cu(drv.cuMemsetD8(output.ptr(), 0xff, static_cast<size_t>(prob.output_elements * out_bytes)), "cuMemsetD8");
      hooks.launch(plan, tensors, stream.get());
      check_cu(drv.cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
      std::vector<char> got(sampled.size() * out_bytes);
      size_t at = 0;
      for (int64_t s : starts) {
        const int64_t from = std::max<int64_t>(s, at == 0 ? 0 : sampled[at - 1] + 1);
        const int64_t count = std::min(prob.output_elements, s + kRunLength) - from;
        if (count <= 0) continue;
        check_cu(drv.cuMemcpyDtoH(got.data() + at * out_bytes, output.ptr() + static_cast<CUdeviceptr>(from * out_bytes),
                                  static_cast<size_t>(count * out_bytes)),
                 "cuMemcpyDtoH");
        at += static_cast<size_t>(count);
      }
      const Comparison cmp = compare(got.data(), out_type, exact.data(), static_cast<int64_t>(exact.size()),
                                     Tolerance{tol.rel_l2, -1, -1});
      c.rel_l2 = cmp.rel_l2;
      c.accurate = cmp.passed;
      std::vector<double> times;
      for (int r = 0; r < options.runs; ++r) {
        check_cu(drv.cuEventRecord(begin, stream.get()), "cuEventRecord");
        hooks.launch(plan, tensors, stream.get());
        check_cu(drv.cuEventRecord(end, stream.get()), "cuEventRecord");
        check_cu(drv.cuEventSynchronize(end), "cuEventSynchronize");
        float ms = 0;
        check_cu(drv.cuEventElapsedTime(&ms, begin, end), "cuEventElapsedTime");
        times.push_back(ms);
        // A candidate twice as slow as the best so far cannot win: its other runs would only
        // spend the budget (direct's FFMA ran 0.75 s a call where the winner took 1.8 ms).
        if (best_ms > 0 && ms > kHopeless * best_ms) break;
      }
      c.median_ms = median_of(times);
      if (c.accurate && (best_ms < 0 || c.median_ms < best_ms)) best_ms = c.median_ms;
      if (!c.accurate) {
        log().warn("tuning {}: {} misses its accuracy class on sampled outputs (rel-L2 {:.3g}, {} non-finite); "
                   "not a winner",
                   describe(d), c.kernel, cmp.rel_l2, cmp.non_finite);
      }
    } catch (const Error& e) {
      c.error = e.what();
      c.median_ms = -1;
    }
  }
  return out;
}

}  // namespace conv3djit::detail
