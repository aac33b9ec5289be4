// NVRTC, no GPU: bf16 and fp16 descriptions (both layouts, float32 outputs, an epilogue with a
// residual, padding modes) plan to igemm_sm80 on sm_80 and sm_90 (grouped ones to grouped_mma or
// grouped), compile, and ptxas reports no spills for them; direct's kernels for half types compile
// too.
#include <initializer_list>
#include <string>
#include <vector>

#include "catch.hpp"
#include "config_cases.hpp"
#include "conv3djit/engine.hpp"
#include "core/problem.hpp"
#include "jit/codegen.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "plan/plan.hpp"
#include "ptxas_report.hpp"

using namespace conv3djit;
using test::check_no_spills;
using test::PtxasReport;
using test::ptxas_report;

namespace {

Conv3dDesc half_desc(DataType type, Layout layout, bool fp32_output, Conv3dDesc d) {
  d.dtype = type;
  d.layout = layout;
  d.fp32_output = fp32_output;
  return d;
}


// Each of `bases` as bf16 and fp16 NCDHW layers, with outputs in their type and in float32.
std::vector<Conv3dDesc> ncdhw_half_variants(std::initializer_list<Conv3dDesc> bases) {
  std::vector<Conv3dDesc> out;
  for (const DataType type : {DataType::BFloat16, DataType::Float16})
    for (const bool fp32_output : {false, true})
      for (const Conv3dDesc& base : bases) out.push_back(half_desc(type, Layout::NCDHW, fp32_output, base));
  return out;
}

// d's kernel on sm_90, which must be `family`'s for d's types and compile without spills.
PtxasReport check_sm90_kernel(const Conv3dDesc& d, const std::string& family) {
  const PtxasReport r = ptxas_report(d, "sm_90");
  CHECK(r.kernel.rfind(family + " " + dtype_name(d.dtype) + " ncdhw" + (d.fp32_output ? " out=fp32 " : " "), 0) == 0);
  check_no_spills(r);
  return r;
}

}  // namespace

TEST_CASE("bf16 and fp16 layers plan to igemm_sm80 (on sm_90 igemm_sm90_half for C = 64, igemm_sm90_k16 / igemm_sm90 for NCDHW / NDHWC C = 3) and compile without spills") {
  const Conv3dDesc reference = test::make(16, 3, {64, 64, 64}, 64, {3, 5, 7});
  const Conv3dDesc wide = test::make(2, 64, {8, 12, 14}, 96, {3, 3, 3}, 1, 1, 1, 1, true);
  for (const char* arch : {"sm_80", "sm_90"}) {
    for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
      for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
        for (const bool fp32_output : {false, true}) {
          for (const Conv3dDesc& base : {reference, wide}) {
            const Conv3dDesc d = half_desc(type, layout, fp32_output, base);
            DYNAMIC_SECTION(arch << " " << describe(d)) {
              const PtxasReport r = ptxas_report(d, arch);
              const std::string layout_text = layout == Layout::NDHWC ? " ndhwc" : " ncdhw";
              // C = 64 on sm_90: igemm_sm90_half (tests/nvrtc/test_nvrtc_sm90_half.cpp); the
              // reference (C = 3, KW = 7): igemm_sm90_k16 in NCDHW, igemm_sm90 on a transposed
              // float32 copy in NDHWC.
              const bool sm90 = std::string(arch) == "sm_90";
              const char* family = !sm90                                          ? "igemm_sm80 "
                                   : base.c == 64                                 ? "igemm_sm90_half "
                                   : layout == Layout::NCDHW ? "igemm_sm90_k16 " : "igemm_sm90 ";
              CHECK(r.kernel.rfind(std::string(family) + dtype_name(type) + layout_text + (fp32_output ? " out=fp32 " : " "),
                                   0) == 0);
              check_no_spills(r);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("half-type igemm_sm80 kernels with the heaviest epilogue, padding modes and forced tiles compile without spills") {
  Conv3dDesc d = test::make(2, 8, {6, 10, 12}, 40, {3, 3, 3}, 1, 1, 1, 1, true);
  d.epilogue = test::epilogue_cases()[3];  // GELU, scaled
  d.epilogue.residual = true;
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
      for (const bool fp32_output : {false, true}) {
        const Conv3dDesc h = half_desc(type, layout, fp32_output, d);
        DYNAMIC_SECTION("epilogue " << describe(h)) {
          const PtxasReport r = ptxas_report(h, "sm_90");
          CHECK(r.kernel.find(" epi=bias+scale+gelu+res ") != std::string::npos);
          check_no_spills(r);
        }
      }
    }
  }
  for (const PaddingMode mode : {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular}) {
    for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
      Conv3dDesc h = half_desc(DataType::BFloat16, layout, false, d);
      h.padding_mode = mode;
      DYNAMIC_SECTION("padding " << describe(h)) {
        const PtxasReport r = ptxas_report(h, "sm_80");
        CHECK(r.kernel.rfind("igemm_sm80 ", 0) == 0);
        CHECK(r.kernel.find(std::string(" pad=") + padding_mode_name(mode) + " ") != std::string::npos);
        check_no_spills(r);
      }
    }
  }
  for (const char* config : {"igemm_sm80:32,32", "igemm_sm80:64,128", "igemm_sm80:128,128", "igemm:128,32"}) {
    const Conv3dDesc h = half_desc(DataType::Float16, Layout::NDHWC, true, test::make(1, 16, {5, 6, 7}, 130, {3, 3, 3}, 1, 1));
    DYNAMIC_SECTION(config) {
      const PtxasReport r = ptxas_report(h, "sm_90", config);
      CHECK(r.kernel.rfind("igemm_sm80 fp16 ndhwc out=fp32 ", 0) == 0);
      check_no_spills(r);
    }
  }
  // Tiles past the half kernel's 8-term staging (256 rows) are refused.
  const Conv3dDesc h = half_desc(DataType::BFloat16, Layout::NCDHW, false, d);
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(h), detail::limits_for_arch("sm_90"), "igemm:256,32"), Error);
}

// NCDHW half layers with few channels on sm_90: igemm_sm90 reads a float32 copy of the input made
// on every call, with one TF32 product (exact for half values).
TEST_CASE("half NCDHW layers of C <= 32 plan to igemm_sm90 on a float32 copy, and compile without spills") {
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  // The reference's two-plane row tiles, with bias, then with the heaviest epilogue.
  // (16 images: layers of up to two waves of blocks weigh the SMs their last wave leaves idle.)
  Conv3dDesc heavy = test::make(16, 3, {6, 20, 58}, 64, {3, 5, 7});
  heavy.epilogue = test::epilogue_cases()[3];  // GELU, scaled
  heavy.epilogue.residual = true;
  const Conv3dDesc cases[] = {
      test::make(16, 3, {6, 20, 58}, 64, {3, 5, 7}, 1, 0, 1, 1, true),
      heavy,
      test::make(1, 24, {5, 9, 12}, 40, {3, 3, 3}, 1, 1, 1, 1, true),  // chunks of 8 channels: prepared weights
      test::make(2, 5, {7, 9, 11}, 40, {3, 3, 3}, {1, 2, 1}, 1, {1, 1, 2}, 1, true),  // W % 4 != 0, stride, dilation
  };
  for (const Conv3dDesc& d : ncdhw_half_variants({cases[0], cases[1], cases[2], cases[3]})) {
    DYNAMIC_SECTION(describe(d)) {
      const PtxasReport r = check_sm90_kernel(d, "igemm_sm90");
      if (d.c == 3) CHECK(r.kernel.find(" planes=2 ") != std::string::npos);
      const detail::Plan plan = detail::make_plan(detail::make_problem(d), sm90);
      REQUIRE(plan.input_copy);
      CHECK(plan.input_copy->every_call);
      CHECK(plan.copies_input(true));
      CHECK(plan.input_copy->workspace_bytes ==
            static_cast<uint64_t>(d.n * d.c * d.d * d.h * detail::input_row_pitch(d.w) * 4));
      EngineOptions options;
      options.disk_cache = false;
      const PrecompileResult all = Engine(options).precompile(d, "sm_90");
      CHECK(all.kernels.size() == (d.c == 24 ? 3u : 2u));  // + igemm_sm90_weights, + pitch_rows
      for (const PrecompiledKernel& k : all.kernels) CHECK(k.compiled);
    }
  }
  // cp.async staging (forced) reads the float32 copy too, and so do TMA boxes in padding modes
  // other than zeros (whose padded cells the kernel rewrites).
  Conv3dDesc reflect = half_desc(DataType::BFloat16, Layout::NCDHW, false, cases[2]);
  reflect.padding_mode = PaddingMode::Reflect;
  for (const auto& [d, forced] : {std::pair{half_desc(DataType::Float16, Layout::NCDHW, true, cases[2]),
                                            std::string("igemm_sm90:4,64,64,8,0")},
                                  std::pair{reflect, std::string()}}) {
    DYNAMIC_SECTION(describe(d) << " " << forced) {
      const PtxasReport r = ptxas_report(d, "sm_90", forced);
      CHECK(r.kernel.rfind("igemm_sm90 ", 0) == 0);
      CHECK(r.kernel.find(forced.empty() ? " tma=1 " : " tma=0 ") != std::string::npos);
      check_no_spills(r);
      const detail::Plan plan = detail::make_plan(detail::make_problem(d), sm90, forced);
      REQUIRE(plan.input_copy);
      CHECK(plan.input_copy->every_call);
    }
  }
  // Past 32 channels igemm_sm90_half's chunks pay (in NDHWC from 32, which it reads in place;
  // from 8 igemm_sm80's 16-byte channel groups beat the copy).
  const Conv3dDesc wide = half_desc(DataType::BFloat16, Layout::NCDHW, false, test::make(1, 40, {5, 9, 12}, 40, {3, 3, 3}));
  CHECK(detail::canonical_text(detail::make_plan(detail::make_problem(wide), sm90).key).rfind("igemm_sm90 ", 0) != 0);
  const Conv3dDesc wide_ndhwc = half_desc(DataType::BFloat16, Layout::NDHWC, false, test::make(1, 32, {5, 9, 12}, 40, {3, 3, 3}));
  CHECK(detail::canonical_text(detail::make_plan(detail::make_problem(wide_ndhwc), sm90).key).rfind("igemm_sm90_half ", 0) == 0);
  // Inputs past 2^28 elements stay in place (no gigabyte-sized copy).
  const Conv3dDesc big = half_desc(DataType::BFloat16, Layout::NCDHW, false, test::make(4, 4, {256, 256, 264}, 16, {3, 3, 3}));
  CHECK(detail::canonical_text(detail::make_plan(detail::make_problem(big), sm90).key).rfind("igemm_sm80 ", 0) == 0);
}

TEST_CASE("half NDHWC layers of C < 8 plan to igemm_sm90 on a transposed float32 copy, and compile without spills") {
  // The reference's two-plane row tiles, the I3D stem's single-channel chunks (prepared weights,
  // read in their NDHWC order), W % 4 != 0 with stride and dilation; each with the heaviest
  // epilogue too, in both types and output types.
  for (Conv3dDesc base : {test::make(16, 3, {6, 20, 58}, 64, {3, 5, 7}, 1, 0, 1, 1, true),
                          test::make(4, 3, {32, 224, 224}, 64, {7, 7, 7}, 2, 3),
                          test::make(2, 5, {7, 9, 11}, 40, {3, 3, 3}, {1, 2, 1}, 1, {1, 1, 2}, 1, true)}) {
    for (const bool heavy : {false, true}) {
      if (heavy) {
        base.epilogue = test::epilogue_cases()[3];  // GELU, scaled
        base.epilogue.residual = true;
      }
      for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
        const Conv3dDesc d = half_desc(type, Layout::NDHWC, heavy, base);
        DYNAMIC_SECTION(describe(d)) {
          const PtxasReport r = ptxas_report(d, "sm_90");
          CHECK(r.kernel.rfind(std::string("igemm_sm90 ") + dtype_name(type) + " ndhwc", 0) == 0);
          check_no_spills(r);
          const detail::Plan plan = detail::make_plan(detail::make_problem(d), detail::limits_for_arch("sm_90"));
          REQUIRE(plan.input_copy);
          CHECK(plan.copies_input(true));
          CHECK(plan.input_copy->key.layout == Layout::NDHWC);
          CHECK(plan.input_copy->key.dtype == type);
        }
      }
    }
  }
}

// NCDHW half layers of few channels with KW 5 to 8 on sm_90: igemm_sm90_k16 (k16 products, two
// adjacent kw a 32-bit load), igemm_sm90 on a float32 copy as the twin for inputs off 16 bytes.
TEST_CASE("half NCDHW layers of C <= 32 and KW 5 to 8 plan to igemm_sm90_k16 and compile without spills") {
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  Conv3dDesc heavy = test::make(2, 3, {6, 20, 64}, 64, {3, 5, 7}, 1, Dims3{1, 2, 3}, 1, 1, true);
  heavy.epilogue = test::epilogue_cases()[3];  // GELU, scaled
  heavy.epilogue.residual = true;  // 16-bit outputs: the residual read into the output box's tile
  Conv3dDesc boxed = heavy;
  boxed.epilogue.residual = false;
  const Conv3dDesc cases[] = {
      test::make(16, 3, {64, 64, 64}, 64, {3, 5, 7}, 1, 0, 1, 1, true),                  // the reference
      heavy,
      boxed,
      test::make(2, 3, {4, 32, 48}, 96, {1, 7, 7}, {1, 2, 2}, Dims3{0, 3, 3}),            // stride 2, K past 64
      test::make(1, 5, {7, 9, 16}, 24, {3, 3, 6}, 1, Dims3{1, 1, 2}, Dims3{2, 2, 1}),   // even KW, dilation
  };
  for (const Conv3dDesc& d : ncdhw_half_variants({cases[0], cases[1], cases[2], cases[3], cases[4]})) {
    DYNAMIC_SECTION(describe(d)) {
      check_sm90_kernel(d, "igemm_sm90_k16");
      const detail::Plan plan = detail::make_plan(detail::make_problem(d), sm90);
      REQUIRE(plan.unaligned);
      CHECK(detail::canonical_text(plan.unaligned->key).rfind("igemm_sm90 ", 0) == 0);
      CHECK_FALSE(plan.input_copy);
    }
  }
  // W % 8 != 0, KW < 5, C > 32 and NDHWC stay off it.
  for (const Conv3dDesc& other : {test::make(1, 3, {6, 20, 60}, 64, {3, 5, 7}), test::make(1, 3, {6, 20, 64}, 64, {3, 3, 3}),
                                  test::make(1, 40, {6, 20, 64}, 64, {3, 5, 7})}) {
    const Conv3dDesc d = half_desc(DataType::BFloat16, Layout::NCDHW, false, other);
    CHECK(detail::canonical_text(detail::make_plan(detail::make_problem(d), sm90).key).rfind("igemm_sm90_k16 ", 0) != 0);
  }
  const Conv3dDesc ndhwc = half_desc(DataType::BFloat16, Layout::NDHWC, false, cases[0]);
  CHECK(detail::canonical_text(detail::make_plan(detail::make_problem(ndhwc), sm90).key).rfind("igemm_sm90_k16 ", 0) != 0);
  for (const char* config : {"igemm_sm90_k16:2,64", "igemm_sm90_k16:4,128"}) {
    DYNAMIC_SECTION(config) {
      const PtxasReport r = ptxas_report(half_desc(DataType::BFloat16, Layout::NCDHW, false, cases[0]), "sm_90", config);
      check_no_spills(r);
    }
  }
  // Blocks walking output planes (KD accumulator sets): no spills, and wgmmas ptxas leaves in
  // flight (it serializes them where the sets leave too few registers, as three at 4 warpgroups).
  for (const char* config : {"igemm_sm90_k16:2,64,16", "igemm_sm90_k16:3,64,16"}) {
    for (const Conv3dDesc& d : {cases[0], heavy}) {
      DYNAMIC_SECTION(config << " " << describe(d)) {
        const PtxasReport r = ptxas_report(half_desc(DataType::BFloat16, Layout::NCDHW, false, d), "sm_90", config);
        check_no_spills(r);
        CHECK(r.log.find("serialized") == std::string::npos);
      }
    }
  }
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(half_desc(DataType::BFloat16, Layout::NCDHW, false, cases[0])),
                                    sm90, "igemm_sm90_k16:4,64,16"),
                  Error);
  // The reference walks runs of 21 planes (62 = 21 + 21 + 20: 912 runs, at most 7 a block) with
  // three warpgroups; the slow stem (KD = 1) and a layer of 14 output planes a block of its own
  // keep one-plane tiles.
  auto kernel_of = [&](const Conv3dDesc& d) {
    return detail::canonical_text(detail::make_plan(detail::make_problem(half_desc(DataType::BFloat16, Layout::NCDHW, false, d)), sm90).key);
  };
  CHECK(kernel_of(cases[0]).find("wgs=3 bn=64 planes=21 ") != std::string::npos);
  CHECK(kernel_of(test::make(8, 3, {8, 224, 224}, 64, {1, 7, 7}, {1, 2, 2}, Dims3{0, 3, 3})).find("wgs=4 bn=64 planes=1 ") !=
        std::string::npos);
  CHECK(kernel_of(test::make(1, 3, {16, 64, 64}, 64, {3, 5, 7})).find("planes=1 ") != std::string::npos);
  // A forced configuration takes the planner's walk for the fields it leaves out (its warpgroups
  // and columns unchanged), the defaults for other tiles.
  const detail::Problem reference = detail::make_problem(half_desc(DataType::BFloat16, Layout::NCDHW, false, cases[0]));
  for (const char* forced : {"igemm_sm90_k16", "igemm_sm90_k16:3,64"}) {
    CHECK(detail::canonical_text(detail::make_plan(reference, sm90, forced).key) == kernel_of(cases[0]));
  }
  CHECK(detail::canonical_text(detail::make_plan(reference, sm90, "igemm_sm90_k16:2,64").key).find("planes=31 ") !=
        std::string::npos);
}

TEST_CASE("half types: grouped layers take grouped in both layouts; direct compiles for every type and layout") {
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
      const Conv3dDesc grouped = half_desc(type, layout, false, test::make(1, 8, {6, 7, 8}, 8, {3, 3, 3}, 1, 1, 1, 4));
      INFO(describe(grouped));
      CHECK(engine.kernel_for(grouped, "sm_90").rfind("grouped ", 0) == 0);
      const PrecompileResult r = engine.precompile(grouped, "sm_80");
      CHECK(r.main().compiled);
      EngineOptions forced = options;
      forced.kernel_config = "direct";
      const Conv3dDesc dense = half_desc(type, layout, true, test::make(1, 3, {6, 7, 8}, 8, {3, 5, 7}));
      const PrecompileResult f = Engine(forced).precompile(dense, "sm_90");
      CHECK(f.main().compiled);
      CHECK(f.main().kernel.rfind("direct ", 0) == 0);
    }
  }
}

TEST_CASE("half types: grouped layers of 4, 8 or more channels a group take grouped_mma on sm_80 and sm_90 and compile without spills") {
  // ResNeXt-3D's 32 groups of 8 and of 4, groups of 16 with a stride and dilation, 24 -> 48
  // channels (two column blocks a warp), the heaviest epilogue with the residual, a padding mode,
  // groups of 8 channels in and 4 out, groups of 256 output channels. As the engine
  // compiles them: a budget that leaves a stack frame is relaxed (the heavy NCDHW epilogue beside
  // 54 registers of weights spills 8 bytes at 168 registers on sm_80).
  EngineOptions options;
  options.disk_cache = false;
  Engine engine(options);
  Conv3dDesc heavy = test::make(1, 64, {6, 11, 13}, 64, {3, 3, 3}, {1, 2, 1}, 1, {1, 1, 2}, 4, true);
  heavy.epilogue.activation = Activation::Gelu;
  heavy.epilogue.alpha = 0.5f;
  heavy.epilogue.residual = true;
  Conv3dDesc reflect = test::make(2, 32, {5, 9, 30}, 32, {3, 3, 3}, 1, 1, 1, 4, true);
  reflect.padding_mode = PaddingMode::Reflect;
  const Conv3dDesc shapes[] = {test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1, 1, 32, true), heavy, reflect,
                               test::make(1, 48, {4, 7, 20}, 96, {1, 3, 3}, 1, 1, 1, 2, true),
                               test::make(2, 128, {4, 14, 14}, 128, {3, 3, 3}, 1, 1, 1, 32, true),
                               test::make(1, 32, {4, 6, 10}, 16, {3, 3, 3}, 1, 1, 1, 4),
                               // 256 output channels a group, one step: 16 column blocks a warp; 128 a
                               // group, two steps: 8
                               test::make(1, 64, {2, 13, 2}, 1024, {1, 1, 1}, {1, 4, 1}, Dims3{1, 0, 0}, {2, 1, 3}, 4),
                               test::make(1, 128, {5, 20, 33}, 1024, {2, 1, 1}, {1, 3, 1}, Dims3{1, 2, 1}, {2, 1, 1}, 8, true)};
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
      for (const Conv3dDesc& shape : shapes) {
        const Conv3dDesc d = half_desc(type, layout, layout == Layout::NDHWC, shape);
        for (const char* arch : {"sm_80", "sm_90"}) {
          DYNAMIC_SECTION(describe(d) << " " << arch) {
            const PrecompiledKernel k = engine.precompile(d, arch).main();
            INFO(k.kernel << ": " << k.registers << " registers");
            CHECK(k.kernel.rfind("grouped_mma ", 0) == 0);
            CHECK(k.stack_bytes == 0);
          }
        }
      }
    }
  }
  // Groups of 2 channels, more than 512 terms, or a group's columns over 8 warps: the families
  // after it.
  for (const Conv3dDesc& d : {test::make(1, 8, {6, 7, 8}, 8, {3, 3, 3}, 1, 1, 1, 4),
                              test::make(1, 64, {6, 7, 8}, 64, {5, 5, 5}, 1, 2, 1, 8),
                              test::make(1, 16, {6, 7, 8}, 384, {3, 3, 3}, 1, 1, 1, 2)}) {
    const Conv3dDesc h = half_desc(DataType::BFloat16, Layout::NDHWC, false, d);
    INFO(describe(h));
    CHECK(engine.kernel_for(h, "sm_90").rfind("grouped_mma ", 0) != 0);
  }
}
