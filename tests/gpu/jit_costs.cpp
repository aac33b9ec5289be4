// The JIT's costs, measured in a fresh process, and the cross-process disk cache proven:
//   jit_costs cold  -> the kernel is compiled (disk cache empty), prints the cold compile time
//   jit_costs warm  -> a second process loads it from disk without compiling, prints the load
//                      time (context creation excluded) and the host time per conv3d call on a
//                      memory hit.
// Exits 77 without a device (CTest skip), 1 when an expectation fails.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "conv3djit/engine.hpp"
#include "conv3djit/reference.hpp"
#include "device.hpp"

using namespace conv3djit;
using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "cold") != 0 && std::strcmp(argv[1], "warm") != 0)) {
    std::fprintf(stderr, "usage: jit_costs cold|warm (CONV3DJIT_CACHE_DIR names the cache)\n");
    return 2;
  }
  const bool cold = std::strcmp(argv[1], "cold") == 0;
  if (!current_device()) {  // also creates the context, so it is not in the figures below
    std::fprintf(stderr, "SKIP: no CUDA device\n");
    return 77;
  }
  cli::make_context_current();
  Conv3dDesc d;
  d.n = 1; d.c = 3; d.d = 8; d.h = 12; d.w = 16; d.k = 8; d.kernel = {3, 5, 7};
  cli::Stream stream;
  cli::ProblemData data(d, 5);
  Engine& engine = Engine::global();

  const auto t0 = Clock::now();
  engine.run(d, data.tensors(), stream.get());
  const double first_call_ms = ms_since(t0);
  stream.synchronize();
  const EngineStats s = engine.stats();
  std::printf("first call: %.2f ms (compiles %llu, compile %.1f ms, disk hits %llu, module loads %llu)\n",
              first_call_ms, (unsigned long long)s.compiles, s.compile_ms, (unsigned long long)s.disk_hits,
              (unsigned long long)s.module_loads);
  if (cold && s.compiles != 1) return std::fprintf(stderr, "FAIL: expected one compile\n"), 1;
  if (!cold && (s.compiles != 0 || s.disk_hits != 1)) {
    return std::fprintf(stderr, "FAIL: expected a disk hit and no compile\n"), 1;
  }

  // Host time per call on a memory hit: time each call alone, draining the queue every 32 calls
  // so that launches never wait for queue space.
  std::vector<double> us;
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 32; ++i) {
      const auto t = Clock::now();
      engine.run(d, data.tensors(), stream.get());
      us.push_back(ms_since(t) * 1000);
    }
    stream.synchronize();
  }
  std::sort(us.begin(), us.end());
  std::printf("host time per conv3d call (memory hit): median %.2f us, p90 %.2f us over %zu calls\n",
              us[us.size() / 2], us[us.size() * 9 / 10], us.size());

  std::vector<float> got(static_cast<size_t>(data.output_elements));
  cli::copy_to_host(data.d_output, got.data());
  std::vector<double> ref(got.size());
  reference_conv3d(d, data.input.data(), data.weight.data(), nullptr, ref.data());
  const Comparison c = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(Precision::Fp32));
  std::printf("result rel-L2 %.3g: %s\n", c.rel_l2, c.passed ? "PASS" : "FAIL");
  return c.passed ? 0 : 1;
}
