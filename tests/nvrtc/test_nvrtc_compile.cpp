// NVRTC, no GPU: the kernel templates compile for sm_80 and sm_90 over a varied key set, the
// compile is under a second, the memory and disk caches serve repeats, and a broken program
// reports the NVRTC log, name expression and options.
#include <unistd.h>

#include <filesystem>

#include "catch.hpp"
#include "jit/codegen.hpp"
#include "config_cases.hpp"
#include "conv3djit/engine.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "ptxas_report.hpp"

using namespace conv3djit;

namespace {
Conv3dDesc desc(int64_t c, Dims3 kernel, Dims3 stride = 1, Dims3 dilation = 1, int64_t groups = 1,
                Padding pad = 0) {
  Conv3dDesc d;
  d.n = 2; d.c = c; d.d = d.h = d.w = 24; d.k = 16 * groups;
  d.kernel = kernel; d.stride = stride; d.dilation = dilation; d.groups = groups; d.padding = pad;
  return d;
}
std::string temp_dir(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / (std::string("conv3djit-") + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}
}  // namespace

TEST_CASE("kernel templates compile for sm_80 and sm_90 quickly") {
  const Conv3dDesc descs[] = {
      desc(3, {3, 5, 7}),                               // the reference problem's kernel
      desc(16, {1, 1, 1}),                              // pointwise
      desc(4, {7, 7, 7}, {2, 2, 2}, 1, 1, Dims3{3}),    // stem-like
      desc(8, {3, 3, 3}, 1, {2, 2, 2}, 8, Padding::same()),  // depthwise, dilated
      desc(6, {1, 3, 3}, {1, 2, 2}, 1, 3),              // grouped, asymmetric
      desc(256, {3, 3, 3}),                             // chunked tiled kernel (C*27 > 1024)
  };
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  for (const char* arch : {"sm_80", "sm_90"}) {
    for (const Conv3dDesc& d : descs) {
      INFO(arch << " " << describe(d));
      const PrecompileResult r = engine.precompile(d, arch);
      CHECK(r.main().compiled);
      CHECK(r.main().compile_ms > 0);
      CHECK(r.main().compile_ms < 5000);  // ~0.1 s here; a blow-up like unrolling every loop (14.6 s) fails
      CHECK(r.main().key.find(std::string("arch=") + arch) != std::string::npos);
      CHECK_FALSE(engine.precompile(d, arch).main().compiled);  // memory hit
    }
  }
  // 12 convolution kernels, plus the weight preparation kernels of the C = 256 and stem-like
  // problems, which run on sm_90's wgmma kernel in channel chunks, plus the input copy that the
  // three sm_90 wgmma plans with TMA boxes run for an input that is not 16-byte aligned (one
  // shape-generic kernel), plus the twins (for such inputs) of the sm_80 tiled plan of the
  // reference kernel that copies its rows 16 bytes at a time (W = 24) and of the depthwise plans
  // on both (W = 24: 16-byte loads).
  CHECK(engine.stats().compiles == 18);
}

TEST_CASE("the tensor-core kernel compiles for sm_80 and sm_90 in both accuracy classes") {
  EngineOptions options;
  options.disk_cache = false;
  options.kernel_config = "igemm:128,64";
  Engine engine(options);
  for (const char* arch : {"sm_80", "sm_90"}) {
    for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
      Conv3dDesc d = desc(3, {3, 5, 7});
      d.precision = precision;
      const PrecompileResult r = engine.precompile(d, arch);
      INFO(arch << " " << r.main().kernel);
      CHECK(r.main().compiled);
      CHECK(r.main().kernel.find(precision == Precision::Fp32 ? " class=fp32 " : " class=tf32 ") != std::string::npos);
    }
  }
  Conv3dDesc old_gpu = desc(3, {3, 3, 3});
  CHECK_THROWS_AS(engine.precompile(old_gpu, "sm_75"), Error);  // no TF32 tensor cores there
}

TEST_CASE("the wgmma kernel compiles for sm_90a in both classes and is planned only for compute capability 9.0") {
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
    Conv3dDesc d = desc(3, {3, 5, 7});
    d.precision = precision;
    const PrecompileResult r = engine.precompile(d, "sm_90");
    INFO(r.main().kernel << " " << r.main().key << "\ncompiler notes: " << r.main().compiler_notes);
    CHECK(r.main().compiled);
    CHECK(r.main().compile_ms < 5000);
    CHECK(r.main().kernel.find("igemm_sm90 fp32 ncdhw class=") == 0);
    CHECK(r.main().kernel.find(" cg=3 k=3x5x7 ") != std::string::npos);
    CHECK(r.main().compiler_notes.empty());
    // The reference problem's kernels (the tf32 one with two output planes a tile, the heaviest
    // there is): no note from ptxas either. Serialised wgmmas (C7512 and the like) cost such a
    // kernel 10 % (docs/kernels/igemm_sm90.md).
    Conv3dDesc reference = test::make(16, 3, {64, 64, 64}, 64, {3, 5, 7});
    reference.precision = precision;
    const PrecompileResult ref = engine.precompile(reference, "sm_90");
    INFO(ref.main().kernel << "\ncompiler notes: " << ref.main().compiler_notes);
    CHECK(ref.main().compiled);
    CHECK(ref.main().compiler_notes.empty());
    // 3xTF32 or TF32, TMA staging (W = 24 is a multiple of 4), row tiles of OW = 18.
    CHECK(r.main().kernel.find(precision == Precision::Fp32 ? "class=fp32" : "class=tf32") != std::string::npos);
    CHECK(r.main().kernel.find(" tma=1 rows=18 ") != std::string::npos);
    CHECK(r.main().key.find("--gpu-architecture=sm_90a") != std::string::npos);
    CHECK(engine.kernel_for(d, "sm_80").find("igemm_sm90") == std::string::npos);
    CHECK(engine.kernel_for(d, "sm_100").find("igemm_sm90") == std::string::npos);
  }
  EngineOptions forced = options;
  forced.kernel_config = "sm90:3,64,64,512";
  Engine forced_engine(forced);
  CHECK_THROWS_AS(forced_engine.precompile(desc(3, {3, 5, 7}), "sm_80"), Error);
  CHECK_THROWS_AS(forced_engine.precompile(desc(512, {3, 3, 3}), "sm_90"), Error);  // all weights: too big
  EngineOptions chunked = options;
  chunked.kernel_config = "sm90:3,64,32,8";
  const PrecompileResult r = Engine(chunked).precompile(desc(512, {3, 3, 3}), "sm_90");
  CHECK(r.main().compiled);
  CHECK(r.main().kernel.find("igemm_sm90 fp32 ncdhw class=fp32 epi=bias cg=512 k=3x3x3 s=1x1x1 d=1x1x1 th=3 tw=64 bn=32 cc=8 ") == 0);
}

TEST_CASE("two-plane kernels keep their accumulators in named registers: no ptxas notes, 64 columns") {
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  // C = 4: before the named sets, ptxas serialised this kernel's wgmmas (C7513, "non wgmma
  // instructions defining input registers"; docs/kernels/igemm_sm90.md).
  Conv3dDesc d = test::make(8, 4, {32, 64, 64}, 64, {3, 3, 3}, 1, 1);
  d.precision = Precision::Tf32;
  const PrecompileResult r = engine.precompile(d, "sm_90");
  INFO(r.main().kernel << "\ncompiler notes: " << r.main().compiler_notes);
  CHECK(r.main().kernel.find("igemm_sm90 fp32 ncdhw class=tf32 epi=bias cg=4 k=3x3x3 ") == 0);
  CHECK(r.main().kernel.rfind(" planes=2 parity=0 across=0") == r.main().kernel.size() - 27);  // two planes, even box shift
  CHECK(r.main().compiler_notes.empty());
  // The named sets are 64 columns wide, and there are three of them.
  for (const char* config : {"sm90:4,64,128,512,1,1,2", "sm90:2,32,64,512,1,0,4"}) {
    EngineOptions forced = options;
    forced.kernel_config = config;
    INFO(config);
    Conv3dDesc five_deep = test::make(2, 3, {9, 20, 24}, 64, {5, 3, 5});
    five_deep.precision = Precision::Tf32;
    CHECK_THROWS_AS(Engine(forced).kernel_for(five_deep, "sm_90"), Error);
  }
}

TEST_CASE("epilogues compile for sm_90, without ptxas notes on the store paths the GPU suite checks") {
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  // Every activation, scaling and residual in the two-plane wgmma kernel of the C = 4 layer. (Its
  // wgmmas are serialised (C7513) with any epilogue but the plain one: docs/kernels/igemm_sm90.md.)
  Conv3dDesc two_planes = test::make(8, 4, {32, 64, 64}, 64, {3, 3, 3}, 1, 1);
  two_planes.precision = Precision::Tf32;
  for (const Epilogue& e : test::epilogue_cases()) {
    two_planes.epilogue = e;
    const PrecompileResult r = engine.precompile(two_planes, "sm_90");
    INFO(r.main().kernel);
    CHECK(r.main().compiled);
    CHECK(r.main().kernel.find(" planes=2 ") != std::string::npos);
  }
  // GELU with a residual on every store path the GPU suite checks.
  for (const test::ConfigCase& c : test::epilogue_store_cases()) {
    EngineOptions forced = options;
    forced.kernel_config = c.config;
    Engine forced_engine(forced);
    Conv3dDesc d = c.descs[0];
    d.epilogue = test::epilogue_cases()[3];
    d.epilogue.residual = true;
    const PrecompileResult r = forced_engine.precompile(d, "sm_90");
    INFO(c.config << " " << describe(d) << ": " << r.main().kernel << "\ncompiler notes: " << r.main().compiler_notes);
    CHECK(r.main().compiled);
    CHECK(r.main().kernel.find("epi=bias+scale+gelu+res ") != std::string::npos);
    CHECK(r.main().compiler_notes.empty());
  }
  Conv3dDesc plain = two_planes;
  plain.epilogue = Epilogue{};
  CHECK(engine.kernel_for(plain, "sm_90").find(" epi=bias cg=4 ") != std::string::npos);
}

TEST_CASE("igemm_sm90's register stores with a residual compile without spills") {
  // Pointwise layers (paired positions: 256 columns in the tf32 class, 128 in fp32) and an odd
  // width (one position a store).
  Conv3dDesc pointwise = test::make(1, 512, {8, 28, 28}, 512, {1, 1, 1});
  Conv3dDesc odd = test::make(2, 64, {8, 27, 27}, 128, {3, 3, 3}, 1, 1);
  for (Conv3dDesc d : {pointwise, odd}) {
    for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
      d.precision = precision;
      d.epilogue = test::epilogue_cases()[3];
      d.epilogue.residual = true;
      const test::PtxasReport r = test::ptxas_report(d, "sm_90");
      INFO(describe(d));
      CHECK(r.kernel.rfind("igemm_sm90 ", 0) == 0);
      test::check_no_spills(r);
    }
  }
}

TEST_CASE("tiles across images compile without spills: both classes, streamed and resident weights, half inputs") {
  // pointwise_512 (streamed chunks: a new column block's bias reloaded), plain and with
  // GELU and a residual; one chunk (C = 16, warps apart); 4 warpgroups; bf16 inputs and outputs.
  struct Case {
    Conv3dDesc d;
    const char* config;
  };
  Conv3dDesc half = test::make(3, 24, {2, 6, 10}, 40, {1, 1, 1}, 1, 0, 1, 1, true);
  half.dtype = DataType::BFloat16;
  for (Case c : {Case{test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}), "sm90:16,8,128,32,1,0,1,1"},
                 Case{test::make(2, 16, {4, 4, 6}, 24, {1, 1, 1}), "sm90:16,8,64,32,1,0,1,1"},
                 Case{test::make(5, 72, {1, 3, 8}, 70, {1, 1, 1}), "sm90:32,8,64,16,1,0,1,1"},
                 Case{half, "sm90:16,8,64,32,1,0,1,1"}}) {
    for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
      for (const bool fused : {false, true}) {
        Conv3dDesc d = c.d;
        d.precision = precision;
        if (fused) {
          d.epilogue = test::epilogue_cases()[3];
          d.epilogue.residual = true;
        }
        INFO(describe(d) << " " << c.config);
        const test::PtxasReport r = test::ptxas_report(d, "sm_90", c.config);
        CHECK(r.kernel.rfind("igemm_sm90 ", 0) == 0);
        CHECK(r.kernel.find(" across=1") != std::string::npos);
        test::check_no_spills(r);
      }
    }
  }
}

TEST_CASE("igemm_sm90 kernels that read their weights raw compile without spills") {
  // tf32, streamed chunks of whole rows of 32 terms: 3 x 3 taps, plain and with GELU and a residual.
  for (const bool fused : {false, true}) {
    Conv3dDesc d = test::make(1, 48, {4, 9, 12}, 40, {1, 3, 3}, 1, Dims3{0, 1, 1}, 1, 1, true);
    d.precision = Precision::Tf32;
    if (fused) {
      d.epilogue = test::epilogue_cases()[3];
      d.epilogue.residual = true;
    }
    INFO(describe(d));
    const detail::Plan plan = detail::make_plan(detail::make_problem(d), detail::limits_for_arch("sm_90"), "sm90:2,64,64,32,1");
    CHECK(plan.weight_map);
    CHECK_FALSE(plan.prep);
    test::check_no_spills(test::ptxas_report(d, "sm_90", "sm90:2,64,64,32,1"));
  }
}

TEST_CASE("float32 NDHWC layers compile for igemm_sm90 without spills, with the transposing input copy") {
  // Row tiles with two planes (the tf32 reference), streamed chunks of 256 columns, a pointwise
  // layer, a 5 x 5 x 5 kernel in narrower columns than its K (3xTF32's chunk weights), each with
  // GELU and a residual, in both classes (igemm_sm90_half's in the tf32 class where C >= 32);
  // and their input copy, one kernel for every NDHWC shape.
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  int copies = 0;
  for (Conv3dDesc d : {test::make(16, 3, {64, 64, 64}, 64, {3, 5, 7}), test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1),
                       test::make(1, 512, {8, 28, 28}, 512, {1, 1, 1}),
                       test::make(1, 48, {4, 28, 28}, 128, {5, 5, 5}, 1, 2)}) {
    d.layout = Layout::NDHWC;
    for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
      d.precision = precision;
      d.epilogue = test::epilogue_cases()[3];
      d.epilogue.residual = true;
      INFO(describe(d));
      const test::PtxasReport r = test::ptxas_report(d, "sm_90");
      // The tf32 class's layers of 32 channels or more read in place by igemm_sm90_half.
      const bool in_place = precision == Precision::Tf32 && d.c >= 32;
      CHECK(r.kernel.rfind(in_place ? "igemm_sm90_half fp32 ndhwc " : "igemm_sm90 fp32 ndhwc ", 0) == 0);
      test::check_no_spills(r);
      const PrecompileResult p = engine.precompile(d, "sm_90");
      for (const auto& k : p.kernels) copies += k.kernel.rfind("pitch_rows fp32 ndhwc", 0) == 0 && k.compiled;
    }
  }
  CHECK(copies == 1);
}

TEST_CASE("random NDHWC layers that plan igemm_sm90 compile without spills") {
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  int compiled = 0;
  for (const Conv3dDesc& d : test::random_ndhwc(120, 12)) {
    if (compiled == 40 || engine.kernel_for(d, "sm_90").rfind("igemm_sm90 ", 0) != 0) continue;
    INFO(describe(d));
    test::check_no_spills(test::ptxas_report(d, "sm_90"));
    ++compiled;
  }
  CHECK(compiled == 40);
}

TEST_CASE("grouped and depthwise NDHWC layers take the grouped kernel and compile without spills") {
  // ResNeXt's 32 groups of 8 channels, a depthwise layer and a channel multiplier of 6 with 1 x 7
  // x 7 (two output channels of one input channel a block: 360 bytes spilled at the depthwise
  // budget of 72 registers), float32 and bf16, plain and with GELU and a residual (the depthwise
  // one reflect-padded too). ResNeXt's bf16 layer takes grouped_mma (groups of 8 channels).
  Conv3dDesc resnext = test::make(2, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1, 1, 32, true);
  Conv3dDesc depthwise = test::make(2, 64, {16, 56, 56}, 64, {3, 3, 3}, 1, 1, 1, 64, true);
  depthwise.padding_mode = PaddingMode::Reflect;
  const Conv3dDesc multiplier = test::make(1, 16, {8, 32, 34}, 96, {1, 7, 7}, 1, Dims3{0, 3, 3}, 1, 16, true);
  for (Conv3dDesc d : {resnext, depthwise, multiplier}) {
    d.layout = Layout::NDHWC;
    for (const DataType type : {DataType::Float32, DataType::BFloat16}) {
      for (const bool heavy : {false, true}) {
        d.dtype = type;
        d.epilogue = heavy ? test::epilogue_cases()[3] : Epilogue{};
        d.epilogue.residual = heavy;
        INFO(describe(d));
        const test::PtxasReport r = test::ptxas_report(d, "sm_90");
        const bool mma = type != DataType::Float32 && d.c / d.groups % 8 == 0;
        CHECK(r.kernel.rfind(std::string(mma ? "grouped_mma " : "grouped ") + dtype_name(type) + " ndhwc ", 0) == 0);
        test::check_no_spills(r);
      }
    }
  }
}

namespace {
/// Instructions of the main kernel the planner (or `config`) picks for d on sm_90.
long long instructions(const Conv3dDesc& d, const std::string& config = "") {
  EngineOptions options;
  options.disk_cache = false;
  options.kernel_config = config;
  return Engine(options).precompile(d, "sm_90").main().code_bytes / 16;
}
}  // namespace

TEST_CASE("NDHWC register stores of 256 channels emit each output's epilogue once") {
  // 128 outputs a thread in igemm_sm90 (tf32) and igemm_sm90_half (bf16): SiLU's code over the
  // plain kernel's, an output. 13-14 with one epilogue an output; an even-K test the compiler
  // unswitched the store loop on made it 26-28.
  Conv3dDesc d = test::make(2, 256, {8, 32, 32}, 256, {3, 3, 3}, 1, 1, 1, 1, true);
  d.layout = Layout::NDHWC;
  for (const DataType type : {DataType::Float32, DataType::BFloat16}) {
    d.dtype = type;
    d.precision = Precision::Tf32;
    d.epilogue = Epilogue{};
    const long long plain = instructions(d);
    d.epilogue.activation = Activation::Silu;
    const long long silu = instructions(d);
    INFO(describe(d) << ": " << plain << " instructions plain, " << silu << " with SiLU");
    CHECK((silu - plain) / 128 < 20);
  }
}

TEST_CASE("igemm_sm90 NCDHW epilogues run over staged boxes in rolled rounds: a few hundred instructions") {
  // 256-column tiles, 128 accumulators a thread: a TH x TW tile (tf32 GELU, bf16 C = 24 GELU) and
  // a row tile with a residual. From registers, the GELU kernels held 6320 and 5904
  // instructions (the activation once per accumulator), the row tile 4792 (the residual's reads
  // once per round); a round's epilogue is now emitted once.
  Conv3dDesc tiles = test::make(2, 384, {16, 28, 30}, 256, {3, 3, 3}, 1, 1, 1, 1, true);
  tiles.precision = Precision::Tf32;
  Conv3dDesc few = test::make(2, 24, {16, 64, 64}, 256, {3, 3, 3}, 1, 1, 1, 1, true);
  few.dtype = DataType::BFloat16;
  Conv3dDesc rows = test::make(1, 16, {16, 56, 63}, 512, {2, 2, 2}, 1, 1, 1, 1, true);
  rows.precision = Precision::Tf32;
  for (Conv3dDesc* d : {&tiles, &few, &rows}) {
    d->epilogue = Epilogue{};
    const long long plain = instructions(*d);
    d->epilogue.activation = d == &rows ? Activation::Identity : Activation::Gelu;
    d->epilogue.residual = d == &rows;
    const long long fused = instructions(*d);
    INFO(describe(*d) << ": " << plain << " instructions plain, " << fused << " fused");
    CHECK(fused - plain < 800);
  }
}

TEST_CASE("igemm_sm90 NDHWC epilogues over 256 columns run in rolled rounds without spills") {
  // Register stores, 128 accumulators a thread: a TH x TW tile with a residual (tf32 4 -> 256,
  // 1 x 7 x 7: 3728 instructions and over a second of compile when every octet had its own copy
  // of the epilogue) and a row tile with GELU and a residual. A round of 8 octets is emitted once.
  Conv3dDesc tiles = test::make(4, 4, {4, 60, 60}, 256, {1, 7, 7}, 1, Dims3{0, 3, 3}, 1, 1, true);
  Conv3dDesc rows = test::make(4, 3, {16, 64, 64}, 256, {3, 3, 3}, 1, 1, 1, 1, true);
  for (Conv3dDesc* d : {&tiles, &rows}) {
    d->layout = Layout::NDHWC;
    d->precision = Precision::Tf32;
    d->epilogue = Epilogue{};
    const long long plain = instructions(*d);
    d->epilogue.activation = d == &rows ? Activation::Gelu : Activation::Identity;
    d->epilogue.residual = true;
    const long long fused = instructions(*d);
    INFO(describe(*d) << ": " << plain << " instructions plain, " << fused << " fused");
    CHECK(fused - plain < 800);
    test::check_no_spills(test::ptxas_report(*d, "sm_90"));
  }
}

TEST_CASE("igemm_sm90's weight preparation keeps its registers") {
  // fp16 24 -> 512, 1 x 7 x 7 (256 columns, one channel a chunk): ptxas spilled 4 bytes at 32
  // registers before the kernel declared one block an SM.
  Conv3dDesc d = test::make(2, 24, {8, 60, 62}, 512, {1, 7, 7}, 2, Dims3{0, 3, 3}, 1, 1, true);
  d.dtype = DataType::Float16;
  test::check_no_spills(test::prep_ptxas_report(d, "sm_90"));
}

TEST_CASE("a register budget that leaves a stack frame is relaxed when the kernel is compiled") {
  // Grouped one-channel kernels at their 72-register budget (28 warps an SM) with an activation
  // and strides spilled 8-56 bytes, and igemm_sm90_half 128 x 128 tiles at two blocks an SM 8
  // (bench/edge_sweep.jsonl e297, e041, e192): compiled again with fewer blocks an SM, none is
  // left. A budgeted kernel that fits keeps its budget (e079).
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  auto resources = [&](const Conv3dDesc& d) { return engine.precompile(d, "sm_90").main(); };
  Conv3dDesc tanh = test::make(1, 3, {5, 5, 1}, 24, {7, 2, 3}, {3, 3, 1}, Dims3{3, 0, 1}, 1, 3, true);
  tanh.precision = Precision::Tf32;
  tanh.epilogue.activation = Activation::Tanh;
  Conv3dDesc hardswish = test::make(3, 4, {13, 5, 17}, 512, {1, 1, 3}, {3, 1, 1}, Dims3{2, 0, 0}, 1, 4, true);
  hardswish.dtype = DataType::Float16;
  hardswish.fp32_output = true;
  hardswish.epilogue.activation = Activation::Hardswish;
  Conv3dDesc half = test::make(1, 512, {5, 5, 33}, 400, {3, 7, 4}, {1, 1, 3}, Dims3{0, 2, 1}, Dims3{1, 1, 3}, 4, true);
  half.dtype = DataType::Float16;
  half.epilogue.activation = Activation::Relu;
  half.epilogue.residual = true;
  for (const Conv3dDesc* d : {&tanh, &hardswish, &half}) {
    const PrecompiledKernel k = resources(*d);
    INFO(k.kernel << ": " << k.registers << " registers, " << k.stack_bytes << " bytes of stack");
    CHECK(k.kernel.rfind(d == &half ? "igemm_sm90_half " : "grouped ", 0) == 0);
    CHECK(k.stack_bytes == 0);
    CHECK(k.registers > (d == &half ? 128 : 72));
  }
  Conv3dDesc fits = test::make(2, 64, {5, 17, 2}, 128, {4, 1, 1}, {1, 1, 3}, Dims3{2, 1, 3}, Dims3{1, 3, 1}, 64);
  fits.dtype = DataType::BFloat16;
  fits.epilogue.residual = true;
  const PrecompiledKernel k = resources(fits);
  INFO(k.kernel);
  CHECK(k.kernel.rfind("grouped ", 0) == 0);
  CHECK(k.stack_bytes == 0);
  CHECK(k.registers <= 72);
}

TEST_CASE("the grouped kernel rolls the loops of 7 x 7 planes: a few thousand instructions") {
  // KD x KH x KW x KB x TH x TW FMAs a channel: past 1024 the depth loop is rolled, past 1024 a
  // depth step the row loop too. Unrolled, these kernels held 7112 and 2600 instructions and
  // took NVVM and ptxas over a second.
  Conv3dDesc depthwise = test::make(1, 8, {9, 12, 21}, 8, {7, 7, 7}, 1, 3, 1, 8, true);
  depthwise.dtype = DataType::Float16;
  depthwise.epilogue.activation = Activation::Sigmoid;
  const long long depth_rolled = instructions(depthwise, "grouped:16,32,4,4,1");
  const long long rows_rolled =
      instructions(test::make(1, 16, {4, 13, 22}, 16, {2, 7, 7}, 1, Dims3{0, 3, 3}, 1, 4), "grouped:8,32,2,4,1,4");
  INFO(depth_rolled << " and " << rows_rolled << " instructions");
  CHECK(depth_rolled < 3000);
  CHECK(rows_rolled < 2000);
}

TEST_CASE("every igemm_sm80 tile that plans compiles without spills, in both float32 classes and bf16") {
  // A 7x7x7 layer of 8 channels and 256 outputs, which every tile fits: float32 tiles of 512
  // threads (128 registers) spilled 32-100 bytes, and are refused (no tuning candidate either).
  Conv3dDesc d = test::make(2, 8, {9, 28, 32}, 256, {7, 7, 7}, {2, 1, 1}, 1, 1, 1, true);
  int compiled = 0;
  for (const int variant : {0, 1, 2}) {
    d.precision = variant == 1 ? Precision::Tf32 : Precision::Fp32;
    d.dtype = variant == 2 ? DataType::BFloat16 : DataType::Float32;
    for (const char* tile : {"128,64", "64,64", "128,32", "64,128", "128,128", "256,64", "64,32"}) {
      const std::string config = std::string("igemm_sm80:") + tile;
      INFO(describe(d) << " " << config);
      const bool wide = std::string(tile) == "128,128" || std::string(tile) == "256,64";
      if (wide && d.dtype == DataType::Float32) {
        CHECK_THROWS_AS(detail::make_plan(detail::make_problem(d), detail::limits_for_arch("sm_80"), config), Error);
        continue;
      }
      if (std::string(tile) == "256,64") continue;  // bf16 / fp16: BM at most 128
      test::check_no_spills(test::ptxas_report(d, "sm_80", config));
      ++compiled;
    }
  }
  CHECK(compiled == 16);
}

TEST_CASE("precompile reads each kernel's registers and stack frame from its cubin, as ptxas reports them") {
  // The reference problem's kernels (no local memory), an igemm_sm80 tile, and the direct kernel
  // on an fp16 grouped layer, where its 64-bit index divisions are calls whose saved registers
  // take 16 bytes of stack.
  struct Case {
    Conv3dDesc desc;
    std::string config;
  };
  const std::vector<Case> cases = {
      {test::make(2, 3, {8, 20, 24}, 64, {3, 5, 7}), ""},
      {test::make(2, 16, {6, 12, 12}, 64, {3, 3, 3}, 1, 1), "igemm_sm80:64,64"},
      {test::make(1, 10, {8, 16, 16}, 10, {3, 3, 3}, {2, 1, 1}, 0, 1, 2, true), "direct"},
  };
  int with_stack = 0;
  for (Case c : cases) {
    if (c.config == "direct") c.desc.dtype = DataType::Float16;
    INFO(describe(c.desc) << " " << c.config);
    EngineOptions options;
    options.disk_cache = false;
    options.kernel_config = c.config;
    const PrecompiledKernel k = Engine(options).precompile(c.desc, "sm_90").main();
    const test::PtxasReport r = test::ptxas_report(c.desc, "sm_90", c.config);
    INFO(r.log);
    CHECK(r.log.find("Used " + std::to_string(k.registers) + " registers") != std::string::npos);
    CHECK(r.log.find(" " + std::to_string(k.stack_bytes) + " bytes stack frame") != std::string::npos);
    CHECK(k.registers > 0);
    CHECK(k.code_bytes > 0);
    CHECK(k.code_bytes % 16 == 0);
    if (k.stack_bytes > 0) ++with_stack;
  }
  CHECK(with_stack == 1);
}

TEST_CASE("every forced configuration the GPU suite checks plans on sm_90") {
  // A configuration that does not fit a listed problem would only show up on the GPU machine.
  for (const test::ConfigCase& c : test::config_cases().forced) {
    EngineOptions options;
    options.disk_cache = false;
    options.kernel_config = c.config;
    Engine engine(options);
    for (const Conv3dDesc& d : c.descs) {
      INFO(c.config << " " << describe(d));
      CHECK_NOTHROW(engine.kernel_for(d, "sm_90"));
    }
  }
}

TEST_CASE("padding modes plan on every load path the GPU suite checks, TMA boxes only where rows need no copy") {
  const PaddingMode modes[] = {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular};
  int compiled = 0;
  for (const test::ConfigCase& c : test::padding_mode_cases()) {
    EngineOptions options;
    options.disk_cache = false;
    options.kernel_config = c.config;
    Engine engine(options);
    for (Conv3dDesc d : c.descs) {
      for (const PaddingMode mode : modes) {
        d.padding_mode = mode;
        INFO(c.config << " " << describe(d));
        const std::string kernel = engine.kernel_for(d, "sm_90");
        INFO(kernel);
        CHECK(kernel.find(std::string(" pad=") + padding_mode_name(mode) + " ") != std::string::npos);
        if (kernel.rfind("igemm_sm90 ", 0) == 0 && d.w % 4 != 0) CHECK(kernel.find(" tma=0 ") != std::string::npos);
        if (kernel.rfind("direct_tiled ", 0) == 0) CHECK(kernel.find(" v=1 ") != std::string::npos);
        // One mode a description is compiled (in turn): the modes share all code but the index map.
        if (mode != modes[compiled % 3]) continue;
        const PrecompileResult r = engine.precompile(d, "sm_90");
        INFO("compiler notes: " << r.main().compiler_notes);
        CHECK(r.main().compiled);
        CHECK(r.main().compiler_notes.empty());
      }
      ++compiled;
    }
  }
  // Zero padding takes TMA boxes, and so do the other modes in the tf32 class where float rows
  // are 16-byte multiples; elsewhere (the box would read a pitched copy) they take cp.async, and a
  // forced box is refused.
  Conv3dDesc tma = test::make(2, 3, {5, 21, 68}, 64, {3, 5, 7}, 1, 1);
  tma.precision = Precision::Tf32;
  EngineOptions options;
  options.disk_cache = false;
  CHECK(Engine(options).kernel_for(tma, "sm_90").find(" tma=1 ") != std::string::npos);
  Conv3dDesc reflect = tma;
  reflect.padding_mode = PaddingMode::Reflect;
  CHECK(Engine(options).kernel_for(reflect, "sm_90").find(" tma=1 ") != std::string::npos);
  Conv3dDesc odd = reflect;
  odd.w = 66;
  CHECK(Engine(options).kernel_for(odd, "sm_90").find(" tma=0 ") != std::string::npos);
  options.kernel_config = "sm90:2,64,64,4,1";
  CHECK_NOTHROW(Engine(options).kernel_for(reflect, "sm_90"));
  CHECK_THROWS_AS(Engine(options).kernel_for(odd, "sm_90"), Error);
  // Nor do two-plane tiles take them (their wgmmas would be serialised, C7513).
  Conv3dDesc planes = test::make(1, 4, {6, 12, 20}, 24, {3, 3, 3}, 1, 1, 1, 1, true);
  planes.precision = Precision::Tf32;
  options.kernel_config = "sm90:2,64,64,512,0,0,2";
  CHECK_NOTHROW(Engine(options).kernel_for(planes, "sm_90"));
  planes.padding_mode = PaddingMode::Replicate;
  CHECK_THROWS_AS(Engine(options).kernel_for(planes, "sm_90"), Error);
}

TEST_CASE("plans with TMA boxes precompile the input copy kernel too, once for all shapes") {
  // W = 66 and 45: rows of 264 and 180 bytes, copied into rows of 68 and 48 floats for TMA boxes.
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  for (int64_t w : {66, 45}) {
    Conv3dDesc d = desc(3, {3, 5, 7});
    d.w = w;
    INFO(describe(d));
    const PrecompileResult r = engine.precompile(d, "sm_90");
    CHECK(r.main().compiled);
    CHECK(r.main().kernel.find("igemm_sm90 ") == 0);
  }
  // Two convolution kernels and one copy kernel (shape-generic).
  CHECK(engine.stats().compiles == 3);
}

TEST_CASE("a second engine on the same folder reads from disk instead of compiling") {
  EngineOptions options;
  options.cache_dir = temp_dir("nvrtc-disk");
  const Conv3dDesc d = desc(5, {3, 3, 3});
  {
    Engine first(options);
    CHECK(first.precompile(d, "sm_90").main().compiled);
    CHECK(first.cache_info().entries == 2);  // the wgmma kernel with TMA staging and the input copy
  }
  Engine second(options);
  const PrecompileResult r = second.precompile(d, "sm_90");
  CHECK_FALSE(r.main().compiled);
  CHECK(second.stats().disk_hits == 2);
  CHECK(second.stats().compiles == 0);
  std::filesystem::remove_all(options.cache_dir);
}

TEST_CASE("the compiler's notes on a successful compile reach the caller") {
  detail::GeneratedKernel noted;
  noted.source = "#warning conv3djit note\n__global__ void quiet() {}\n";
  noted.name_expression = "quiet";
  noted.options = {"--gpu-architecture=sm_90"};
  const detail::CompiledKernel k = detail::nvrtc_compile(noted);
  CHECK_FALSE(k.cubin.empty());
  CHECK(k.notes.find("conv3djit note") != std::string::npos);
  noted.source = "__global__ void quiet() {}\n";
  CHECK(detail::nvrtc_compile(noted).notes.empty());
}

TEST_CASE("a compile failure carries the NVRTC log, the name expression and the options") {
  detail::GeneratedKernel bad;
  bad.source = "template <int N> __global__ void broken() { undefined_symbol<N>(); }\n";
  bad.name_expression = "broken<3>";
  bad.options = {"--gpu-architecture=sm_90"};
  try {
    detail::nvrtc_compile(bad);
    FAIL("compiled a broken program");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(e.category() == ErrorCategory::CompileFailed);
    CHECK(what.find("broken<3>") != std::string::npos);
    CHECK(what.find("--gpu-architecture=sm_90") != std::string::npos);
    CHECK(what.find("undefined_symbol") != std::string::npos);
  }
}

TEST_CASE("precompile refuses a malformed arch") {
  Engine engine(EngineOptions{"", 0, false});
  CHECK_THROWS_AS(engine.precompile(desc(3, {3, 3, 3}), "compute_90"), Error);
}

TEST_CASE("without a GPU, conv3d reports no device instead of crashing") {
  if (current_device()) return;  // only meaningful on a machine without a GPU
  Conv3dDesc d = desc(3, {3, 3, 3});
  static float dummy[4];
  try {
    conv3d(d, {dummy, dummy, nullptr, dummy});
    FAIL("conv3d ran without a device");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::NoDevice);
  }
  try {
    Engine(EngineOptions{"", 0, false}).resources(d);
    FAIL("resources() loaded a kernel without a device");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::NoDevice);
  }
}
