// conv3d on the GPU against the float64 reference: varied descriptions (every feature, odd
// extents that end mid-tile, large reductions), threads, graph capture and replay. Skipped
// (exit 77) without a device. Fresh random inputs each run; outputs NaN-poisoned.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "cache/disk_cache.hpp"
#include "driver/driver_api.hpp"
#include "core/problem.hpp"
#include "config_cases.hpp"
#include "gpu_check.hpp"

using namespace conv3djit;

namespace {

using test::make;

std::vector<Conv3dDesc> listed_descriptions() {
  return {
      make(2, 3, {16, 20, 23}, 64, {3, 5, 7}),                                  // reference kernel, odd W
      make(16, 3, {64, 64, 64}, 64, {3, 5, 7}),                                 // the reference problem
      make(1, 1, {5, 6, 7}, 1, {1, 1, 1}),                                      // N = C = K = 1
      make(1, 1, {9, 9, 9}, 1, {3, 3, 3}, 1, 1, 1, 1, true),                    // C = 1 with bias
      make(2, 16, {8, 9, 10}, 32, {1, 1, 1}),                                   // pointwise
      make(1, 128, {4, 6, 7}, 96, {1, 1, 1}, 1, 0, 1, 1, true),                 // pointwise, wide
      make(2, 3, {17, 33, 35}, 24, {7, 7, 7}, 2, 3),                            // I3D stem-like
      make(1, 8, {9, 14, 14}, 16, {1, 3, 3}, {1, 2, 2}, Dims3{0, 1, 1}),        // R(2+1)D spatial
      make(1, 16, {9, 7, 7}, 8, {3, 1, 1}, 1, Dims3{1, 0, 0}),                  // R(2+1)D temporal
      make(2, 12, {6, 10, 11}, 12, {3, 3, 3}, 1, 1, 1, 12),                     // depthwise
      make(1, 32, {5, 8, 13}, 32, {3, 3, 3}, 1, 1, 1, 32, true),                // depthwise + bias
      make(2, 16, {7, 9, 10}, 24, {3, 3, 3}, 1, 1, 1, 4),                       // grouped
      make(1, 6, {6, 7, 8}, 9, {2, 3, 2}, 1, 0, 1, 3, true),                    // grouped, odd K
      make(1, 4, {12, 13, 14}, 5, {3, 3, 3}, 1, 2, 2),                          // dilated
      make(1, 4, {12, 13, 15}, 7, {3, 2, 3}, 1, 0, {3, 2, 1}),                  // mixed dilation
      make(1, 5, {10, 11, 12}, 3, {4, 3, 2}, 1, Padding::same(), {1, 2, 3}),    // same, even kernels
      make(2, 3, {7, 8, 9}, 4, {3, 3, 3}, 1, Padding::same(), 1, 1, true),      // same + bias
      make(1, 3, {9, 10, 11}, 4, {3, 3, 3}, 1, Padding::valid()),               // valid
      make(1, 3, {11, 12, 13}, 5, {3, 3, 3}, {3, 2, 1}, Dims3{2, 1, 0}),        // mixed stride
      make(3, 2, {5, 5, 5}, 3, {5, 5, 5}, 1, 0),                                // kernel = input
      make(1, 2, {3, 4, 5}, 3, {5, 6, 7}, 1, Dims3{1, 1, 1}),                   // kernel > input
      make(1, 7, {13, 1, 29}, 11, {3, 1, 5}, 1, Dims3{1, 0, 2}),                // H = 1
      make(2, 3, {4, 4, 1}, 5, {3, 3, 1}, 1, 1),                                // W = 1
      make(1, 64, {6, 8, 10}, 17, {5, 5, 5}, 1, 2),                             // C*K^3 = 8000
      make(1, 512, {5, 6, 7}, 9, {3, 3, 3}, 1, 1, 1, 1, true),                  // C*K^3 = 13824
      make(1, 96, {4, 5, 66}, 130, {1, 3, 3}, 1, Dims3{0, 1, 1}),               // W ends mid-tile
      make(2, 3, {8, 8, 8}, 16, {2, 2, 2}, 2),                                  // patchify
      make(1, 3, {20, 22, 24}, 8, {1, 7, 7}, {1, 2, 2}, Dims3{0, 3, 3}, 1, 1, true),
      // Per side: causal in time (a video VAE's 2 frames before, none after), and lopsided.
      make(1, 16, {5, 12, 20}, 32, {3, 3, 3}, 1, Padding::per_side({2, 1, 1}, {0, 1, 1}), 1, 1, true),
      make(2, 3, {6, 20, 23}, 64, {3, 5, 7}, 1, Padding::per_side({2, 2, 3}, {0, 2, 3})),
      make(1, 64, {4, 9, 10}, 64, {3, 3, 3}, 1, Padding::per_side({2, 1, 1}, {0, 1, 1}), 1, 64),
      make(1, 16, {5, 7, 9}, 24, {3, 3, 3}, 1, Padding::per_side({2, 1, 1}, {0, 1, 1}), 1, 4),
      make(1, 1, {7, 9, 11}, 1, {3, 3, 3}, 1, Padding::per_side({0, 3, 0}, {2, 0, 4})),
      make(1, 8, {6, 8, 30}, 16, {1, 3, 3}, {1, 2, 2}, Padding::per_side({0, 0, 2}, {0, 2, 0})),
      // SlowFast's fast stem (K = 8: igemm_sm90 in the tf32 class) and an I3D stem of 64 columns
      // (tf32: two blocks of 32 staged by TMA).
      make(1, 3, {8, 30, 33}, 8, {5, 7, 7}, {1, 2, 2}, Dims3{2, 3, 3}),
      make(1, 3, {17, 40, 40}, 64, {7, 7, 7}, 2, 3),
  };
}

// Small random descriptions covering every feature at once (seeded: a failure names its shape).
std::vector<Conv3dDesc> random_descriptions(int count) {
  std::mt19937 rng(20261129);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Conv3dDesc> out;
  while (static_cast<int>(out.size()) < count) {
    Conv3dDesc d = test::random_shape(rng, 6, 19, 9);
    if (pick(0, 5) == 0) {
      d.stride = 1;
      d.padding = Padding::same();
    }
    if (validate(d).ok) out.push_back(d);
  }
  return out;
}

// d on engine with its input 4 bytes past a 16-byte boundary, against the float64 reference.
Comparison run_shifted_input(Engine& engine, const Conv3dDesc& d, const cli::Stream& stream) {
  const cli::ProblemData data(d, 11, 1);
  cli::fill_nan(data.d_output);
  engine.run(d, data.tensors(), stream.get());
  std::vector<float> got(static_cast<size_t>(data.output_elements));
  stream.synchronize();
  cli::copy_to_host(data.d_output, got.data());
  const std::vector<double> ref = cli::reference_output(engine, d, data, stream, false);
  return compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(d.precision));
}

void require_pass(const test::GpuCheck& r) {
  INFO("kernel " << r.kernel << ": rel-L2 " << r.comparison.rel_l2 << ", max error "
                 << r.comparison.max_abs_error << ", outside tolerance " << r.comparison.outside_tolerance
                 << ", non-finite " << r.comparison.non_finite);
  CHECK(r.comparison.non_finite == 0);
  CHECK(r.comparison.passed);
}

// Each description through the planner, a section each, on fresh inputs: its class passes and its
// kernel's key text starts with kernel_of(description).
template <class KernelOf>
void check_planned(const std::vector<Conv3dDesc>& descs, KernelOf kernel_of) {
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  for (const Conv3dDesc& d : descs) {
    DYNAMIC_SECTION("auto " << describe(d)) {
      const test::GpuCheck r = test::check_against_reference(Engine::global(), d, seeds(), stream);
      require_pass(r);
      CHECK(r.kernel.rfind(kernel_of(d), 0) == 0);
    }
  }
}

}  // namespace

TEST_CASE("listed and random descriptions match the float64 reference (fp32 class)") {
  cli::make_context_current();
  cli::Stream stream;
  std::vector<Conv3dDesc> descs = listed_descriptions();
  for (const Conv3dDesc& d : random_descriptions(24)) descs.push_back(d);
  REQUIRE(descs.size() >= 40);
  std::random_device seeds;
  for (const Conv3dDesc& d : descs) {
    DYNAMIC_SECTION(describe(d)) { require_pass(test::check_against_reference(Engine::global(), d, seeds(), stream)); }
  }
}

TEST_CASE("the listed descriptions meet both classes on inputs in [0, 1) too") {
  // Image-like inputs: every product of one sign per weight, so no cancellation hides an error in
  // the input's split or rounding (the accuracy classes hold on both ranges, the large reductions included).
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  for (Conv3dDesc d : listed_descriptions()) {
    for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
      d.precision = precision;
      DYNAMIC_SECTION(describe(d)) {
        require_pass(test::check_against_reference(Engine::global(), d, seeds(), stream, nullptr, {0.0f, 1.0f}));
      }
    }
  }
}

TEST_CASE("random depthwise descriptions run on depthwise and match the reference") {
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  // Widths on and off 16-byte rows, every padding mod 4, dilation, stride along H, multipliers.
  const test::DepthwiseRanges small{2, 12, {9, 17, 48}, {3, 3, 5}, 2, 2, {2, 2, 5}, 2};
  for (const Conv3dDesc& d : test::random_depthwise(24, 29112026, small)) {
    DYNAMIC_SECTION(describe(d)) {
      CHECK(Engine::global().kernel_for(d).rfind("depthwise fp32 ncdhw ", 0) == 0);
      require_pass(test::check_against_reference(Engine::global(), d, seeds(), stream));
    }
  }
}

TEST_CASE("8 threads with mixed shapes, each on its own stream") {
  cli::make_context_current();
  CUcontext ctx = nullptr;
  detail::driver().cuCtxGetCurrent(&ctx);
  const std::vector<Conv3dDesc> descs = random_descriptions(8);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      detail::driver().cuCtxSetCurrent(ctx);
      cli::Stream stream;
      for (int round = 0; round < 3; ++round) {
        const Conv3dDesc& d = descs[(t + round) % descs.size()];
        const auto r = test::check_against_reference(Engine::global(), d, 1000 * t + round, stream);
        if (!r.comparison.passed) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
}

TEST_CASE("a conv3d call captured into a CUDA graph replays correctly on new data") {
  cli::make_context_current();
  const detail::DriverApi& drv = detail::driver();
  cli::Stream stream;
  const Conv3dDesc d = make(2, 5, {9, 10, 13}, 6, {3, 3, 3}, 1, 1, 1, 1, true);
  cli::ProblemData data(d, 7);
  Engine::global().run(d, data.tensors(), stream.get());  // compile and load outside the capture
  stream.synchronize();

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  REQUIRE(drv.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  conv3d(d, data.tensors(), stream.get());
  REQUIRE(drv.cuStreamEndCapture(stream.get(), &graph) == CUDA_SUCCESS);
  REQUIRE(drv.cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);

  for (uint64_t seed : {11u, 12u}) {
    cli::ProblemData fresh(d, seed);  // new values, copied into the captured buffers
    const size_t in_bytes = fresh.input.size() * sizeof(float);
    REQUIRE(drv.cuMemcpyHtoD(data.d_input.handle(), fresh.input.data(), in_bytes) == CUDA_SUCCESS);
    REQUIRE(drv.cuMemcpyHtoD(data.d_weight.handle(), fresh.weight.data(), fresh.weight.size() * 4) == CUDA_SUCCESS);
    REQUIRE(drv.cuMemcpyHtoD(data.d_bias.handle(), fresh.bias.data(), fresh.bias.size() * 4) == CUDA_SUCCESS);
    cli::fill_nan(data.d_output);
    REQUIRE(drv.cuGraphLaunch(exec, stream.get()) == CUDA_SUCCESS);
    stream.synchronize();
    std::vector<float> got(static_cast<size_t>(data.output_elements));
    cli::copy_to_host(data.d_output, got.data());
    std::vector<double> ref(got.size());
    reference_conv3d(d, fresh.input.data(), fresh.weight.data(), fresh.bias.data(), ref.data());
    const Comparison c = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(Precision::Fp32));
    INFO("replay with seed " << seed << ": rel-L2 " << c.rel_l2);
    CHECK(c.passed);
  }
  drv.cuGraphExecDestroy(exec);
  drv.cuGraphDestroy(graph);
}

TEST_CASE("the memory cache serves repeated calls without compiling or loading again") {
  cli::make_context_current();
  cli::Stream stream;
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  const Conv3dDesc d = make(1, 4, {6, 7, 8}, 3, {3, 3, 3});
  cli::ProblemData data(d, 3);
  for (int i = 0; i < 5; ++i) engine.run(d, data.tensors(), stream.get());
  stream.synchronize();
  const EngineStats s = engine.stats();
  CHECK(s.compiles == 1);
  CHECK(s.module_loads == 1);
  CHECK(s.memory_hits == 4);
}

// igemm_sm90's configurations ("sm90:...") apart from the other families': the two halves of
// the configuration matrices run as tests of their own, side by side.
bool is_sm90(const std::string& config) { return config.rfind("sm90:", 0) == 0; }

// Each forced configuration of config_cases() of igemm_sm90 (or of the other families) on its
// descriptions, a section each.
void check_forced_configs(bool sm90) {
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  for (const test::ConfigCase& c : test::config_cases().forced) {
    if (is_sm90(c.config) != sm90) continue;
    EngineOptions options;
    options.kernel_config = c.config;
    options.disk_cache = false;
    Engine engine(options);
    for (const Conv3dDesc& d : c.descs) {
      DYNAMIC_SECTION(c.config << " " << describe(d)) {
        require_pass(test::check_against_reference(engine, d, seeds(), stream));
      }
    }
  }
}

TEST_CASE("every igemm_sm90 configuration the planner can pick matches the reference") { check_forced_configs(true); }

TEST_CASE("every other family's configurations and the planner's own choices match the reference") {
  check_forced_configs(false);
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  // The heuristic's own choices for the configurations' shapes.
  for (const std::vector<Conv3dDesc>& descs : test::config_cases().automatic) {
    for (const Conv3dDesc& d : descs) {
      DYNAMIC_SECTION("auto " << describe(d)) {
        require_pass(test::check_against_reference(Engine::global(), d, seeds(), stream));
      }
    }
  }
}

// Every activation (scaled, with the residual; clamped within the tf32 class's reach) in the
// store path of each configuration of test::epilogue_store_cases() of igemm_sm90 (or of the other
// families).
void check_epilogue_stores(bool sm90) {
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  for (const test::ConfigCase& c : test::epilogue_store_cases()) {
    if (is_sm90(c.config) != sm90) continue;
    EngineOptions options;
    options.kernel_config = c.config;
    options.disk_cache = false;
    Engine engine(options);
    for (Conv3dDesc d : c.descs) {
      for (Epilogue e : test::epilogue_cases()) {
        // A clamp that cuts most outputs to its bounds shrinks the output's norm, not the TF32
        // error of the outputs it keeps: measured against that norm, rel-L2 exceeded 5e-4 (6-7e-4
        // with bounds -0.3, 0.4 on sums of 315 products). In the tf32 class the bounds keep most.
        if (d.precision == Precision::Tf32) e.clamp_min = -3.f, e.clamp_max = 4.f;
        d.epilogue = e;
        DYNAMIC_SECTION(c.config << " " << describe(d)) {
          require_pass(test::check_against_reference(engine, d, seeds(), stream));
        }
      }
    }
  }
}

TEST_CASE("every activation with scaling and the residual matches the reference in igemm_sm90's store paths") {
  check_epilogue_stores(true);
}

TEST_CASE("every activation with scaling and the residual matches the reference in the other families' store paths") {
  check_epilogue_stores(false);
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  // The planner's choices with an epilogue (the reference problem's check runs on the GPU oracle).
  for (Conv3dDesc d : {listed_descriptions()[1], listed_descriptions()[5], listed_descriptions()[10]}) {
    for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
      d.precision = precision;
      d.epilogue = test::epilogue_cases()[5];  // SiLU, scaled, with a residual
      DYNAMIC_SECTION("auto " << describe(d)) {
        require_pass(test::check_against_reference(Engine::global(), d, seeds(), stream));
      }
    }
  }
}

TEST_CASE("every padding mode matches the reference on every family's load path, with every activation") {
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  const PaddingMode modes[] = {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular};
  const std::vector<Epilogue> epilogues = test::epilogue_cases();
  // Description i in mode m takes epilogue 3i + m (mod their count): with more descriptions than
  // epilogues, every (activation, mode) pair runs.
  size_t i = 0;
  for (const test::ConfigCase& c : test::padding_mode_cases()) {
    EngineOptions options;
    options.kernel_config = c.config;
    options.disk_cache = false;
    Engine engine(options);
    for (Conv3dDesc d : c.descs) {
      for (size_t m = 0; m < 3; ++m) {
        d.padding_mode = modes[m];
        d.epilogue = epilogues[(3 * i + m) % epilogues.size()];
        if (d.precision == Precision::Tf32) d.epilogue.clamp_min = -3.f, d.epilogue.clamp_max = 4.f;
        DYNAMIC_SECTION(c.config << " " << describe(d)) {
          require_pass(test::check_against_reference(engine, d, seeds(), stream));
        }
      }
      ++i;
    }
  }
  REQUIRE(i >= epilogues.size());
  // The planner's choices: the reference problem replicate-padded as 'same' (HunyuanVideo's
  // convs pad so), the stem-like, depthwise and pointwise-wide layers in each mode.
  for (const size_t listed : {size_t{1}, size_t{6}, size_t{9}, size_t{0}}) {
    for (const PaddingMode mode : modes) {
      for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
        Conv3dDesc d = listed_descriptions()[listed];
        if (listed == 1 && mode != PaddingMode::Replicate) continue;
        if (listed == 1 || listed == 0) d.padding = Padding::same();
        d.padding_mode = mode;
        d.precision = precision;
        DYNAMIC_SECTION("auto " << describe(d)) {
          require_pass(test::check_against_reference(Engine::global(), d, seeds(), stream));
        }
      }
    }
  }
}

namespace {
// The largest difference between the CPU reference's and the float64 GPU oracle's outputs of d.
double oracle_gap(const Conv3dDesc& d, cli::Stream& stream) {
  const cli::ProblemData data(d, 3);
  const std::vector<double> cpu = cli::reference_output(Engine::global(), d, data, stream, false);
  const std::vector<double> gpu = cli::reference_output(Engine::global(), d, data, stream, true);
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::abs(cpu[i] - gpu[i]));
  return worst;
}
}  // namespace

TEST_CASE("the GPU oracle's padding modes are the CPU reference's") {
  cli::make_context_current();
  cli::Stream stream;
  for (const PaddingMode mode : {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular}) {
    Conv3dDesc d = make(2, 5, {6, 7, 9}, 6, {3, 3, 3}, {1, 2, 1}, Padding::per_side({2, 1, 3}, {0, 3, 2}), {2, 1, 2}, 1, true);
    d.padding_mode = mode;
    INFO(describe(d));
    CHECK(oracle_gap(d, stream) < 1e-12);
  }
}

TEST_CASE("the GPU oracle's epilogue is the CPU reference's") {
  cli::make_context_current();
  cli::Stream stream;
  for (const Epilogue& e : test::epilogue_cases()) {
    Conv3dDesc d = make(2, 5, {6, 7, 9}, 6, {3, 3, 3}, 1, 1, 1, 1, true);
    d.epilogue = e;
    INFO(describe(d));
    CHECK(oracle_gap(d, stream) < 1e-12);
  }
}

TEST_CASE("prepared weights give the outputs of weights prepared on every call, and fit only their own weights") {
  cli::make_context_current();
  cli::Stream stream;
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  auto with = [](Conv3dDesc d, Precision p, DataType t) {
    d.precision = p;
    d.dtype = t;
    return d;
  };
  // A weights step by each kernel that has one (igemm_sm90_weights in the fp32 class, the
  // channels-last copy of igemm_sm90_half's NCDHW plans) and none (the weights read in place: by
  // TMA in igemm_sm90's tf32 chunks, or converted by each block).
  const std::vector<Conv3dDesc> descs = {
      with(make(2, 256, {4, 14, 14}, 512, {1, 1, 1}), Precision::Tf32, DataType::Float32),
      with(make(1, 128, {4, 12, 14}, 128, {3, 3, 3}, 1, 1, 1, 1, true), Precision::Fp32, DataType::Float32),
      with(make(2, 64, {6, 10, 12}, 64, {3, 3, 3}, 1, 1), Precision::Fp32, DataType::BFloat16),
      with(make(1, 4, {6, 7, 8}, 3, {3, 3, 3}), Precision::Fp32, DataType::Float32),
  };
  for (const Conv3dDesc& d : descs) {
    DYNAMIC_SECTION(describe(d)) {
      const cli::ProblemData data(d, 31);
      Conv3dTensors t = data.tensors();
      engine.run(d, t, stream.get());
      stream.synchronize();
      const std::vector<float> each_call = data.output();
      const PlanExplanation plan = engine.explain(d);
      const bool step = std::any_of(plan.steps.begin(), plan.steps.end(), [](const PlanStep& s) { return s.role == "weights"; });
      const PreparedWeights prepared = engine.prepare_weights(d, t.weight, stream.get());
      INFO("kernel " << plan.kernel << ", prepared by '" << prepared.kernel() << "'");
      CHECK(prepared.valid());
      CHECK(prepared.kernel().empty() == !step);
      CHECK((prepared.bytes() > 0) == step);
      cli::fill_nan(data.d_output);
      t.prepared_weights = &prepared;
      const uint64_t reads = engine.stats().prepared_weight_reads;
      engine.run(d, t, stream.get());
      stream.synchronize();
      CHECK(engine.stats().prepared_weight_reads == reads + (step ? 1 : 0));
      const std::vector<float> once = data.output();
      CHECK(std::memcmp(once.data(), each_call.data(), once.size() * sizeof(float)) == 0);
      const std::vector<double> ref = cli::reference_output(engine, d, data, stream, false);
      CHECK(compare(once.data(), ref.data(), static_cast<int64_t>(once.size()), tolerance(d)).passed);

      // Another description of the same weights (another batch size: the input of the first
      // image only) reads them where its plan prepares them the same way, and matches its reference.
      Conv3dDesc one = d;
      one.n = 1;
      cli::ProblemData first(one, 32);
      first.weight = data.weight;  // (what its reference reads: the call reads t.weight's)
      Conv3dTensors t1 = first.tensors();
      t1.weight = t.weight;
      t1.prepared_weights = &prepared;
      const PlanExplanation plan1 = engine.explain(one);
      const bool same = step && std::any_of(plan1.steps.begin(), plan1.steps.end(), [&](const PlanStep& s) {
        return s.role == "weights" && s.kernel == prepared.kernel();
      });
      const uint64_t reads1 = engine.stats().prepared_weight_reads;
      engine.run(one, t1, stream.get());
      stream.synchronize();
      CHECK(engine.stats().prepared_weight_reads == reads1 + (same ? 1 : 0));
      const std::vector<float> got1 = first.output();
      const std::vector<double> ref1 = cli::reference_output(engine, one, first, stream, false);
      CHECK(compare(got1.data(), ref1.data(), static_cast<int64_t>(got1.size()), tolerance(one)).passed);

      // Another weight shape, another weight tensor, an empty object: refused before any launch.
      auto refused = [&](const Conv3dDesc& call, const Conv3dTensors& tensors, const char* says) {
        try {
          engine.run(call, tensors, stream.get());
          FAIL("launched");
        } catch (const Error& e) {
          INFO(e.what());
          CHECK(e.category() == ErrorCategory::InvalidArgument);
          CHECK(std::string(e.what()).find(says) != std::string::npos);
        }
      };
      Conv3dDesc other = d;
      other.k = d.k / 2 + 1;  // (a weight tensor smaller than the one given: the allocation holds it)
      refused(other, t, "were prepared for weights of");
      const cli::ProblemData copy(d, 33);
      Conv3dTensors moved = t;
      moved.weight = copy.d_weight.ptr();
      refused(d, moved, "were made from the weights at");
      const PreparedWeights empty;
      Conv3dTensors unmade = t;
      unmade.prepared_weights = &empty;
      refused(d, unmade, "not made by prepare_weights");
    }
  }
}

TEST_CASE("weights are not prepared into a CUDA graph capture") {
  cli::make_context_current();
  const detail::DriverApi& drv = detail::driver();
  cli::Stream stream;
  const Conv3dDesc d = make(2, 256, {4, 14, 14}, 512, {1, 1, 1});
  const cli::ProblemData data(d, 33);
  CUgraph graph = nullptr;
  REQUIRE(drv.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  std::string refusal;
  try {
    (void)Engine::global().prepare_weights(d, data.tensors().weight, stream.get());
  } catch (const Error& e) {
    if (e.category() == ErrorCategory::InvalidArgument) refusal = e.what();
  }
  REQUIRE(drv.cuStreamEndCapture(stream.get(), &graph) == CUDA_SUCCESS);
  if (graph != nullptr) drv.cuGraphDestroy(graph);
  INFO(refusal);
  CHECK(refusal.find("capturing a CUDA graph") != std::string::npos);
}

TEST_CASE("the residual may be the output itself: each output is read, then overwritten") {
  cli::make_context_current();
  cli::Stream stream;
  // The planner's kernels for a wgmma-sized problem, a depthwise one and one with H = 1.
  for (const Conv3dDesc& base : {listed_descriptions()[0], listed_descriptions()[10], listed_descriptions()[21]}) {
    Conv3dDesc d = base;
    d.epilogue.activation = Activation::Relu;
    d.epilogue.residual = true;
    d.epilogue.beta = 0.5f;
    INFO(describe(d) << " on " << Engine::global().kernel_for(d));
    const cli::ProblemData data(d, 17);
    const std::vector<double> ref = cli::reference_output(Engine::global(), d, data, stream, false);
    Conv3dTensors t = data.tensors();
    t.output = const_cast<void*>(t.residual);
    Engine::global().run(d, t, stream.get());
    stream.synchronize();
    std::vector<float> got(static_cast<size_t>(data.output_elements));
    cli::copy_to_host(data.d_residual, got.data());
    const Comparison c = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(d.precision));
    INFO("rel-L2 " << c.rel_l2);
    CHECK(c.passed);
  }
}

TEST_CASE("the kernels the planner picks keep every value in registers: no local memory") {
  // Each plan's kernel and, where it has one, its twin for inputs not 16-byte aligned (the tf32
  // reference's former cp.async twin spilled 44 bytes before it staged its outputs).
  cli::make_context_current();
  cli::Stream stream;
  std::vector<Conv3dDesc> descs = listed_descriptions();
  for (const std::vector<Conv3dDesc>& list : test::config_cases().automatic) descs.insert(descs.end(), list.begin(), list.end());
  // Paired loads with an odd box shift: the tf32 reference problem with 'same' padding (its kernel
  // once spilled at 128 registers where the even one did not).
  Conv3dDesc same = make(16, 3, {64, 64, 64}, 64, {3, 5, 7}, 1, Padding::same());
  same.precision = Precision::Tf32;
  descs.push_back(same);
  for (const Conv3dDesc& d : test::pair_load_cases()) descs.push_back(d);
  // With the heaviest epilogues: GELU's erf and a residual, in both classes.
  for (Conv3dDesc d : {same, listed_descriptions()[1], listed_descriptions()[10], listed_descriptions()[11]}) {
    d.epilogue = test::epilogue_cases()[3];
    d.epilogue.residual = true;
    descs.push_back(d);
    d.precision = Precision::Fp32;
    descs.push_back(d);
  }
  for (const Conv3dDesc& d : descs) {
    for (bool aligned : {true, false}) {
      const KernelResources r = Engine::global().resources(d, stream.get(), aligned);
      INFO(describe(d) << (aligned ? "" : ", unaligned input") << ": " << r.kernel << " " << r.registers
                       << " registers");
      CHECK(r.local_bytes == 0);
      CHECK(r.registers > 0);
      CHECK(r.block >= 1);
      CHECK(r.grid >= 1);
    }
  }
}

TEST_CASE("float32 NDHWC layers run on igemm_sm90 or in the tf32 class igemm_sm90_half and match the reference in both classes") {
  // Every tile form of the planner in NDHWC (its input transposed into an NCDHW copy, outputs
  // stored channels innermost): row tiles with two planes (the tf32 reference), streamed chunks
  // of 128 and 256 columns, a pointwise layer, W ending mid-tile with K past one column tile, an
  // odd K (single stores), causal padding, stride, dilation, K < 16 and a long kernel in narrow
  // columns; then every epilogue and padding
  // mode on two of them, and no local memory in any.
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  auto ndhwc = [](Conv3dDesc d, Precision precision) {
    d.layout = Layout::NDHWC;
    d.precision = precision;
    return d;
  };
  const std::vector<Conv3dDesc> shapes = {
      make(2, 3, {6, 20, 64}, 64, {3, 5, 7}, 1, 0, 1, 1, true),
      make(1, 256, {4, 14, 14}, 256, {3, 3, 3}, 1, 1, 1, 1, true),
      make(1, 96, {3, 8, 20}, 192, {3, 3, 3}, 1, 1),
      make(2, 128, {4, 6, 8}, 96, {1, 1, 1}, 1, 0, 1, 1, true),
      make(1, 96, {4, 5, 66}, 130, {1, 3, 3}, 1, Dims3{0, 1, 1}),
      make(2, 5, {7, 9, 11}, 33, {3, 3, 3}, 1, 1, 1, 1, true),
      make(1, 16, {5, 12, 20}, 32, {3, 3, 3}, 1, Padding::per_side({2, 1, 1}, {0, 1, 1}), 1, 1, true),
      make(1, 8, {9, 14, 14}, 16, {1, 3, 3}, {1, 2, 2}, Dims3{0, 1, 1}),
      make(1, 4, {12, 13, 16}, 24, {3, 3, 3}, 1, 2, 2),
      make(1, 8, {6, 10, 12}, 5, {3, 3, 3}, 1, 1),
      // A 5 x 5 x 5 kernel whose 3xTF32 chunk weights do not fit 128 columns: 32 (K = 70, three
      // column blocks, the last one short).
      make(1, 24, {5, 9, 14}, 70, {5, 5, 5}, 1, 2, 1, 1, true),
  };
  std::vector<Conv3dDesc> descs;
  for (const Conv3dDesc& d : shapes) {
    for (const Precision precision : {Precision::Fp32, Precision::Tf32}) descs.push_back(ndhwc(d, precision));
  }
  const PaddingMode modes[] = {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular};
  const std::vector<Epilogue> epilogues = test::epilogue_cases();
  for (size_t i = 0; i < epilogues.size(); ++i) {
    Conv3dDesc d = ndhwc(shapes[i % 2 == 0 ? 2 : 5], i % 3 == 0 ? Precision::Fp32 : Precision::Tf32);
    d.epilogue = epilogues[i];
    if (d.precision == Precision::Tf32) d.epilogue.clamp_min = -3.f, d.epilogue.clamp_max = 4.f;
    d.padding_mode = modes[i % 3];
    descs.push_back(d);
  }
  // Epilogues over 128 columns or more, stored from registers (TH x TW tiles 64 wide, and row
  // tiles of bf16 outputs from a 3-channel input; 256 columns in rolled rounds of octets); W and
  // K end mid-tile.
  // And a bf16 layer of 1024 -> 24 channels, a long reduction: igemm_sm90's 32 columns, not
  // igemm_sm90_half's 64.
  for (Conv3dDesc d : {make(2, 3, {4, 20, 70}, 256, {1, 1, 1}, 1, 0, 1, 1, true),
                       make(1, 4, {4, 30, 60}, 500, {1, 7, 7}, 1, Dims3{0, 3, 3}, 1, 1, true),
                       make(1, 16, {4, 9, 67}, 160, {3, 3, 3}, 1, 1, 1, 1, true),
                       make(2, 3, {5, 11, 34}, 128, {3, 3, 3}, 1, 1, 1, 1, true),
                       make(1, 1024, {3, 5, 9}, 24, {3, 3, 3}, 1, 1, 1, 1, true)}) {
    d = ndhwc(d, Precision::Tf32);
    d.epilogue = epilogues[1];  // with the residual
    if (d.k == 128 || d.k == 24) d.dtype = DataType::BFloat16;
    descs.push_back(d);
    d.epilogue = epilogues[4];
    descs.push_back(d);
  }
  for (const Conv3dDesc& d : descs) {
    DYNAMIC_SECTION("auto " << describe(d)) {
      const test::GpuCheck r = test::check_against_reference(Engine::global(), d, seeds(), stream);
      require_pass(r);
      // The tf32 class's layers of 32 channels or more: igemm_sm90_half, reading them in place.
      const std::string type = d.dtype == DataType::BFloat16 ? "bf16" : "fp32";
      const bool in_place = d.dtype == DataType::Float32 && d.precision == Precision::Tf32 && d.c >= 32;
      CHECK(r.kernel.rfind((in_place ? "igemm_sm90_half " : "igemm_sm90 ") + type + " ndhwc", 0) == 0);
      const KernelResources res = Engine::global().resources(d, stream.get(), true);
      INFO(res.kernel << " " << res.registers << " registers");
      CHECK(res.local_bytes == 0);
    }
  }
}

TEST_CASE("grouped and depthwise NDHWC layers run on the grouped kernel and match the reference") {
  // The listed grouped and depthwise shapes in NDHWC, both classes; then every epilogue with a
  // padding mode on two of them.
  std::vector<Conv3dDesc> descs;
  for (Conv3dDesc d : listed_descriptions()) {
    if (d.groups == 1) continue;
    d.layout = Layout::NDHWC;
    for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
      d.precision = precision;
      descs.push_back(d);
    }
  }
  const PaddingMode modes[] = {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular};
  const std::vector<Epilogue> epilogues = test::epilogue_cases();
  for (size_t i = 0; i < epilogues.size(); ++i) {
    Conv3dDesc d = make(2, 16, {7, 9, 10}, 24, {3, 3, 3}, 1, 1, 1, i % 2 == 0 ? 4 : 8, true);
    d.layout = Layout::NDHWC;
    d.epilogue = epilogues[i];
    d.padding_mode = modes[i % 3];
    descs.push_back(d);
  }
  // Groups of 8 and 16 channels whose natural tiles' rings do not fit two blocks an SM: smaller
  // tiles (wide planes, mid-tile rows and columns), with a residual and in bf16 (where the bf16
  // groups have 8 channels in and out, grouped_mma's tensor cores take them).
  for (Conv3dDesc d : {make(1, 64, {4, 40, 58}, 64, {3, 3, 3}, 1, 1, 1, 8, true),
                       make(1, 64, {3, 19, 30}, 48, {3, 3, 3}, 1, 1, 1, 4, true)}) {
    d.layout = Layout::NDHWC;
    descs.push_back(d);
    d.epilogue = epilogues[1];
    d.dtype = DataType::BFloat16;
    descs.push_back(d);
  }
  check_planned(descs, [](const Conv3dDesc& d) {
    if (d.dtype != DataType::BFloat16) return "grouped fp32 ndhwc";
    return d.c / d.groups % 8 == 0 && d.k / d.groups % 8 == 0 ? "grouped_mma bf16 ndhwc" : "grouped bf16 ndhwc";
  });
}

TEST_CASE("a block whose static and dynamic shared memory pass 48 KB only together launches") {
  // bench/edge_sweep.jsonl e228: the grouped kernel's weights (static, 4320 bytes) beside its
  // ring (45360 bytes dynamic) need the shared-memory opt-in, which the launch once asked for only
  // where the dynamic part alone passed 48 KB (CUDA_ERROR_INVALID_VALUE).
  Conv3dDesc d = make(2, 15, {33, 3, 16}, 48, {3, 3, 3}, {1, 1, 2}, Dims3{2, 3, 3}, {3, 3, 1}, 3, true);
  d.dtype = DataType::BFloat16;
  d.padding_mode = PaddingMode::Circular;
  d.epilogue.activation = Activation::Gelu;
  check_planned({d}, [](const Conv3dDesc&) { return "grouped bf16 ncdhw"; });
}

TEST_CASE("a long chunked reduction behind tanh stays in the fp32 class on direct_tiled") {
  // bench/edge_sweep.jsonl e136: 96 channels a group x 3 x 5 x 7 (10 080 terms). tanh shrinks the
  // outputs to about 1 but not the sums' rounding errors; summed a chunk of 4 channels at a time
  // it measured rel-L2 1.24e-6 against the class's 1e-6.
  Conv3dDesc d = make(1, 288, {17, 8, 13}, 288, {3, 5, 7}, {2, 3, 1}, Dims3{0, 1, 0}, 1, 3, true);
  d.epilogue.activation = Activation::Tanh;
  d.epilogue.residual = true;
  check_planned({d}, [](const Conv3dDesc&) { return "direct_tiled fp32 ncdhw"; });
}

TEST_CASE("an input that is not 16-byte aligned: TMA plans copy it, 16-byte-copy plans run their 4-byte twin") {
  cli::make_context_current();
  cli::Stream stream;
  EngineOptions tiled_options;
  tiled_options.kernel_config = "tiled:8,1,4,3,8";
  Engine tiled(tiled_options);
  // igemm_sm90 with TMA staging (both classes: their boxes read a copy of the input), the tiled
  // FFMA kernel with 16-byte copies and the depthwise kernel with 16-byte loads (their twins load
  // 4 bytes at a time): the plans end in a 1 (TMA; igemm_sm90's is followed by its row-tile
  // width, output planes a tile, box shift parity and tiles across images) or 4 (copy width; the
  // tiled kernel's is followed by its team count).
  struct Case {
    Engine* engine;
    Precision precision;
    const char* kernel;
    const char* staging;
    Conv3dDesc desc;
  };
  const Conv3dDesc dense = make(1, 8, {6, 11, 20}, 20, {3, 3, 3}, {1, 2, 2}, Dims3{1, 1, 0}, 1, 1, true);
  const Conv3dDesc depthwise = make(2, 12, {7, 10, 28}, 12, {3, 3, 3}, 1, 1, 1, 12, true);
  for (const Case& k : {Case{&Engine::global(), Precision::Fp32, "igemm_sm90 ", " tma=1 rows=0 planes=1 parity=0 across=0", dense},
                        Case{&Engine::global(), Precision::Tf32, "igemm_sm90 ", " tma=1 rows=0 planes=1 parity=0 across=0", dense},
                        Case{&tiled, Precision::Fp32, "direct_tiled ", " v=4 p=1", dense},
                        Case{&Engine::global(), Precision::Fp32, "depthwise ", " v=4", depthwise}}) {
    Conv3dDesc d = k.desc;
    d.precision = k.precision;
    Engine& engine = *k.engine;
    DYNAMIC_SECTION(k.kernel << " " << describe(d)) {
      const std::string planned = engine.kernel_for(d);
      INFO(planned);
      REQUIRE(planned.rfind(k.kernel, 0) == 0);
      REQUIRE(planned.substr(planned.size() - std::strlen(k.staging)) == k.staging);
      const Comparison c = run_shifted_input(engine, d, stream);
      INFO("rel-L2 " << c.rel_l2 << ", non-finite " << c.non_finite);
      CHECK(c.non_finite == 0);
      CHECK(c.passed);
    }
  }
}

TEST_CASE("rows that are not 16-byte multiples reach TMA boxes through a pitched copy, at any input alignment") {
  // The planner's choice where the copy pays (W = 66: rows of 68 floats), both classes (tf32: two
  // planes a tile); the config cases force smaller ones. No twin: the copy reads any alignment.
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
    Conv3dDesc d = make(8, 3, {32, 64, 66}, 64, {3, 5, 7});
    d.precision = precision;
    DYNAMIC_SECTION(describe(d)) {
      const std::string planned = Engine::global().kernel_for(d);
      INFO(planned);
      REQUIRE(planned.rfind("igemm_sm90 ", 0) == 0);
      CHECK(planned.find(" tma=1 ") != std::string::npos);
      require_pass(test::check_against_reference(Engine::global(), d, seeds(), stream));
      const Comparison c = run_shifted_input(Engine::global(), d, stream);
      INFO("unaligned input: rel-L2 " << c.rel_l2 << ", non-finite " << c.non_finite);
      CHECK(c.non_finite == 0);
      CHECK(c.passed);
    }
  }
}

TEST_CASE("tiles across images match the reference: pointwise_512, fused, unaligned; images of 2 rows") {
  // pointwise_512 in both classes (16 x 8 tiles of all 8 x 98 rows, 6 of 7 a column block
  // crossing into the next image; streamed weights, every block walking all column blocks), plain
  // and with SiLU, scaling and a residual, and from an input off 16 bytes (its pitched copy); then
  // images of 2 rows of 8, each tile spanning 8 images. Forced: the heuristic keeps tiles within
  // images.
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  Engine& across = test::engine_for("sm90:16,8,128,32,1,0,1,1");
  for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
    for (const bool fused : {false, true}) {
      Conv3dDesc d = make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}, 1, 0, 1, 1, true);
      d.precision = precision;
      if (fused) d.epilogue = test::epilogue_cases()[5];
      DYNAMIC_SECTION(describe(d)) {
        const std::string planned = across.kernel_for(d);
        INFO(planned);
        REQUIRE(planned.find(" across=1") != std::string::npos);
        require_pass(test::check_against_reference(across, d, seeds(), stream));
        const Comparison c = run_shifted_input(across, d, stream);
        INFO("unaligned input: rel-L2 " << c.rel_l2 << ", non-finite " << c.non_finite);
        CHECK(c.non_finite == 0);
        CHECK(c.passed);
      }
    }
  }
  Engine& forced = test::engine_for("sm90:16,8,64,16,1,0,1,1");
  for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
    Conv3dDesc d = make(37, 16, {1, 2, 8}, 72, {1, 1, 1}, 1, 0, 1, 1, true);
    d.precision = precision;
    DYNAMIC_SECTION("forced " << describe(d)) {
      const test::GpuCheck r = test::check_against_reference(forced, d, seeds(), stream);
      require_pass(r);
      CHECK(r.kernel.find(" across=1") != std::string::npos);
    }
  }
}

TEST_CASE("tiles that stage their outputs copy them out themselves where TMA cannot store them") {
  // igemm_sm90's staging boxes leave through a tensor map of the output, which needs a 16-byte
  // aligned address and planes of OH x OW a multiple of 4 floats, and for TH x TW tiles rows of
  // whole tiles (OW a multiple of TW); elsewhere each warp copies its box out with plain stores (and TH x TW tiles
  // with the plain epilogue store from registers). Row tiles (the 19-row input's planes are 15 x
  // 26 = 390 floats), the planner's 256-column tiles of a pointwise layer, plain and with SiLU
  // and a residual (W = 28 planned as planes 64 wide; W = 30 not), and forced 2 x 64 tiles of 256
  // columns on rows of 128 (TMA) and of 48 (tiles reaching past the row's end: the warps copy out,
  // or plain, store from registers), 5 rows (the last tile half past the plane).
  cli::make_context_current();
  cli::Stream stream;
  EngineOptions options;
  options.kernel_config = "sm90:4,64,64,3,1,1,2";  // test_plan: these tiles stage 32 channels a box
  Engine rows(options);
  options.kernel_config = "sm90:2,64,256,32,1,0,1";
  Engine wide(options);
  std::vector<std::pair<Engine*, Conv3dDesc>> cases;
  for (int64_t h : {20, 19}) cases.emplace_back(&rows, make(2, 3, {9, h, 32}, 40, {3, 5, 7}, 1, 1, 1, 1, true));
  for (int64_t w : {128, 48}) {
    Conv3dDesc d = make(1, 64, {2, 5, w}, 256, {1, 1, 1}, 1, 0, 1, 1, true);
    cases.emplace_back(&wide, d);
    d.epilogue.activation = Activation::Silu;
    cases.emplace_back(&wide, d);
  }
  for (int64_t w : {28, 30}) {
    Conv3dDesc d = make(1, 512, {8, 28, w}, 512, {1, 1, 1}, 1, 0, 1, 1, true);
    cases.emplace_back(&Engine::global(), d);
    d.epilogue.activation = Activation::Silu;
    d.epilogue.residual = true;
    cases.emplace_back(&Engine::global(), d);
  }
  for (auto& [engine, d] : cases) {
    d.precision = Precision::Tf32;
    cli::ProblemData data(d, 5);
    const std::vector<double> ref = cli::reference_output(*engine, d, data, stream, false);
    const size_t bytes = static_cast<size_t>(data.output_elements) * sizeof(float);
    for (int offset : {0, 4, 8}) {
      DYNAMIC_SECTION(describe(d) << ", output " << offset << " bytes past a 256-byte boundary") {
        INFO(engine->kernel_for(d));
        cli::DeviceBuffer shifted(bytes + 16);
        cli::fill_nan(shifted);
        Conv3dTensors t = data.tensors();
        t.output = reinterpret_cast<float*>(static_cast<char*>(shifted.ptr()) + offset);
        engine->run(d, t, stream.get());
        stream.synchronize();
        std::vector<float> got(static_cast<size_t>(data.output_elements));
        detail::check_cu(detail::driver().cuMemcpyDtoH(got.data(), reinterpret_cast<CUdeviceptr>(t.output), bytes),
                         "cuMemcpyDtoH");
        const Comparison c =
            compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(d.precision));
        INFO("rel-L2 " << c.rel_l2 << ", non-finite " << c.non_finite);
        CHECK(c.non_finite == 0);
        CHECK(c.passed);
      }
    }
  }
}

TEST_CASE("NaN and infinity in the input reach exactly the outputs that read them") {
  // The tensor-core kernels round their gathered operands with integer arithmetic (tf32.cuh); a
  // NaN's mantissa can carry into the sign there, so each special value must still come out.
  cli::make_context_current();
  cli::Stream stream;
  const std::vector<Conv3dDesc> shapes = {
      make(1, 3, {6, 10, 70}, 64, {3, 5, 7}),  // the reference problem's kernel
      make(1, 128, {4, 6, 20}, 96, {1, 1, 1}), // pointwise
      make(1, 32, {6, 9, 17}, 32, {3, 3, 3}),  // C = 32: chunked reductions on some kernels
      make(1, 4, {5, 6, 7}, 5, {3, 3, 3}),     // small: FFMA kernels
  };
  // CUDA's canonical NaN, a quiet NaN, x86's default (negative) NaN, +inf and -inf.
  const uint32_t specials[] = {0x7fffffffu, 0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u};
  for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
    for (Conv3dDesc d : shapes) {
      d.precision = precision;
      DYNAMIC_SECTION(describe(d)) {
        cli::ProblemData data(d, 7);
        const Dims3 in{d.d, d.h, d.w};
        const OutputExtents out = detail::make_problem(d).out;
        std::vector<Dims3> at;  // one special value each, spread over the volume
        for (size_t i = 0; i < std::size(specials); ++i) {
          const Dims3 p{static_cast<int64_t>(i) * in.d / 5, (static_cast<int64_t>(i) * 3 + 1) % in.h,
                        (static_cast<int64_t>(i) * 11 + 2) % in.w};
          at.push_back(p);
          const int64_t c = static_cast<int64_t>(i) % d.c;
          std::memcpy(&data.input[static_cast<size_t>(((c * in.d + p.d) * in.h + p.h) * in.w + p.w)], &specials[i], 4);
        }
        detail::check_cu(detail::driver().cuMemcpyHtoD(data.d_input.handle(), data.input.data(), data.d_input.bytes()),
                         "cuMemcpyHtoD");
        Engine::global().run(d, data.tensors(), stream.get());
        std::vector<float> got(static_cast<size_t>(data.output_elements));
        stream.synchronize();
        cli::copy_to_host(data.d_output, got.data());
        int64_t wrong = 0;
        for (int64_t k = 0; k < d.k; ++k) {
          for (int64_t z = 0; z < out.d; ++z) {
            for (int64_t y = 0; y < out.h; ++y) {
              for (int64_t x = 0; x < out.w; ++x) {
                bool reads = false;  // stride 1, no padding, one group: the window starting at (z, y, x)
                for (const Dims3& p : at) {
                  reads |= p.d >= z && p.d < z + d.kernel.d && p.h >= y && p.h < y + d.kernel.h && p.w >= x &&
                           p.w < x + d.kernel.w;
                }
                wrong += std::isfinite(got[static_cast<size_t>(((k * out.d + z) * out.h + y) * out.w + x)]) == reads;
              }
            }
          }
        }
        INFO("kernel " << Engine::global().kernel_for(d));
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("a cached cubin the driver refuses is a miss: rebuilt, and the call still succeeds") {
  cli::make_context_current();
  cli::Stream stream;
  const auto dir = std::string(CONV3DJIT_TEST_BINARY_DIR) + "/cache-refused-cubin";
  std::filesystem::remove_all(dir);
  EngineOptions options;
  options.cache_dir = dir;
  const Conv3dDesc d = make(1, 3, {6, 7, 9}, 8, {3, 3, 3}, 1, 1);
  const std::string key = Engine(options).precompile(d).main().key;
  // A well-formed cache file (right key, checksum) whose cubin is garbage.
  detail::DiskCache(dir, 1ull << 30).store(key, "some_kernel\nthis is not a cubin");
  Engine engine(options);
  require_pass(test::check_against_reference(engine, d, 17, stream));
  CHECK(engine.stats().disk_hits == 1);  // the bad entry was read ...
  CHECK(engine.stats().compiles == 1);   // ... refused, and rebuilt
  Engine again(options);                 // the rebuilt entry replaced it on disk
  require_pass(test::check_against_reference(again, d, 18, stream));
  CHECK(again.stats().compiles == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a description larger than its buffers is invalid_argument, and the process keeps working") {
  cli::make_context_current();
  cli::Stream stream;
  Engine engine;
  const Conv3dDesc d = make(2, 3, {6, 7, 9}, 8, {3, 3, 3}, 1, 1);
  cli::ProblemData data(d, 21);
  // N = 2^40 on buffers made for N = 2 (the crash this check exists for), and one batch too many.
  for (const int64_t n : {int64_t{1} << 40, int64_t{3}}) {
    Conv3dDesc wrong = d;
    wrong.n = n;
    INFO(describe(wrong));
    try {
      engine.run(wrong, data.tensors(), stream.get());
      FAIL("launched");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.category() == ErrorCategory::InvalidArgument);
      CHECK(std::string(e.what()).find("input = 0x") != std::string::npos);
      CHECK(std::string(e.what()).find("bytes from 0x") != std::string::npos);
    }
  }
  // The context is unharmed: a correct call after them succeeds and matches the reference.
  stream.synchronize();
  require_pass(test::check_against_reference(engine, d, 22, stream));
}
