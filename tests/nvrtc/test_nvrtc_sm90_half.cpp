// NVRTC, no GPU: bf16 and fp16 descriptions with C / groups % 8 == 0 and C / groups >= 32 plan to igemm_sm90_half
// on sm_90 (igemm_sm80 elsewhere and for what it refuses; NCDHW ones with channels_last copies of
// input and weight), compile for sm_90a, and ptxas reports no spills for the planner's tiles,
// forced tiles, an epilogue with a residual, padding modes and the NCDHW store.
#include <algorithm>
#include <string>

#include "catch.hpp"
#include "config_cases.hpp"
#include "conv3djit/engine.hpp"
#include "core/problem.hpp"
#include "driver/driver_api.hpp"
#include "plan/family.hpp"
#include "igemm_sm90_half/geometry.cuh"
#include "jit/codegen.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "plan/plan.hpp"
#include "ptxas_report.hpp"
#include "tune/candidates.hpp"

using namespace conv3djit;
using test::PtxasReport;

namespace {

Conv3dDesc ndhwc(DataType type, bool fp32_output, Conv3dDesc d) {
  d.dtype = type;
  d.layout = Layout::NDHWC;
  d.fp32_output = fp32_output;
  return d;
}

void check_compiles_clean(const PtxasReport& r) {
  INFO(r.kernel << "\n" << r.log);
  CHECK(r.kernel.rfind("igemm_sm90_half ", 0) == 0);
  test::check_no_spills(r);
  CHECK(r.log.find("C7510") == std::string::npos);  // wgmma serialised
}

// A step before the kernel (a copy) compiles for sm_90 without local memory.
void check_step_clean(const detail::PrepPlan& step) {
  detail::GeneratedKernel gen = detail::generate(step.key, "sm_90");
  gen.options.push_back("--ptxas-options=-v");
  const std::string log = detail::nvrtc_compile(gen).notes;
  INFO(log);
  CHECK(log.find(" 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") != std::string::npos);
}

std::string plan_family(const Conv3dDesc& d, const char* arch) {
  const detail::Plan plan = detail::make_plan(detail::make_problem(d), detail::limits_for_arch(arch));
  const std::string text = detail::canonical_text(plan.key);
  return text.substr(0, text.find(' '));
}

}  // namespace

TEST_CASE("igemm_sm90_half: which half-type layers it takes") {
  const Conv3dDesc wide = test::make(1, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1);
  CHECK(plan_family(ndhwc(DataType::BFloat16, false, wide), "sm_90") == "igemm_sm90_half");
  CHECK(plan_family(ndhwc(DataType::Float16, true, wide), "sm_90") == "igemm_sm90_half");
  CHECK(plan_family(ndhwc(DataType::BFloat16, false, wide), "sm_80") == "igemm_sm80");
  // NCDHW: the kernel reads channels-last copies of the input and the weight, made on every call.
  Conv3dDesc ncdhw = wide;
  ncdhw.dtype = DataType::BFloat16;
  CHECK(plan_family(ncdhw, "sm_90") == "igemm_sm90_half");
  CHECK(plan_family(ncdhw, "sm_80") == "igemm_sm80");
  {
    const detail::Plan plan = detail::make_plan(detail::make_problem(ncdhw), detail::limits_for_arch("sm_90"));
    REQUIRE(plan.input_copy);
    REQUIRE(plan.prep);
    CHECK(std::string(plan.input_copy->key.kernel->name) == "channels_last");
    CHECK(plan.input_copy->key.field("weights") == 0);
    CHECK(plan.prep->key.field("weights") == 1);
    CHECK(plan.copies_input(true));  // aligned or not
    CHECK(plan.input_copy->workspace_bytes == uint64_t{1} * 256 * 8 * 28 * 28 * 2);
    CHECK(plan.prep->workspace_bytes == uint64_t{256} * 256 * 27 * 2);
    // Shape-generic: another layer of the same type shares the copies' kernels.
    const detail::Plan other =
        detail::make_plan(detail::make_problem(ndhwc(DataType::BFloat16, false, test::make(2, 64, {5, 6, 7}, 64, {1, 3, 3}))),
                          detail::limits_for_arch("sm_90"));
    CHECK_FALSE(other.input_copy);
    Conv3dDesc small = test::make(2, 40, {5, 6, 7}, 48, {1, 3, 3});
    small.dtype = DataType::BFloat16;
    const detail::Plan third = detail::make_plan(detail::make_problem(small), detail::limits_for_arch("sm_90"));
    REQUIRE(third.input_copy);
    // (Its planes of 210 positions are off 16 bytes: the element-wise copy, which serves the
    // first layer's inputs off 16 bytes.)
    CHECK(third.input_copy->key == plan.input_copy->for_input(false).key);
    CHECK(third.prep->key == plan.prep->key);
  }
  // NCDHW with C % 8 != 0 stays on igemm_sm80.
  Conv3dDesc odd = test::make(1, 36, {5, 6, 7}, 64, {3, 3, 3});
  odd.dtype = DataType::Float16;
  CHECK(plan_family(odd, "sm_90") == "igemm_sm80");
  // C % 8 != 0 and small C stay on igemm_sm80.
  CHECK(plan_family(ndhwc(DataType::BFloat16, false, test::make(1, 12, {5, 6, 7}, 64, {3, 3, 3})), "sm_90") ==
        "igemm_sm80");
  CHECK(plan_family(ndhwc(DataType::BFloat16, false, test::make(1, 16, {5, 6, 7}, 64, {3, 3, 3})), "sm_90") ==
        "igemm_sm80");
  // Forced configurations outside the rules are refused; C % 8 != 0 too.
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  const Conv3dDesc d = ndhwc(DataType::BFloat16, false, wide);
  // Tiles: 128 x 256 or 128 x 192 with 4 stages past 128 output channels (one block an SM), else
  // 128 x 128 x 3 where that makes 128 blocks or more; float32 outputs of long reductions keep
  // BN <= 128 (blocked sums).
  const Conv3dDesc conv3b = test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1);
  auto tile = [&](const Conv3dDesc& desc) {
    const detail::Plan plan = detail::make_plan(detail::make_problem(desc), sm90);
    return std::to_string(plan.key.field("bm")) + "x" + std::to_string(plan.key.field("bn")) + "x" +
           std::to_string(plan.key.field("stages"));
  };
  // Past 128 channels the width whose waves of 132 blocks sum the fewest columns: conv3b's 392
  // row tiles take 256 (3 waves x 256 against 6 x 192), the same layer at batch 1 (49 row tiles:
  // 98 blocks of 128 columns, one wave) 128; K = 192 and 384 192 (no padded columns).
  CHECK(tile(ndhwc(DataType::BFloat16, false, conv3b)) == "128x256x4");
  CHECK(tile(d) == "128x128x4");
  CHECK(tile(ndhwc(DataType::BFloat16, false, test::make(8, 256, {8, 28, 28}, 128, {3, 3, 3}, 1, 1))) == "128x128x3");
  CHECK(tile(ndhwc(DataType::BFloat16, true, conv3b)) == "128x128x3");
  // (With a residual, which gemm_sm90 declines: without, it takes the 384- and 512-channel layers.)
  auto residual = [](Conv3dDesc desc) {
    desc.epilogue.residual = true;
    return desc;
  };
  CHECK(tile(ndhwc(DataType::BFloat16, false, residual(test::make(1, 64, {3, 120, 208}, 384, {3, 3, 3}, 1, 1)))) ==
        "128x192x4");
  CHECK(tile(ndhwc(DataType::BFloat16, false, test::make(1, 64, {3, 240, 416}, 192, {3, 3, 3}, 1, 1))) == "128x192x4");
  CHECK(tile(ndhwc(DataType::BFloat16, false, residual(test::make(1, 64, {17, 66, 66}, 512, {3, 3, 3}, 1, 1)))) ==
        "128x256x4");
  // 96 columns for K = 96.
  CHECK(tile(ndhwc(DataType::BFloat16, false, test::make(1, 64, {3, 60, 104}, 96, {3, 3, 3}, 1, 1))) == "128x96x3");
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(d), sm90, "igemm_sm90_half:96,128"), Error);
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(d), sm90, "igemm_sm90_half:128,256,8"), Error);
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(ndhwc(DataType::BFloat16, false,
                                                               test::make(1, 12, {5, 6, 7}, 64, {3, 3, 3}))),
                                    sm90, "igemm_sm90_half:128,128"),
                  Error);
}

TEST_CASE("igemm_sm90_half: the input as im2col boxes where TMA can walk its windows") {
  namespace geo = igemm_sm90_half_geometry;
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  auto plan_of = [&](const Conv3dDesc& d, const std::string& forced = "") {
    return detail::make_plan(detail::make_problem(d), sm90, forced);
  };
  // The bounding box ends just past the last window origin: padding 1 of a 3-wide window, -1;
  // stride 2 over 56 columns (28 outputs, origins -1 .. 53), -2; no padding, a 7-wide window, -6.
  CHECK(im2col::upper(56, 1, 1, 56) == -1);
  CHECK(im2col::upper(28, 2, 1, 56) == -2);
  CHECK(im2col::upper(50, 1, 0, 56) == -6);
  const Conv3dDesc wide = ndhwc(DataType::BFloat16, false, test::make(1, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1));
  {
    const detail::Plan plan = plan_of(wide);
    CHECK(plan.key.field("im2col") == 1);
    CHECK(detail::canonical_text(plan.key).find(" im2col=1") != std::string::npos);
    // An unaligned input runs the twin: the same tiles with A by the threads' copies.
    REQUIRE(plan.unaligned);
    CHECK(plan.unaligned->key.field("im2col") == 0);
    CHECK(plan.unaligned->key.field("bn") == plan.key.field("bn"));
    CHECK(&plan.for_input(false) == plan.unaligned.get());
  }
  {
    // NCDHW layers read their channels-last copy, aligned whatever the input: no twin.
    Conv3dDesc n = wide;
    n.layout = Layout::NCDHW;
    const detail::Plan plan = plan_of(n);
    CHECK(plan.key.field("im2col") == 1);
    CHECK_FALSE(plan.unaligned);
  }
  {
    // Strided, dilated and unpadded windows.
    CHECK(plan_of(ndhwc(DataType::Float16, false, test::make(2, 64, {9, 30, 31}, 64, {3, 3, 3}, {1, 2, 2}, 1, {1, 1, 2})))
              .key.field("im2col") == 1);
    CHECK(plan_of(ndhwc(DataType::Float16, false, test::make(1, 64, {4, 20, 20}, 64, {1, 7, 7})))
              .key.field("im2col") == 1);
  }
  // What TMA cannot walk: other padding modes, strides past 8, corners past 16.
  Conv3dDesc reflect = wide;
  reflect.padding_mode = PaddingMode::Reflect;
  const Conv3dDesc far_stride = ndhwc(DataType::BFloat16, false, test::make(1, 64, {4, 20, 40}, 64, {1, 1, 9}, {1, 1, 9}, 0));
  const Conv3dDesc far_pad = ndhwc(DataType::BFloat16, false, test::make(1, 64, {4, 6, 40}, 64, {1, 1, 35}, 1, Dims3{0, 0, 17}));
  for (const Conv3dDesc& d : {reflect, far_stride, far_pad}) {
    DYNAMIC_SECTION(describe(d)) {
      const detail::Plan plan = plan_of(d);
      CHECK(plan.key.field("im2col") == 0);
      CHECK_FALSE(plan.unaligned);
      CHECK_THROWS_AS(plan_of(d, "igemm_sm90_half:128,128,3,1"), Error);
    }
  }
  CHECK(plan_of(wide, "igemm_sm90_half:128,128,3,0").key.field("im2col") == 0);
  CHECK_THROWS_AS(plan_of(wide, "igemm_sm90_half:128,128,3,2"), Error);
}

TEST_CASE("igemm_sm90_half: pointwise NCDHW layers read their input in M-major boxes, without copies") {
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  auto ncdhw = [](Conv3dDesc d) {
    d.dtype = DataType::BFloat16;
    return d;
  };
  const Conv3dDesc pointwise = ncdhw(test::make(8, 128, {16, 56, 56}, 128, {1, 1, 1}));
  // (gemm_sm90 takes these layers first: forced here.)
  const std::string family = "igemm_sm90_half";
  const detail::Plan plan = detail::make_plan(detail::make_problem(pointwise), sm90, family);
  CHECK(plan.key.field("mmajor") == 1);
  CHECK(plan.key.field("im2col") == 0);
  CHECK_FALSE(plan.input_copy);
  CHECK_FALSE(plan.prep);
  // Blocks: 392 row tiles an image (50 176 positions), one column tile.
  CHECK(plan.grid == 8u * 392u);
  // An unaligned input runs the twin through the channels-last copies.
  REQUIRE(plan.unaligned);
  CHECK(plan.unaligned->key.field("mmajor") == 0);
  CHECK(plan.unaligned->input_copy);
  // Past 128 output channels too, 128 x 128 tiles of 3 stages (two blocks an SM), where the same
  // layer channels-last takes a wider tile (with a residual, which keeps it off gemm_sm90).
  const Conv3dDesc wide_k = ncdhw(test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}));
  const detail::Plan wide_plan = detail::make_plan(detail::make_problem(wide_k), sm90, family);
  CHECK(wide_plan.key.field("mmajor") == 1);
  CHECK(wide_plan.key.field("bn") == 128);
  CHECK(wide_plan.key.field("stages") == 3);
  Conv3dDesc wide_ndhwc = ndhwc(DataType::BFloat16, false, wide_k);
  wide_ndhwc.epilogue.residual = true;
  const detail::Plan wide_ndhwc_plan = detail::make_plan(detail::make_problem(wide_ndhwc), sm90);
  CHECK(detail::canonical_text(wide_ndhwc_plan.key).rfind(family + " ", 0) == 0);
  CHECK(wide_ndhwc_plan.key.field("bn") > 128);
  // Tiles never span two images: 240 positions make two row tiles an image.
  const Conv3dDesc ragged = ncdhw(test::make(3, 72, {3, 8, 10}, 100, {1, 1, 1}));
  CHECK(detail::make_plan(detail::make_problem(ragged), sm90, family).grid == 3u * 2u);
  // Not M-major: strides, padding, planes of D·H·W % 8 != 0, NDHWC, larger windows.
  for (const Conv3dDesc& d : {ncdhw(test::make(2, 64, {4, 8, 8}, 64, {1, 1, 1}, {1, 2, 2})),
                              ncdhw(test::make(2, 64, {4, 8, 8}, 64, {1, 1, 1}, 1, 1)),
                              ncdhw(test::make(2, 64, {3, 7, 5}, 64, {1, 1, 1})),
                              ndhwc(DataType::BFloat16, false, test::make(2, 64, {4, 8, 8}, 64, {1, 1, 1})),
                              ncdhw(test::make(2, 64, {4, 8, 8}, 64, {3, 3, 3}, 1, 1))}) {
    DYNAMIC_SECTION(describe(d)) {
      const detail::Plan p = detail::make_plan(detail::make_problem(d), sm90, "igemm_sm90_half");
      CHECK(p.key.field("mmajor") == 0);
      CHECK_THROWS_AS(detail::make_plan(detail::make_problem(d), sm90, "igemm_sm90_half:128,128,3,0,1"), Error);
    }
  }
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(pointwise), sm90, "igemm_sm90_half:128,128,3,1,1"), Error);
  CHECK(detail::make_plan(detail::make_problem(pointwise), sm90, "igemm_sm90_half:128,128,3,0,0").input_copy);
}

TEST_CASE("igemm_sm90_half: NCDHW layers of KD x 1 x 1 windows read their input in M-major boxes") {
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  auto half = [](Conv3dDesc d) {
    d.dtype = DataType::BFloat16;
    return d;
  };
  // R(2+1)D's temporal convolution: the input read in place, the weight rewritten (kd, c) once.
  const Conv3dDesc temporal = half(test::make(8, 288, {8, 28, 28}, 128, {3, 1, 1}, 1, Dims3{1, 0, 0}));
  const detail::Plan plan = detail::make_plan(detail::make_problem(temporal), sm90);
  CHECK(plan.key.field("mmajor") == 1);
  CHECK_FALSE(plan.input_copy);
  REQUIRE(plan.prep);
  CHECK(plan.grid == 8u * 49u);  // 6 272 positions an image in tiles of 128
  REQUIRE(plan.unaligned);
  CHECK(plan.unaligned->key.field("mmajor") == 0);
  CHECK(plan.unaligned->input_copy);
  // Wan 2.1's temporal 3x1x1 (three frames giving one, 384 -> 768): the wide tiles of windows.
  const Conv3dDesc wan = half(test::make(1, 384, {3, 60, 104}, 768, {3, 1, 1}));
  const detail::Plan wan_plan = detail::make_plan(detail::make_problem(wan), sm90);
  CHECK(wan_plan.key.field("mmajor") == 1);
  CHECK(wan_plan.key.field("bn") > 128);
  // Causal padding with dilation, padding after only, a stride along D over planes of whole boxes.
  for (const Conv3dDesc& d :
       {half(test::make(1, 128, {6, 4, 6}, 64, {3, 1, 1}, 1, Padding::per_side({4, 0, 0}, {0, 0, 0}), {2, 1, 1})),
        half(test::make(2, 64, {4, 6, 4}, 48, {2, 1, 1}, 1, Padding::per_side({0, 0, 0}, {1, 0, 0}))),
        half(test::make(2, 64, {7, 8, 16}, 64, {3, 1, 1}, {2, 1, 1}, Dims3{1, 0, 0}))}) {
    DYNAMIC_SECTION(describe(d)) { CHECK(detail::make_plan(detail::make_problem(d), sm90).key.field("mmajor") == 1); }
  }
  // Not M-major: a stride along D over planes of H·W % 64 != 0, planes of H·W % 8 != 0 with
  // several taps, a stride along H, padding along H,
  // replicate padding along D, a window along H, a padding whose shifts leave a box's 32-bit
  // coordinates.
  Conv3dDesc replicate = half(test::make(2, 64, {4, 8, 8}, 64, {3, 1, 1}, 1, Dims3{1, 0, 0}));
  replicate.padding_mode = PaddingMode::Replicate;
  for (const Conv3dDesc& d : {half(test::make(2, 64, {6, 8, 12}, 64, {3, 1, 1}, {2, 1, 1})),
                              half(test::make(2, 64, {4, 7, 5}, 64, {3, 1, 1})),
                              half(test::make(2, 64, {4, 8, 8}, 64, {3, 1, 1}, {1, 2, 1})),
                              half(test::make(2, 64, {4, 8, 8}, 64, {3, 1, 1}, 1, Dims3{1, 1, 0})), replicate,
                              half(test::make(2, 64, {4, 8, 8}, 64, {1, 3, 1})),
                              half(test::make(1, 64, {2, 256, 256}, 64, {3, 1, 1}, 1, Dims3{40000, 0, 0}))}) {
    DYNAMIC_SECTION("not " << describe(d)) {
      const detail::Plan p = detail::make_plan(detail::make_problem(d), sm90);
      CHECK(p.key.field("mmajor") == 0);
      CHECK_THROWS_AS(detail::make_plan(detail::make_problem(d), sm90, "igemm_sm90_half:128,128,3,0,1"), Error);
    }
  }
}

TEST_CASE("igemm_sm90_half kernels compile for sm_90a without spills") {
  const Conv3dDesc wide = test::make(1, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1);
  const Conv3dDesc mid = test::make(2, 72, {5, 8, 9}, 100, {3, 3, 3}, 1, 1);
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    for (const bool fp32_output : {false, true}) {
      for (const Conv3dDesc& base : {wide, mid}) {
        const Conv3dDesc d = ndhwc(type, fp32_output, base);
        DYNAMIC_SECTION(describe(d)) { check_compiles_clean(test::ptxas_report(d, "sm_90")); }
      }
    }
  }
  Conv3dDesc e = ndhwc(DataType::BFloat16, false, mid);
  e.epilogue = test::epilogue_cases()[3];  // GELU, scaled
  e.epilogue.residual = true;
  SECTION("epilogue with residual") {
    const PtxasReport r = test::ptxas_report(e, "sm_90");
    CHECK(r.kernel.find(" epi=bias+scale+gelu+res ") != std::string::npos);
    check_compiles_clean(r);
  }
  for (const PaddingMode mode : {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular}) {
    Conv3dDesc h = ndhwc(DataType::Float16, false, mid);
    h.padding_mode = mode;
    DYNAMIC_SECTION("padding " << padding_mode_name(mode)) { check_compiles_clean(test::ptxas_report(h, "sm_90")); }
  }
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    for (const bool fp32_output : {false, true}) {
      Conv3dDesc d = ndhwc(type, fp32_output, mid);
      d.layout = Layout::NCDHW;
      DYNAMIC_SECTION("NCDHW " << describe(d)) { check_compiles_clean(test::ptxas_report(d, "sm_90")); }
    }
  }
  SECTION("NCDHW epilogue with residual") {
    Conv3dDesc n = e;
    n.layout = Layout::NCDHW;
    check_compiles_clean(test::ptxas_report(n, "sm_90"));
  }
  for (const bool fp32_output : {false, true}) {
    Conv3dDesc pw = ndhwc(DataType::Float16, fp32_output, test::make(2, 72, {3, 8, 10}, 100, {1, 1, 1}));
    pw.layout = Layout::NCDHW;
    DYNAMIC_SECTION("M-major " << describe(pw)) {
      const PtxasReport r = test::ptxas_report(pw, "sm_90", "igemm_sm90_half");  // (gemm_sm90's otherwise)
      CHECK(r.kernel.find(" mmajor=1") != std::string::npos);
      check_compiles_clean(r);
    }
  }
  SECTION("M-major windows along D") {
    Conv3dDesc t = ndhwc(DataType::BFloat16, false, test::make(2, 72, {5, 8, 10}, 100, {3, 1, 1}, 1, Dims3{1, 0, 0}));
    t.layout = Layout::NCDHW;
    const PtxasReport r = test::ptxas_report(t, "sm_90");
    CHECK(r.kernel.find(" mmajor=1") != std::string::npos);
    check_compiles_clean(r);
  }
  SECTION("M-major with the residual") {
    Conv3dDesc pw = ndhwc(DataType::BFloat16, false, test::make(2, 72, {3, 8, 10}, 100, {1, 1, 1}, 1, 0, 1, 1, true));
    pw.layout = Layout::NCDHW;
    pw.epilogue = test::epilogue_cases()[3];  // GELU, scaled
    pw.epilogue.residual = true;
    const PtxasReport r = test::ptxas_report(pw, "sm_90", "igemm_sm90_half");  // (gemm_sm90's otherwise)
    CHECK(r.kernel.find(" mmajor=1") != std::string::npos);
    check_compiles_clean(r);
    Conv3dDesc wide = pw;
    wide.fp32_output = true;
    check_compiles_clean(test::ptxas_report(wide, "sm_90", "igemm_sm90_half:128,256"));
  }
  SECTION("channels_last copies") {
    // Planes of 360 positions (on 16 bytes): the input's copy moves TMA boxes, with the
    // element-wise copy for inputs off 16 bytes; planes of 594 positions take the latter alone, as
    // the weight does.
    Conv3dDesc n = ndhwc(DataType::BFloat16, false, mid);
    n.layout = Layout::NCDHW;
    const detail::Plan plan = detail::make_plan(detail::make_problem(n), detail::limits_for_arch("sm_90"));
    CHECK(plan.input_copy->key.field("boxes") == 1);
    CHECK(plan.input_copy->tensor_maps != nullptr);
    REQUIRE(plan.input_copy->unaligned);
    CHECK(plan.input_copy->unaligned->key.field("boxes") == 0);
    CHECK(&plan.input_copy->for_input(false) == plan.input_copy->unaligned.get());
    CHECK(plan.prep->key.field("boxes") == 0);
    for (const detail::PrepPlan* step : {&*plan.input_copy, plan.input_copy->unaligned.get(), &*plan.prep}) {
      check_step_clean(*step);
    }
    Conv3dDesc odd = ndhwc(DataType::Float16, false, test::make(1, 64, {6, 9, 11}, 64, {3, 3, 3}, 1, 1));
    odd.layout = Layout::NCDHW;
    const detail::Plan odd_plan = detail::make_plan(detail::make_problem(odd), detail::limits_for_arch("sm_90"));
    CHECK(odd_plan.input_copy->key.field("boxes") == 0);
    CHECK_FALSE(odd_plan.input_copy->unaligned);
  }
  for (const char* config : {"igemm_sm90_half:64,64", "igemm_sm90_half:128,256", "igemm_sm90_half:64,256,3",
                             "igemm_sm90_half:bm=128,bn=64,stages=6", "igemm_sm90_half:128,128,3,0",
                             "igemm_sm90_half:128,256,4,0", "igemm_sm90_half:128,192,4",
                             "igemm_sm90_half:128,96", "igemm_sm90_half:64,192,3,0"}) {
    DYNAMIC_SECTION(config) {
      check_compiles_clean(test::ptxas_report(ndhwc(DataType::BFloat16, false, wide), "sm_90", config));
    }
  }
}

TEST_CASE("igemm_sm90_half: grouped layers of 32 channels a group or more, a block's columns in one group") {
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  auto half = [](Conv3dDesc d, Layout layout) {
    d.dtype = DataType::BFloat16;
    d.layout = layout;
    return d;
  };
  for (const Layout layout : {Layout::NDHWC, Layout::NCDHW}) {
    // 2 groups of 64 -> 48 (one column block a group), 4 of 32 -> 50 (chunks of 32 channels: a box
    // of 64 would reach into the next group), 2 of 256 -> 256 with a residual.
    const Conv3dDesc a = half(test::make(4, 128, {4, 28, 28}, 96, {3, 3, 3}, 1, 1, 1, 2, true), layout);
    const Conv3dDesc b = half(test::make(2, 128, {8, 16, 16}, 200, {3, 5, 5}, 1, Dims3{1, 2, 2}, 1, 4), layout);
    Conv3dDesc c = half(test::make(2, 512, {4, 14, 14}, 512, {1, 1, 1}, 1, 0, 1, 2, true), layout);
    c.epilogue.residual = true;
    for (const Conv3dDesc& d : {a, b, c}) {
      DYNAMIC_SECTION(describe(d)) {
        const detail::Problem prob = detail::make_problem(d);
        const detail::Plan plan = detail::make_plan(prob, sm90);
        REQUIRE(plan_family(d, "sm_90") == "igemm_sm90_half");
        CHECK(plan.key.field("groups") == d.groups);
        const int bn = plan.key.field("bn");
        CHECK(bn < 2 * prob.k_per_group);  // no column block mostly past its group
        const bool boxes = plan.key.field("im2col") == 1 || plan.key.field("mmajor") == 1;
        const int chunk = plan.key.field("chunk");
        CHECK(chunk == (prob.c_per_group == 32 && plan.key.field("mmajor") == 0 ? 32 : 64));
        CHECK(boxes == (prob.c_per_group % chunk == 0));
        const long long positions = prob.out.d * prob.out.h * prob.out.w;
        const long long rows = plan.key.field("mmajor") == 1 ? prob.out.n * ((positions + plan.key.field("bm") - 1) /
                                                                             plan.key.field("bm"))
                                                              : (prob.out.n * positions + plan.key.field("bm") - 1) /
                                                                    plan.key.field("bm");
        CHECK(plan.grid == rows * d.groups * ((prob.k_per_group + bn - 1) / bn));
        check_compiles_clean(test::ptxas_report(d, "sm_90"));
        // Forced tiles wider than a group compile too (their last columns are dropped).
        check_compiles_clean(test::ptxas_report(d, "sm_90", "igemm_sm90_half:128,256"));
      }
    }
  }
  // Fewer than 32 channels or 16 output channels a group: the grouped kernel (FFMA); forced
  // tiles with boxes need whole chunks a group.
  const Conv3dDesc narrow = half(test::make(2, 256, {4, 14, 14}, 64, {3, 3, 3}, 1, 1, 1, 8), Layout::NDHWC);
  CHECK(plan_family(narrow, "sm_90") != "igemm_sm90_half");
  const Conv3dDesc few = half(test::make(2, 128, {4, 14, 14}, 16, {3, 3, 3}, 1, 1, 1, 2), Layout::NDHWC);
  CHECK(plan_family(few, "sm_90") != "igemm_sm90_half");
  CHECK_NOTHROW(detail::make_plan(detail::make_problem(few), sm90, "igemm_sm90_half:128,64"));
  const Conv3dDesc b32 = half(test::make(2, 128, {8, 16, 16}, 200, {3, 3, 3}, 1, 1, 1, 4), Layout::NDHWC);
  CHECK_NOTHROW(detail::make_plan(detail::make_problem(b32), sm90, "igemm_sm90_half:128,64,3,1"));
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(b32), sm90, "igemm_sm90_half:128,64,3,1,0,64"), Error);
}

TEST_CASE("igemm_sm90_half: 16-bit layers of 32 channels a group take chunks of 32 channels, 64-byte rows") {
  namespace geo = igemm_sm90_half_geometry;
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  // 32 -> 64, 3^3 (the unet3d encoder's layer) in NDHWC: im2col boxes of 32 channels. NCDHW, igemm_sm90
  // keeps it (its gather from a float32 copy was as fast); forced here, the channels-last copy.
  const Conv3dDesc enc = ndhwc(DataType::BFloat16, false, test::make(2, 32, {16, 24, 24}, 64, {3, 3, 3}, 1, 1));
  const detail::Problem prob = detail::make_problem(enc);
  const detail::Plan plan = detail::make_plan(prob, sm90);
  REQUIRE(plan_family(enc, "sm_90") == "igemm_sm90_half");
  CHECK(plan.key.field("chunk") == 32);
  CHECK(plan.key.field("im2col") == 1);
  CHECK(plan.key.field("stages") == 3);
  CHECK(plan.shared_bytes == static_cast<unsigned>(geo::shared_bytes(plan.key.field("bm"), plan.key.field("bn"), 3, 64)));
  Conv3dDesc enc_ncdhw = enc;
  enc_ncdhw.layout = Layout::NCDHW;
  CHECK(plan_family(enc_ncdhw, "sm_90") == "igemm_sm90");
  const detail::Plan forced = detail::make_plan(detail::make_problem(enc_ncdhw), sm90, "igemm_sm90_half:128,64");
  CHECK(forced.key.field("chunk") == 32);
  CHECK(forced.input_copy);
  // The 64-byte ring is smaller than a 128 x 128 tile's staged float32 outputs: the ring grows to them.
  CHECK(geo::ring_bytes(128, 128, 3, 64) == geo::staged_output_bytes(128, 128));
  CHECK(geo::ring_bytes(128, 128, 3, 128) == 3 * geo::stage_bytes(128, 128, 128));
  // Tuning offers the full-row chunk too.
  bool full_rows = false;
  for (const detail::Candidate& c : detail::tuning_candidates(prob, sm90, 12)) {
    full_rows = full_rows || (c.config.rfind("igemm_sm90_half:", 0) == 0 && c.plan.key.field("chunk") == 64);
  }
  CHECK(full_rows);
  // 64 channels keep full rows; 32-channel chunks there are a forced choice. Chunks of 32 need
  // K-major A (no M-major boxes) and 16-bit elements; other widths are refused.
  Conv3dDesc c64 = enc;
  c64.c = 64;
  CHECK(detail::make_plan(detail::make_problem(c64), sm90).key.field("chunk") == 64);
  CHECK(detail::make_plan(detail::make_problem(c64), sm90, "igemm_sm90_half:128,64,3,1,0,32").key.field("chunk") == 32);
  Conv3dDesc pointwise = test::make(2, 32, {4, 16, 16}, 64, {1, 1, 1});
  pointwise.dtype = DataType::BFloat16;
  CHECK(detail::make_plan(detail::make_problem(pointwise), sm90, "igemm_sm90_half:128,64").key.field("mmajor") == 1);
  CHECK(detail::make_plan(detail::make_problem(pointwise), sm90, "igemm_sm90_half:128,64").key.field("chunk") == 64);
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(pointwise), sm90, "igemm_sm90_half:128,64,3,0,1,32"), Error);
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(enc), sm90, "igemm_sm90_half:128,64,3,1,0,16"), Error);
  Conv3dDesc tf = ndhwc(DataType::Float32, false, test::make(2, 32, {4, 16, 16}, 64, {3, 3, 3}, 1, 1));
  tf.precision = Precision::Tf32;
  CHECK_THROWS_AS(detail::make_plan(detail::make_problem(tf), sm90, "igemm_sm90_half:128,64,3,1,0,16"), Error);
  // They compile without spills: im2col boxes in both layouts, the threads' copies (replicate
  // padding, and the twin for unaligned inputs), float32 outputs with blocked sums, an epilogue
  // with a residual through the staged rows, and wide tiles.
  Conv3dDesc replicate = enc_ncdhw;
  replicate.padding_mode = PaddingMode::Replicate;
  Conv3dDesc blocked = ndhwc(DataType::Float16, true, test::make(1, 32, {8, 16, 16}, 96, {3, 3, 3}, 1, 1));
  Conv3dDesc fused = ndhwc(DataType::BFloat16, false, test::make(1, 32, {8, 16, 16}, 128, {3, 3, 3}, 1, 1));
  fused.epilogue = test::epilogue_cases()[3];
  fused.epilogue.residual = true;
  Conv3dDesc fused_ncdhw = fused;
  fused_ncdhw.layout = Layout::NCDHW;
  CHECK(detail::make_plan(detail::make_problem(replicate), sm90, "igemm_sm90_half:128,64").key.field("im2col") == 0);
  CHECK(detail::make_plan(detail::make_problem(blocked), sm90).key.field("chunk") == 32);
  for (const Conv3dDesc& d : {enc, enc_ncdhw, replicate, blocked, fused, fused_ncdhw}) {
    DYNAMIC_SECTION(describe(d)) {
      check_compiles_clean(test::ptxas_report(d, "sm_90", "igemm_sm90_half:128,64"));
      check_compiles_clean(test::ptxas_report(d, "sm_90", "igemm_sm90_half:128,96,3,0"));
      check_compiles_clean(test::ptxas_report(d, "sm_90", "igemm_sm90_half:128,128,8"));
    }
  }
  SECTION("the unaligned twin") {
    REQUIRE(forced.unaligned == nullptr);  // NCDHW: the copy is aligned
    REQUIRE(plan.unaligned);
    CHECK(plan.unaligned->key.field("chunk") == 32);
    CHECK(plan.unaligned->key.field("im2col") == 0);
  }
}

TEST_CASE("igemm_sm90_half: epilogues run in the copy-out and add no machine code per output") {
  // A 128 x 256 tile holds 128 sums a thread; the epilogue runs on the staged float32 sums in
  // the copy-out's loop instead, in both layouts. SiLU on the 128 sums in registers took 5208
  // instructions against the plain kernel's 3536 (NCDHW), 5840 against 4064 (NDHWC). A residual
  // adds a fixed amount for this long reduction: its L2 prefetch and 8 runs' reads ahead, each
  // with its offset (NCDHW: 4272 instructions with SiLU).
  for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
    Conv3dDesc d = test::make(2, 256, {8, 32, 32}, 256, {3, 3, 3}, 1, 1, 1, 1, true);
    d.dtype = DataType::BFloat16;
    d.layout = layout;
    auto instructions = [&] {
      EngineOptions options;
      options.disk_cache = false;
      const PrecompileResult r = Engine(options).precompile(d, "sm_90");
      CHECK(r.main().kernel.rfind("igemm_sm90_half bf16 " + std::string(layout_name(layout)) + " ", 0) == 0);
      return r.main().code_bytes / 16;
    };
    const long long plain = instructions();
    for (const bool residual : {false, true}) {
      d.epilogue.activation = Activation::Silu;
      d.epilogue.residual = residual;
      const long long silu = instructions();
      INFO(describe(d) << ": " << silu << " instructions, " << plain << " plain");
      CHECK(silu < plain + (residual ? 768 : 256));
    }
  }
}

TEST_CASE("igemm_sm90_half: float32 layers of the tf32 class with rounded operands and 32-channel chunks") {
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  auto tf32 = [](Conv3dDesc d, Layout layout = Layout::NDHWC) {
    d.precision = Precision::Tf32;
    d.layout = layout;
    return d;
  };
  const Conv3dDesc wide = tf32(test::make(1, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1));
  const Conv3dDesc mid = tf32(test::make(2, 72, {5, 8, 9}, 100, {3, 3, 3}, 1, 1));
  SECTION("which layers it takes") {
    CHECK(plan_family(wide, "sm_90") == "igemm_sm90_half");
    CHECK(plan_family(mid, "sm_90") == "igemm_sm90_half");
    CHECK(plan_family(tf32(test::make(2, 36, {5, 8, 9}, 64, {1, 3, 3})), "sm_90") == "igemm_sm90_half");
    // NCDHW of 256 channels or more in and out, several taps, K x taps >= 2048 and 16384 output
    // positions or more (C3D conv3b), through channels-last copies.
    CHECK(plan_family(tf32(test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1), Layout::NCDHW), "sm_90") ==
          "igemm_sm90_half");
    // The fp32 class (3xTF32), other NCDHW layers (igemm_sm90 gathers them in place), fewer than 32
    // channels or 64 output channels, and channels off 16-byte pieces stay on igemm_sm90.
    CHECK(plan_family(tf32(test::make(2, 36, {5, 8, 9}, 40, {1, 3, 3})), "sm_90") == "igemm_sm90");
    Conv3dDesc fp32 = wide;
    fp32.precision = Precision::Fp32;
    CHECK(plan_family(fp32, "sm_90") == "igemm_sm90");
    fp32.layout = Layout::NCDHW;
    CHECK(plan_family(fp32, "sm_90") == "igemm_sm90");
    for (const Conv3dDesc& n : {test::make(8, 128, {8, 28, 28}, 256, {3, 3, 3}, 1, 1),
                                test::make(8, 256, {8, 28, 28}, 128, {3, 3, 3}, 1, 1),
                                test::make(8, 256, {8, 28, 28}, 256, {1, 1, 1}),
                                test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}),
                                test::make(8, 256, {8, 28, 28}, 256, {3, 1, 1}, 1, Dims3{1, 0, 0}),
                                test::make(1, 512, {5, 32, 32}, 512, {3, 3, 3}, 1, 1),
                                test::make(4, 256, {8, 14, 14}, 256, {3, 3, 3}, 1, 1)}) {
      CHECK(plan_family(tf32(n, Layout::NCDHW), "sm_90") == "igemm_sm90");
    }
    CHECK(plan_family(tf32(test::make(2, 24, {5, 8, 9}, 64, {3, 3, 3}, 1, 1)), "sm_90") == "igemm_sm90");
    CHECK(plan_family(tf32(test::make(2, 34, {5, 8, 9}, 64, {3, 3, 3}, 1, 1)), "sm_90") == "igemm_sm90");
    // Input and weight are read in place (the TMA rounds them as it loads them): no step before.
    const detail::Plan plan = detail::make_plan(detail::make_problem(wide), sm90);
    CHECK_FALSE(plan.prep);
    CHECK_FALSE(plan.input_copy);
    REQUIRE(plan.unaligned);
    CHECK(plan.unaligned->key.field("im2col") == 0);
    CHECK(plan.key.field("im2col") == 1);
    std::vector<detail::FamilyVerdict> verdicts;
    detail::explain_plan(detail::make_problem(wide), sm90, &verdicts);
    REQUIRE(verdicts.size() == 4);  // igemm_sm90_k16, igemm_sm90, gemm_sm90 (16-bit only), igemm_sm90_half
    CHECK(verdicts[1].passed.find("igemm_sm90_half takes") != std::string::npos);
    // A box is 32 channels: grouped layers with 32 a group take boxes, 48 a group the copies.
    Conv3dDesc g32 = tf32(test::make(2, 64, {5, 8, 9}, 64, {3, 3, 3}, 1, 1));
    g32.groups = 2;
    CHECK(detail::make_plan(detail::make_problem(g32), sm90).key.field("im2col") == 1);
    Conv3dDesc g48 = tf32(test::make(2, 96, {5, 8, 9}, 64, {3, 3, 3}, 1, 1));
    g48.groups = 2;
    CHECK(detail::make_plan(detail::make_problem(g48), sm90).key.field("im2col") == 0);
    // Grouped NCDHW layers have no other tensor-core kernel: the planner takes this one, through
    // the copies; in the fp32 class they stay on FFMA.
    Conv3dDesc g_ncdhw = g32;
    g_ncdhw.layout = Layout::NCDHW;
    const detail::Plan grouped = detail::make_plan(detail::make_problem(g_ncdhw), sm90);
    CHECK(detail::canonical_text(grouped.key).rfind("igemm_sm90_half ", 0) == 0);
    CHECK(grouped.input_copy);
    g_ncdhw.precision = Precision::Fp32;
    CHECK(plan_family(g_ncdhw, "sm_90") != "igemm_sm90_half");
  }
  for (const Conv3dDesc& d : {wide, mid, tf32(test::make(2, 36, {5, 8, 9}, 64, {1, 3, 3}))}) {
    DYNAMIC_SECTION(describe(d)) { check_compiles_clean(test::ptxas_report(d, "sm_90")); }
  }
  SECTION("epilogue with residual") {
    Conv3dDesc e = mid;
    e.epilogue = test::epilogue_cases()[3];  // GELU, scaled
    e.epilogue.residual = true;
    check_compiles_clean(test::ptxas_report(e, "sm_90"));
    check_compiles_clean(test::ptxas_report(e, "sm_90", "igemm_sm90_half:128,256,4"));
  }
  for (const PaddingMode mode : {PaddingMode::Reflect, PaddingMode::Circular}) {
    Conv3dDesc h = mid;
    h.padding_mode = mode;
    DYNAMIC_SECTION("padding " << padding_mode_name(mode)) { check_compiles_clean(test::ptxas_report(h, "sm_90")); }
  }
  SECTION("the threads' copies at 128 columns: one block an SM, no spills") {
    // At two blocks' 128 registers these spilled 8-24 bytes (a residual, a padding mode, groups).
    Conv3dDesc e = tf32(test::make(1, 256, {6, 9, 14}, 256, {5, 1, 5}, 1, 1, 1, 1, true));
    e.epilogue.activation = Activation::Relu;
    e.epilogue.residual = true;
    check_compiles_clean(test::ptxas_report(e, "sm_90", "igemm_sm90_half:128,128,4,0"));
    Conv3dDesc g = tf32(test::make(2, 256, {5, 9, 14}, 256, {2, 7, 7}, {1, 1, 2}, Dims3{1, 3, 3}, 1, 4, true));
    g.padding_mode = PaddingMode::Reflect;
    g.epilogue.activation = Activation::Relu;
    g.epilogue.residual = true;
    check_compiles_clean(test::ptxas_report(g, "sm_90", "igemm_sm90_half:128,128"));
  }
  for (const char* config : {"igemm_sm90_half:64,64", "igemm_sm90_half:128,256,4,0", "igemm_sm90_half:128,192,4",
                             "igemm_sm90_half:128,128,3,0", "igemm_sm90_half:bm=128,bn=64,stages=6"}) {
    DYNAMIC_SECTION(config) { check_compiles_clean(test::ptxas_report(wide, "sm_90", config)); }
  }
  // NCDHW: through channels_last copies of input and weight (which round them), offered to tuning;
  // the planner's pick only at 256 channels in and out with several taps and 16384 output positions,
  // where igemm_sm90's gather is the tuning's alternative.
  const Conv3dDesc ncdhw = tf32(test::make(2, 72, {5, 8, 9}, 100, {3, 3, 3}, 1, 1), Layout::NCDHW);
  SECTION("NCDHW through channels-last copies when forced or tuned") {
    const detail::Problem prob = detail::make_problem(ncdhw);
    const detail::Plan plan = detail::make_plan(prob, sm90, "igemm_sm90_half:128,128");
    REQUIRE(plan.input_copy);
    REQUIRE(plan.prep);
    CHECK(std::string(plan.input_copy->key.kernel->name) == "channels_last");
    CHECK(std::string(plan.prep->key.kernel->name) == "channels_last");
    CHECK(plan.input_copy->workspace_bytes == 2ull * 72 * 5 * 8 * 9 * 4);
    bool offered = false;
    for (const detail::Candidate& c : detail::tuning_candidates(prob, sm90, 12)) {
      offered = offered || c.config.rfind("igemm_sm90_half:", 0) == 0;
    }
    CHECK(offered);
    const detail::Problem many =
        detail::make_problem(tf32(test::make(1, 256, {4, 64, 64}, 256, {3, 3, 3}, 1, 1), Layout::NCDHW));
    CHECK(detail::make_plan(many, sm90).input_copy);
    bool gather = false;
    for (const detail::Candidate& c : detail::tuning_candidates(many, sm90, 12)) {
      gather = gather || c.config.rfind("igemm_sm90:", 0) == 0;
    }
    CHECK(gather);
  }
  for (const char* config : {"igemm_sm90_half:128,128", "igemm_sm90_half:128,256,4"}) {
    DYNAMIC_SECTION("NCDHW " << config) { check_compiles_clean(test::ptxas_report(ncdhw, "sm_90", config)); }
  }
  SECTION("NCDHW epilogue with residual") {
    Conv3dDesc e = ncdhw;
    e.epilogue = test::epilogue_cases()[3];  // GELU, scaled
    e.epilogue.residual = true;
    check_compiles_clean(test::ptxas_report(e, "sm_90", "igemm_sm90_half:128,128"));
  }
  SECTION("the rounding copies") {
    const detail::Plan copies = detail::make_plan(detail::make_problem(ncdhw), sm90, "igemm_sm90_half:128,128");
    for (const detail::PrepPlan* step : {&*copies.prep, &*copies.input_copy}) {
      check_step_clean(*step);
    }
  }
}

TEST_CASE("tf32-class maps are of the TFLOAT32 type so that the TMA rounds what it loads") {
  // A driver that records the maps' element types (nothing runs).
  static std::vector<CUtensorMapDataType> types;
  detail::DriverApi api;
  api.cuTensorMapEncodeTiled = [](CUtensorMap*, CUtensorMapDataType type, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
    types.push_back(type);
    return CUDA_SUCCESS;
  };
  api.cuTensorMapEncodeIm2col = [](CUtensorMap*, CUtensorMapDataType type, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const int*, const int*, cuuint32_t, cuuint32_t,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
    types.push_back(type);
    return CUDA_SUCCESS;
  };
  detail::set_driver_for_testing(&api);
  alignas(256) static float tensors[2][64];  // stand-ins: only their addresses are read
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  auto maps_of = [&](const Conv3dDesc& d) {
    types.clear();
    const detail::Plan plan = detail::make_plan(detail::make_problem(d), sm90);
    CUtensorMap first{}, second{}, third{};
    plan.family->tensor_maps(plan, tensors[0], tensors[1], nullptr, &first, &second, &third);
    INFO(describe(d) << ": " << detail::canonical_text(plan.key));
    CHECK_FALSE(types.empty());
    return types;
  };
  // igemm_sm90_half: the weight's tiles and the input's im2col boxes.
  Conv3dDesc wide = test::make(1, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1);
  wide.layout = Layout::NDHWC;
  wide.precision = Precision::Tf32;
  CHECK(maps_of(wide) == std::vector<CUtensorMapDataType>(2, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32));
  CHECK(maps_of(ndhwc(DataType::BFloat16, false, wide)) ==
        std::vector<CUtensorMapDataType>(2, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16));
  // igemm_sm90: the input's boxes (the first map; the fp32 class splits full float32 values), and
  // the output's staged boxes, stored as they are.
  Conv3dDesc reference = test::make(16, 3, {64, 64, 64}, 64, {3, 5, 7});
  reference.precision = Precision::Tf32;
  CHECK(maps_of(reference) ==
        std::vector<CUtensorMapDataType>{CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, CU_TENSOR_MAP_DATA_TYPE_FLOAT32});
  reference.precision = Precision::Fp32;
  CHECK(maps_of(reference).front() == CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
  detail::set_driver_for_testing(nullptr);
}

TEST_CASE("igemm_sm90's maps: tiles across images see the input row by row, raw weights in swizzled rows of 32") {
  // A driver that records each map (nothing runs).
  struct Map {
    CUtensorMapDataType type;
    std::vector<cuuint64_t> dims, strides;
    std::vector<cuuint32_t> box;
    CUtensorMapSwizzle swizzle;
  };
  static std::vector<Map> maps;
  detail::DriverApi api;
  api.cuTensorMapEncodeTiled = [](CUtensorMap*, CUtensorMapDataType type, cuuint32_t rank, void*,
                                  const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                  const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle swizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
    maps.push_back({type, {dims, dims + rank}, {strides, strides + rank - 1}, {box, box + rank}, swizzle});
    return CUDA_SUCCESS;
  };
  detail::set_driver_for_testing(&api);
  alignas(256) static float tensors[2][64];  // stand-ins: only their addresses are read
  // pointwise_512 in tiles across images (8 images of 98 rows of 8 positions, 512 channels): the
  // input as (W, C, H, D, N), boxes of 16 rows x 32 channels, and of one row; in the tf32 class
  // the 2048 x 512 weight in boxes of 128 rows x 32 terms, 128-byte swizzled, rounded as they land.
  for (const Precision precision : {Precision::Tf32, Precision::Fp32}) {
    Conv3dDesc d = test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1});
    d.precision = precision;
    INFO(describe(d));
    maps.clear();
    const detail::Plan plan =
        detail::make_plan(detail::make_problem(d), detail::limits_for_arch("sm_90"), "sm90:16,8,128,32,1,0,1,1");
    REQUIRE(plan.key.field("across") == 1);
    CHECK(plan.weight_map == (precision == Precision::Tf32));
    CHECK(plan.prep.has_value() == (precision == Precision::Fp32));  // 3xTF32's big and small parts
    CUtensorMap first{}, second{}, third{};
    plan.family->tensor_maps(plan, tensors[0], tensors[1], nullptr, &first, &second, &third);
    REQUIRE(maps.size() == (precision == Precision::Tf32 ? 3u : 2u));
    const CUtensorMapDataType type =
        precision == Precision::Tf32 ? CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    const cuuint64_t row = 8 * 4, plane = 98 * row, channel = plane;
    for (int i = 0; i < 2; ++i) {
      CHECK(maps[i].type == type);
      CHECK(maps[i].dims == std::vector<cuuint64_t>{8, 512, 98, 1, 8});
      CHECK(maps[i].strides == std::vector<cuuint64_t>{channel, row, plane, 512 * channel});
      CHECK(maps[i].swizzle == CU_TENSOR_MAP_SWIZZLE_NONE);
    }
    const cuuint32_t cc = static_cast<cuuint32_t>(plan.key.field("cc")), th = static_cast<cuuint32_t>(plan.key.field("th"));
    CHECK(maps[0].box == std::vector<cuuint32_t>{8, cc, th, 1, 1});
    CHECK(maps[1].box == std::vector<cuuint32_t>{8, cc, 1, 1, 1});
    if (precision == Precision::Tf32) {
      CHECK(maps[2].type == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32);
      CHECK(maps[2].dims == std::vector<cuuint64_t>{512, 2048});
      CHECK(maps[2].strides == std::vector<cuuint64_t>{512 * 4});
      CHECK(maps[2].box == std::vector<cuuint32_t>{32, static_cast<cuuint32_t>(plan.key.field("bn"))});
      CHECK(maps[2].swizzle == CU_TENSOR_MAP_SWIZZLE_128B);
    }
  }
  detail::set_driver_for_testing(nullptr);
}

TEST_CASE("igemm_sm90's output map: staged TH x TW tiles store by TMA only on rows of whole tiles") {
  // A driver that records each map's address and box (nothing runs).
  static std::vector<std::pair<const void*, std::vector<cuuint32_t>>> maps;
  detail::DriverApi api;
  api.cuTensorMapEncodeTiled = [](CUtensorMap*, CUtensorMapDataType, cuuint32_t rank, void* base, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t* box, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
    maps.emplace_back(base, std::vector<cuuint32_t>(box, box + rank));
    return CUDA_SUCCESS;
  };
  detail::set_driver_for_testing(&api);
  alignas(256) static float tensors[3][64];  // stand-ins: only their addresses are read
  // 2 x 64 tiles of 256 columns (tf32, staged boxes of a warp's 16 positions x 1 plane x their
  // channels), plain and with SiLU: rows of 128 (two whole tiles) take the output's map, rows of
  // 48 (a tile past the row's end) and an output off 16 bytes do not.
  for (const bool silu : {false, true}) {
    for (const int w : {128, 48}) {
      Conv3dDesc d = test::make(1, 64, {2, 5, w}, 256, {1, 1, 1});
      d.precision = Precision::Tf32;
      if (silu) d.epilogue.activation = Activation::Silu;
      const detail::Plan plan =
          detail::make_plan(detail::make_problem(d), detail::limits_for_arch("sm_90"), "sm90:2,64,256,32,1,0,1");
      INFO(detail::canonical_text(plan.key));
      REQUIRE(plan.store_channels > 0);
      for (const int shift : {0, 1}) {
        maps.clear();
        CUtensorMap first{}, second{}, third{};
        plan.family->tensor_maps(plan, tensors[0], tensors[1], tensors[2] + shift, &first, &second, &third);
        const auto out = std::find_if(maps.begin(), maps.end(), [&](const auto& m) { return m.first == tensors[2] + shift; });
        if (w == 128 && shift == 0) {
          REQUIRE(out != maps.end());
          CHECK(out->second == std::vector<cuuint32_t>{16, 1, static_cast<cuuint32_t>(plan.store_channels), 1});
        } else {
          CHECK(out == maps.end());
        }
      }
    }
  }
  detail::set_driver_for_testing(nullptr);
}

TEST_CASE("igemm_sm90_half: output channels as the products' M where a layer has at most 64 of them") {
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  auto plan_of = [&](const Conv3dDesc& d, const char* config = "") {
    return detail::make_plan(detail::make_problem(d), sm90, config);
  };
  // The unet3d encoder (32 -> 64, 3^3, 2 x 64^3): 256 positions a block, two warpgroups of 128,
  // four stages of 32-channel chunks; NCDHW leaves igemm_sm90's gather for the channels-last copy.
  const Conv3dDesc enc = ndhwc(DataType::BFloat16, false, test::make(2, 32, {64, 64, 64}, 64, {3, 3, 3}, 1, 1));
  for (const Layout layout : {Layout::NDHWC, Layout::NCDHW}) {
    Conv3dDesc d = enc;
    d.layout = layout;
    DYNAMIC_SECTION(describe(d)) {
      REQUIRE(plan_family(d, "sm_90") == "igemm_sm90_half");
      const detail::Plan plan = plan_of(d);
      CHECK(plan.key.field("pn") == 128);
      CHECK(plan.key.field("bm") == 256);
      CHECK(plan.key.field("bn") == 64);
      CHECK(plan.key.field("chunk") == 32);
      CHECK(plan.key.field("stages") == 4);
      CHECK(plan.block == 256u);
      CHECK(plan.grid == 2u * 64 * 64 * 64 / 256);
      CHECK(static_cast<bool>(plan.input_copy) == (layout == Layout::NCDHW));
    }
  }
  // 128 -> 64 (the decoder's), and 48 or 96 channels: three stages of full chunks (the decoder's
  // own layer, 128 -> 64, is gemm_sm90's row boxes: NCDHW 64 and 128 channels into 64 with 3-tap
  // rows). 64 channels, more than 64 output channels, grouped layers, layers of fewer than 128
  // such blocks, float32 in the tf32 class and pointwise NCDHW layers (M-major boxes) keep
  // positions as M.
  Conv3dDesc dec = test::make(2, 128, {32, 32, 32}, 64, {3, 3, 3}, 1, 1);
  dec.dtype = DataType::Float16;
  CHECK(plan_family(dec, "sm_90") == "gemm_sm90");
  CHECK(plan_of(dec).key.field("rowbox") == 1);
  for (const int c : {48, 96}) {
    Conv3dDesc d = dec;
    d.c = c;
    DYNAMIC_SECTION("C = " << c) {
      const detail::Plan plan = plan_of(d);
      CHECK(plan.key.field("pn") == 128);
      CHECK(plan.key.field("stages") == 3);
      CHECK(plan.key.field("chunk") == 64);
    }
  }
  Conv3dDesc c64 = dec, k96 = dec, grouped = dec, small = dec, tf32 = dec, pointwise = dec;
  c64.c = 64;
  k96.k = 96;
  grouped.groups = 2;
  small.d = small.h = small.w = 16;
  tf32.dtype = DataType::Float32;
  tf32.precision = Precision::Tf32;
  tf32.layout = Layout::NDHWC;
  pointwise.kernel = {1, 1, 1};
  pointwise.padding = 0;
  for (const Conv3dDesc& d : {c64, k96, grouped, small, tf32, pointwise}) {
    DYNAMIC_SECTION("positions as M: " << describe(d)) {
      const detail::Plan plan = plan_of(d);
      if (plan_family(d, "sm_90") == "igemm_sm90_half") CHECK(plan.key.field("pn") == 0);
    }
  }
  // Forced: BN 64, pn 128 or 256 dividing BM of 128 or 256, K-major 16-bit operands, pn 128 at most
  // where float32 outputs keep blocked sums.
  CHECK(plan_of(enc, "igemm_sm90_half:128,64,3,1,0,32,128").block == 128u);
  CHECK(plan_of(enc, "igemm_sm90_half:256,64,3,1,0,32,256").block == 128u);
  CHECK_THROWS_AS(plan_of(enc, "igemm_sm90_half:128,128,3,1,0,32,128"), Error);
  CHECK_THROWS_AS(plan_of(enc, "igemm_sm90_half:128,64,3,1,0,32,256"), Error);
  CHECK_THROWS_AS(plan_of(enc, "igemm_sm90_half:256,64,3,1,0,32,64"), Error);
  CHECK_THROWS_AS(plan_of(pointwise, "igemm_sm90_half:256,64,3,0,1,64,128"), Error);
  CHECK_NOTHROW(plan_of(pointwise, "igemm_sm90_half:256,64,3,0,0,64,128"));
  CHECK_THROWS_AS(plan_of(tf32, "igemm_sm90_half:256,64,3,1,0,32,128"), Error);
  Conv3dDesc blocked = dec;
  blocked.fp32_output = true;
  CHECK_NOTHROW(plan_of(blocked, "igemm_sm90_half:256,64,3,1,0,64,128"));
  CHECK_THROWS_AS(plan_of(blocked, "igemm_sm90_half:256,64,3,1,0,64,256"), Error);
  // They compile without spills or serialised wgmmas: both layouts, one warpgroup of 256, the
  // threads' copies (and the unaligned twin), blocked sums, an epilogue with a residual.
  Conv3dDesc epi = enc;
  epi.epilogue.activation = Activation::Silu;
  epi.epilogue.residual = true;
  Conv3dDesc epi_ncdhw = epi;
  epi_ncdhw.layout = Layout::NCDHW;
  Conv3dDesc dec96 = dec;  // (the decoder's own 128 channels run gemm_sm90's row boxes)
  dec96.c = 96;
  const std::pair<Conv3dDesc, const char*> kernels[] = {
      {enc, ""},
      {enc, "igemm_sm90_half:256,64,4,1,0,32,256"},
      {enc, "igemm_sm90_half:256,64,4,0,0,32,128"},
      {dec96, ""},
      {blocked, ""},
      {epi, ""},
      {epi_ncdhw, "igemm_sm90_half:256,64,3,1,0,32,256"},
  };
  for (const auto& [d, config] : kernels) {
    DYNAMIC_SECTION("compiles: " << describe(d) << " " << config) {
      check_compiles_clean(test::ptxas_report(d, "sm_90", config));
    }
  }
}
