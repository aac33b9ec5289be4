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
#include <sstream>
#include <string>
#include <vector>

#include "conv3djit/engine.hpp"
#include "conv3djit/reference.hpp"
#include "device.hpp"
#include "driver/module_loader.hpp"
#include "jit/nvrtc_compiler.hpp"

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

  // Host time per call on a memory hit against a bare cuLaunchKernel of an empty kernel with the
  // same arguments: their difference is the library's own cost. Each call is timed alone, and the
  // queue is drained every 32 calls so that launches never wait for queue space.
  detail::GeneratedKernel empty;
  empty.source = "extern \"C\" __global__ void empty(const float*, const float*, const float*, float*, "
                 "conv3djit::ConvParams) {}\n";
  empty.source = "#include \"common/common.cuh\"\n" + empty.source;
  empty.name_expression = "empty";
  empty.options = {"--gpu-architecture=" + current_device()->arch};
  CUcontext ctx = nullptr;
  detail::driver().cuCtxGetCurrent(&ctx);
  detail::KernelBinary bare_bin;
  const detail::CompiledKernel compiled = detail::nvrtc_compile(empty);
  bare_bin.lowered_name = compiled.lowered_name;
  bare_bin.cubin = compiled.cubin;
  const CUfunction bare = detail::load_kernel(ctx, bare_bin, 0);
  const Conv3dTensors t = data.tensors();
  ConvParams params{};
  const void* in = t.input;
  const void* wt = t.weight;
  void* out = t.output;
  void* args[] = {&in, &wt, &wt, &out, &params};
  auto median_us = [&](auto&& call) {
    std::vector<double> us;
    for (int round = 0; round < 200; ++round) {
      for (int i = 0; i < 32; ++i) {
        const auto t0 = Clock::now();
        call();
        us.push_back(ms_since(t0) * 1000);
      }
      stream.synchronize();
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  const double conv_us = median_us([&] { engine.run(d, t, stream.get()); });
  const double bare_us = median_us([&] {
    detail::driver().cuLaunchKernel(bare, 1, 1, 1, 32, 1, 1, 0, stream.get(), args, nullptr);
  });
  // The same, without the check that each tensor lies inside its allocation: its cost.
  EngineOptions unchecked_options;
  unchecked_options.check_allocations = false;
  Engine unchecked(unchecked_options);
  unchecked.run(d, t, stream.get());
  const double unchecked_us = median_us([&] { unchecked.run(d, t, stream.get()); });
  const double checked_us = median_us([&] { engine.run(d, t, stream.get()); });
  std::printf("host time per call: conv3d (memory hit) %.2f us, bare cuLaunchKernel %.2f us, "
              "library overhead %.2f us (medians of 6400 calls)\n", conv_us, bare_us, conv_us - bare_us);
  std::printf("allocation check: %.2f us per call with it, %.2f us without (check_allocations = false): "
              "%.2f us\n", checked_us, unchecked_us, checked_us - unchecked_us);

  auto check = [&](const Conv3dDesc& desc, const cli::ProblemData& pd) {
    std::vector<float> got(static_cast<size_t>(pd.output_elements));
    cli::copy_to_host(pd.d_output, got.data());
    std::vector<double> ref(got.size());
    reference_conv3d(desc, pd.input.data(), pd.weight.data(), nullptr, ref.data());
    const Comparison c = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(desc.precision));
    std::printf("result rel-L2 %.3g: %s\n", c.rel_l2, c.passed ? "PASS" : "FAIL");
    return c.passed;
  };
  bool passed = check(d, data);

  // A kernel that takes a TMA tensor map (igemm_sm90 on compute capability 9.0) costs the map's
  // encoding on top, once per input buffer: repeated calls on one buffer reuse it.
  Conv3dDesc tma = d;
  tma.k = 16;
  tma.precision = Precision::Tf32;
  const std::string kernel = engine.kernel_for(tma);
  // igemm_sm90<CG, KD, KH, KW, SD, SH, SW, DD, DH, DW, TH, TW, BN, CC, RP, PP, CP, SPLIT, TMA, ...>
  std::vector<std::string> template_args;
  std::stringstream list(kernel.substr(kernel.find('<') + 1));
  for (std::string arg; std::getline(list, arg, ',');) template_args.push_back(arg);
  if (kernel.find("igemm_sm90<") != std::string::npos && template_args.size() > 18 && template_args[18] == "1") {
    cli::ProblemData tma_data(tma, 6);
    const Conv3dTensors tt = tma_data.tensors();
    engine.run(tma, tt, stream.get());
    const double tma_us = median_us([&] { engine.run(tma, tt, stream.get()); });
    std::printf("host time per call, wgmma kernel with TMA staging: conv3d (memory hit) %.2f us\n", tma_us);
    passed = check(tma, tma_data) && passed;
  } else {
    std::printf("no TMA kernel for the probe's shape here (%s): TMA staging not timed\n", kernel.c_str());
  }
  return passed ? 0 : 1;
}
