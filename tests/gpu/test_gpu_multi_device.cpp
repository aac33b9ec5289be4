// One process, two GPUs: 2 threads per device with mixed shapes, against the float64 reference;
// each kernel compiled once per arch and loaded once per device (the Engine's counters against
// the cache's entry count); a disk cache warmed on device 0 serves device 1 without compiling; a
// call made while another device's context is current runs on its stream's device. Skipped
// (exit 77) with fewer than 2 devices.
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "config_cases.hpp"
#include "driver/driver_api.hpp"
#include "gpu_check.hpp"

using namespace conv3djit;
using test::make;

namespace {

constexpr int kDevices = 2;
constexpr int kThreadsPerDevice = 2;
constexpr int kRounds = 2;

// Small enough for the CPU reference; between them the planner's kernel families on sm_90:
// wgmma with resident and with prepared (chunked) weights, its tf32 form, the FFMA tiled
// kernel (K < 16), the grouped kernel and a flat pointwise plan.
std::vector<Conv3dDesc> mixed_shapes() {
  std::vector<Conv3dDesc> d = {
      make(2, 3, {5, 21, 70}, 64, {3, 5, 7}, 1, 0, 1, 1, true),
      make(1, 48, {4, 7, 9}, 70, {3, 3, 3}, 1, 1, 1, 1, true),
      make(1, 8, {6, 11, 21}, 20, {3, 3, 3}, {1, 2, 2}, 1, 1, 1, true),
      make(2, 3, {9, 13, 37}, 13, {3, 5, 7}),
      make(2, 16, {5, 19, 70}, 16, {3, 3, 3}, 1, 1, 1, 16, true),
      make(1, 24, {3, 8, 28}, 40, {1, 1, 1}, 1, 0, 1, 1, true),
  };
  d[2].precision = Precision::Tf32;
  return d;
}

std::vector<CUcontext> primary_contexts() {
  std::vector<CUcontext> ctx(kDevices);
  for (int i = 0; i < kDevices; ++i) {
    CUdevice dev = 0;
    detail::check_cu(detail::driver().cuDeviceGet(&dev, i), "cuDeviceGet");
    detail::check_cu(detail::driver().cuDevicePrimaryCtxRetain(&ctx[i], dev), "cuDevicePrimaryCtxRetain");
  }
  return ctx;
}

std::string fresh_dir(const char* name) {
  const std::string dir = std::string(CONV3DJIT_TEST_BINARY_DIR) + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// Threads on both devices at once, each on its own stream of its device, every shape in its own
// order. `cross`: odd threads call conv3d while the other device's context is current. Returns
// one line per failed check (Catch assertions are not thread-safe).
std::vector<std::string> run_on_both(Engine& engine, const std::vector<CUcontext>& ctx, bool cross) {
  const std::vector<Conv3dDesc> shapes = mixed_shapes();
  std::mutex mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int dev = 0; dev < kDevices; ++dev) {
    for (int t = 0; t < kThreadsPerDevice; ++t) {
      threads.emplace_back([&, dev, t] {
        try {
          detail::check_cu(detail::driver().cuCtxSetCurrent(ctx[dev]), "cuCtxSetCurrent");
          cli::Stream stream;
          const CUcontext call_from = cross && t % 2 == 1 ? ctx[(dev + 1) % kDevices] : nullptr;
          for (int round = 0; round < kRounds; ++round) {
            for (size_t i = 0; i < shapes.size(); ++i) {
              const Conv3dDesc& d = shapes[(i + t + round) % shapes.size()];
              const uint64_t seed = 100000u * dev + 1000u * t + 10u * round + i;
              const test::GpuCheck r = test::check_against_reference(engine, d, seed, stream, call_from);
              if (!r.comparison.passed || r.comparison.non_finite != 0) {
                std::ostringstream line;
                line << "device " << dev << " thread " << t << ": " << describe(d) << " (" << r.kernel
                     << "): rel-L2 " << r.comparison.rel_l2 << ", outside tolerance "
                     << r.comparison.outside_tolerance << ", non-finite " << r.comparison.non_finite;
                std::lock_guard<std::mutex> lock(mutex);
                failures.push_back(line.str());
              }
            }
          }
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mutex);
          failures.push_back(std::string("device ") + std::to_string(dev) + ": " + e.what());
        }
      });
    }
  }
  for (auto& th : threads) th.join();
  return failures;
}

uint64_t calls_per_run() { return uint64_t{kDevices} * kThreadsPerDevice * kRounds * mixed_shapes().size(); }

}  // namespace

TEST_CASE("two devices from a cold cache: one compile per kernel, one load per kernel and device") {
  const std::vector<CUcontext> ctx = primary_contexts();
  EngineOptions options;
  options.cache_dir = fresh_dir("cache-two-devices-cold");
  Engine engine(options);
  const std::vector<std::string> failures = run_on_both(engine, ctx, false);
  for (const std::string& f : failures) FAIL_CHECK(f);
  CHECK(failures.empty());
  // Each kernel (the convolutions and the weight preparation kernel) became one cache entry.
  const uint64_t kernels = engine.cache_entries().size();
  const EngineStats s = engine.stats();
  INFO("kernels " << kernels << ", compiles " << s.compiles << ", disk hits " << s.disk_hits << ", loads "
                  << s.module_loads << ", memory hits " << s.memory_hits);
  CHECK(kernels >= mixed_shapes().size());
  CHECK(s.compiles == kernels);  // once per arch, although both devices wanted each at once
  CHECK(s.disk_hits == 0);
  CHECK(s.module_loads == kDevices * kernels);
  CHECK(s.memory_hits >= calls_per_run() - kDevices * kernels);  // more: the preparation kernel
  std::filesystem::remove_all(options.cache_dir);
}

TEST_CASE("a cache warmed on device 0 serves device 1 without compiling; calls follow their stream") {
  const std::vector<CUcontext> ctx = primary_contexts();
  EngineOptions options;
  options.cache_dir = fresh_dir("cache-two-devices-warm");
  uint64_t kernels = 0;
  {
    // Warm the disk cache on device 0 alone (as a deployment's precompile step would).
    detail::check_cu(detail::driver().cuCtxSetCurrent(ctx[0]), "cuCtxSetCurrent");
    Engine warm(options);
    for (const Conv3dDesc& d : mixed_shapes()) warm.precompile(d);
    kernels = warm.cache_entries().size();
    CHECK(warm.stats().compiles == kernels);
  }
  // A new process's Engine: both devices, and half the threads call with the other device's
  // context current (their stream decides where the kernel runs; the data lives only there).
  Engine engine(options);
  const std::vector<std::string> failures = run_on_both(engine, ctx, true);
  for (const std::string& f : failures) FAIL_CHECK(f);
  CHECK(failures.empty());
  const EngineStats s = engine.stats();
  INFO("kernels " << kernels << ", compiles " << s.compiles << ", disk hits " << s.disk_hits << ", loads "
                  << s.module_loads);
  CHECK(s.compiles == 0);
  CHECK(s.disk_hits == kernels);                  // each cubin read once, for both devices
  CHECK(s.module_loads == kDevices * kernels);
  std::filesystem::remove_all(options.cache_dir);
}
