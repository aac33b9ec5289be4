// Tuning on the GPU: Engine::tune times several candidates and keeps an accurate winner; an
// Engine sharing (or importing) the cache runs the winner with no tuning and no compile, and its
// output still meets the accuracy class; tuning on first use happens once and never inside a
// graph capture; a record that no longer plans its kernel is ignored. Skipped without a device.
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "catch.hpp"
#include "temp_dir.hpp"
#include "cache/disk_cache.hpp"
#include "config_cases.hpp"
#include "driver/driver_api.hpp"
#include "core/problem.hpp"
#include "gpu_check.hpp"
#include "tune/record.hpp"
#include "tune/tuner.hpp"

using namespace conv3djit;

namespace {

using conv3djit::test::TempDir;

namespace fs = std::filesystem;

EngineOptions in_folder(const fs::path& dir, TuneMode mode = TuneMode::Off) {
  EngineOptions options;
  options.cache_dir = dir.string();
  options.tune_mode = mode;
  // Candidates past the first are timed while the budget lasts, compiles included: the GPU tests
  // compile side by side, and at the default 2 s a busy host timed only the first.
  options.tuning.budget_ms = 60000;
  return options;
}

std::vector<Conv3dDesc> tuned_descriptions() {
  using test::make;
  Conv3dDesc tf32 = make(2, 64, {8, 20, 22}, 64, {3, 3, 3}, 1, 1, 1, 1, true);
  tf32.precision = Precision::Tf32;
  Conv3dDesc bf16 = make(1, 64, {3, 30, 52}, 96, {3, 3, 3}, 1, Dims3{0, 1, 1}, 1, 1, true);
  bf16.dtype = DataType::BFloat16;
  bf16.layout = Layout::NDHWC;
  Conv3dDesc small_c = make(2, 3, {16, 24, 26}, 32, {3, 5, 7}, 1, Dims3{1, 2, 3});
  Conv3dDesc fused = make(1, 16, {5, 12, 20}, 32, {3, 3, 3}, 1, Padding::per_side({2, 1, 1}, {0, 1, 1}), 1, 1, true);
  fused.epilogue.activation = Activation::Silu;
  fused.epilogue.residual = true;
  return {tf32, bf16, small_c, fused};
}

// desc run on `engine` against the float64 reference, which another Engine computes: `engine`
// itself may be one that must not compile.
Comparison checked_run(Engine& engine, const Conv3dDesc& desc, uint64_t seed, const cli::Stream& stream) {
  cli::ProblemData data(desc, seed);
  cli::fill_nan(data.d_output);
  engine.run(desc, data.tensors(), stream.get());
  stream.synchronize();
  const std::vector<float> got = data.output();
  const std::vector<double> ref =
      cli::reference_output(Engine::global(), desc, data, stream, detail::make_problem(desc).macs() > 3e8);
  return compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(desc));
}

}  // namespace

TEST_CASE("tune: an accurate winner, stored; another Engine on the cache runs it with no tuning and no compile") {
  TempDir dir;
  cli::Stream stream;
  for (const Conv3dDesc& desc : tuned_descriptions()) {
    INFO(describe(desc));
    Engine tuner(in_folder(dir.path));
    const TuneResult r = tuner.tune(desc, stream.get());
    REQUIRE(r.winner >= 0);
    CHECK_FALSE(r.from_record);
    CHECK(r.stored);
    CHECK(r.tuning_ms > 0);
    CHECK(r.candidates.front().heuristic);
    int timed = 0;
    for (const TunedCandidate& c : r.candidates) {
      INFO(c.kernel << " " << c.config << " " << c.error);
      if (c.median_ms < 0) continue;
      ++timed;
      CHECK(c.ready_ms > 0);
      CHECK(c.accurate);  // every kernel the planner can be forced to is within its class
      CHECK(c.median_ms >= r.best().median_ms);
    }
    CHECK(timed >= 2);
    CHECK(tuner.stats().tunes == 1);
    CHECK(tuner.kernel_for(desc) == r.best().kernel);

    // Asked again: the record answers.
    const TuneResult again = tuner.tune(desc, stream.get());
    CHECK(again.from_record);
    CHECK(again.best().kernel == r.best().kernel);
    CHECK(std::abs(again.heuristic_ms - r.heuristic_ms) <= 1e-5 * r.heuristic_ms);  // kept to 6 decimals
    CHECK(r.heuristic_ms == r.candidates.front().median_ms);
    CHECK(tuner.stats().tunes == 1);

    // A fresh Engine on the same folder (another process would be the same): the winner, read
    // from disk, correct.
    EngineOptions never = in_folder(dir.path, TuneMode::FirstUse);
    never.compile_mode = CompileMode::Never;
    Engine production(never);
    CHECK(checked_run(production, desc, 5, stream).passed);
    CHECK(production.kernel_for(desc) == r.best().kernel);
    const EngineStats s = production.stats();
    CHECK(s.tunes == 0);
    CHECK(s.compiles == 0);
    CHECK(s.tuned_plans >= 1);
    CHECK(s.disk_hits >= 1);
  }
}

TEST_CASE("tune: records travel in the cache archive; the imported cache plans the same kernels") {
  TempDir a, b;
  cli::Stream stream;
  const std::vector<Conv3dDesc> descs = tuned_descriptions();
  std::vector<std::string> winners;
  Engine tuner(in_folder(a.path));
  for (const Conv3dDesc& desc : descs) winners.push_back(tuner.tune(desc, stream.get()).best().kernel);
  const std::string archive = (b.path / "tuned.c3j").string();
  CHECK(tuner.cache_export(archive) > descs.size());
  EngineOptions options = in_folder(b.path / "cache");
  options.compile_mode = CompileMode::Never;
  Engine imported(options);
  CHECK(imported.cache_import(archive) > descs.size());
  for (size_t i = 0; i < descs.size(); ++i) {
    INFO(describe(descs[i]));
    CHECK(imported.kernel_for(descs[i]) == winners[i]);
    CHECK(checked_run(imported, descs[i], 9, stream).passed);
  }
  CHECK(imported.stats().compiles == 0);
  CHECK(imported.stats().tunes == 0);
}

TEST_CASE("tune on first use: once per description, never while a graph is captured") {
  TempDir dir;
  cli::Stream stream;
  Engine engine(in_folder(dir.path, TuneMode::FirstUse));
  const Conv3dDesc desc = tuned_descriptions().front();
  const detail::DriverApi& drv = detail::driver();

  // Captured first: planned without tuning, and that plan is not kept.
  cli::ProblemData data(desc, 3);
  REQUIRE(drv.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  engine.run(desc, data.tensors(), stream.get());
  CHECK_THROWS_AS(engine.tune(desc, stream.get()), Error);
  CUgraph graph = nullptr;
  REQUIRE(drv.cuStreamEndCapture(stream.get(), &graph) == CUDA_SUCCESS);
  drv.cuGraphDestroy(graph);
  CHECK(engine.stats().tunes == 0);

  const test::GpuCheck first = test::check_against_reference(engine, desc, 4, stream);
  CHECK(first.comparison.passed);
  CHECK(engine.stats().tunes == 1);
  const test::GpuCheck second = test::check_against_reference(engine, desc, 6, stream);
  CHECK(second.comparison.passed);
  CHECK(engine.stats().tunes == 1);
  CHECK(second.kernel == first.kernel);
}

TEST_CASE("tune: a record whose configuration plans another kernel is ignored") {
  TempDir dir;
  cli::Stream stream;
  const Conv3dDesc desc = tuned_descriptions().front();
  std::string heuristic;
  {
    Engine plain(in_folder(dir.path));
    heuristic = plain.kernel_for(desc);
  }
  // A record as an older build might have left it: its kernel text is not what its
  // configuration plans now.
  CUdevice device = 0;
  REQUIRE(detail::driver().cuDeviceGet(&device, 0) == CUDA_SUCCESS);
  detail::TunedRecord record;
  record.config = "igemm_sm80:bm=64,bn=64";
  record.kernel = "igemm_sm80 fp32 ncdhw class=tf32 epi=bias cg=64 k=3x3x3 s=1x1x1 d=1x1x1 bm=128 bn=128";
  record.median_ms = 0.1;
  record.heuristic_ms = 0.2;
  record.candidates = 2;
  record.tuned_unix = 1;
  {
    detail::DiskCache cache(dir.path.string(), 1ull << 30);
    REQUIRE(cache.store(detail::record_key_text(desc, detail::identify_device(device)), detail::encode_record(record))
                .empty());
  }
  Engine engine(in_folder(dir.path));
  CHECK(engine.kernel_for(desc) == heuristic);
  CHECK(engine.stats().tuned_plans == 0);
}
