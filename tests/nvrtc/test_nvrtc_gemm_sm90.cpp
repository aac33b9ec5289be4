// NVRTC, no GPU: pointwise bf16 / fp16 layers (1 x 1 x 1, unit strides, no padding, one group,
// C a multiple of 8, NCDHW also D·H·W) plan to gemm_sm90 on sm_90 (the planner's choice from 32
// input channels and 65 output channels, NDHWC from 97, without a residual; 256-channel tiles
// from 1024 output channels) with the tile width whose rounds cost least, one persistent block
// an SM and igemm_sm90_half's twin for inputs off 16 bytes; NDHWC layers as one GEMM of the
// batch's rows; float32 ones in the tf32 class when forced or tuned (igemm_sm90's twin for NCDHW,
// igemm_sm90_half's for NDHWC); NDHWC bf16 / fp16 layers of any window, stride, dilation and zero
// padding through im2col boxes when forced or tuned; it refuses every other layer; every width, both output types and
// epilogues with a residual compile for sm_90a without spills.
#include <set>
#include <string>

#include "catch.hpp"
#include "config_cases.hpp"
#include "conv3djit/error.hpp"
#include "core/problem.hpp"
#include "gemm_sm90/geometry.cuh"
#include "plan/plan.hpp"
#include "ptxas_report.hpp"
#include "tune/candidates.hpp"

using namespace conv3djit;

namespace {

Conv3dDesc typed(Conv3dDesc d, DataType type = DataType::BFloat16, bool fp32_output = false) {
  d.dtype = type;
  d.fp32_output = fp32_output;
  return d;
}

detail::Plan plan_of(const Conv3dDesc& d, const std::string& forced = "") {
  return detail::make_plan(detail::make_problem(d), detail::limits_for_arch("sm_90"), forced);
}

// c's kernel under `forced` is named from `prefix` and compiles for sm_90a without spills or
// serialised wgmmas (ptxas C751x).
void check_compiles_clean(const Conv3dDesc& c, const char* forced, const char* prefix) {
  const test::PtxasReport r = test::ptxas_report(c, "sm_90", forced);
  INFO(r.kernel << "\n" << r.log);
  CHECK(r.kernel.rfind(prefix, 0) == 0);
  test::check_no_spills(r);
  CHECK(r.log.find("C751") == std::string::npos);
}

std::string family_of(const detail::Plan& plan) {
  const std::string text = detail::canonical_text(plan.key);
  return text.substr(0, text.find(' '));
}

}  // namespace

TEST_CASE("gemm_sm90: which layers it takes") {
  const Conv3dDesc pointwise_512 = typed(test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}));
  const detail::Plan p = plan_of(pointwise_512);
  CHECK(family_of(p) == "gemm_sm90");
  CHECK(p.key.field("bm") == 256);  // 2048 output channels: tiles of 256
  CHECK(plan_of(pointwise_512, "gemm_sm90").key.field("bm") == 256);
  CHECK(plan_of(pointwise_512, "gemm_sm90:bm=128,bn=112").key.field("bm") == 128);
  CHECK(plan_of(pointwise_512, "gemm_sm90:bm=128,bn=112,split=1").key.field("split") == 1);
  const Conv3dDesc pointwise_128 = typed(test::make(8, 128, {16, 56, 56}, 128, {1, 1, 1}));
  CHECK(family_of(plan_of(pointwise_128)) == "gemm_sm90");
  CHECK(plan_of(pointwise_128).key.field("bm") == 128);
  // 64 output channels (half a tile) and residual epilogues stay on igemm_sm90_half.
  CHECK(family_of(plan_of(typed(test::make(8, 192, {8, 28, 28}, 64, {1, 1, 1})))) == "igemm_sm90_half");
  Conv3dDesc with_residual = pointwise_128;
  with_residual.epilogue.residual = true;
  CHECK(family_of(plan_of(with_residual)) == "igemm_sm90_half");
  CHECK(family_of(plan_of(with_residual, "gemm_sm90")) == "gemm_sm90");
  CHECK(p.block == 384u);
  CHECK(p.grid == 132u);  // one block an SM, each walking its tiles
  CHECK_FALSE(p.input_copy);
  CHECK_FALSE(p.prep);
  CHECK(p.weight_map);
  // 784 positions an image: 7 tiles of 112, none partial.
  CHECK(p.key.field("bn") == 112);
  CHECK(p.shared_bytes == static_cast<unsigned>(gemm_sm90_geometry::shared_bytes(256, 112, p.key.field("stages"), 2)));
  CHECK(p.shared_bytes <= 227u * 1024u);
  // An input off 16 bytes runs igemm_sm90_half's twin (its channels-last copy).
  REQUIRE(p.unaligned);
  CHECK(family_of(*p.unaligned) == "igemm_sm90_half");
  CHECK(p.unaligned->input_copy);
  // Fewer tiles than SMs: a block each.
  CHECK(plan_of(typed(test::make(1, 64, {2, 4, 8}, 64, {1, 1, 1})), "gemm_sm90").grid == 1u);
  // fp16, float32 outputs, an epilogue with a residual.
  Conv3dDesc e = typed(test::make(2, 256, {4, 8, 8}, 256, {1, 1, 1}, 1, 0, 1, 1, true), DataType::Float16, true);
  e.epilogue.activation = Activation::Silu;
  e.epilogue.residual = true;
  CHECK(family_of(plan_of(e, "gemm_sm90")) == "gemm_sm90");

  // Strided, padded, D·H·W % 8 != 0 and windowed layers: im2col boxes of a channels-last copy.
  for (const Conv3dDesc& d : {
           typed(test::make(2, 64, {4, 8, 8}, 64, {1, 1, 1}, {1, 2, 2})),
           typed(test::make(2, 64, {4, 8, 8}, 64, {1, 1, 1}, 1, 1)),
           typed(test::make(2, 64, {3, 7, 5}, 64, {1, 1, 1})),
           typed(test::make(2, 64, {4, 8, 8}, 64, {3, 1, 1}, 1, Dims3{1, 0, 0})),
       }) {
    DYNAMIC_SECTION(describe(d)) {
      CHECK(family_of(plan_of(d)) != "gemm_sm90");  // the planner's: not measured yet
      const detail::Plan boxed = plan_of(d, "gemm_sm90");
      CHECK(boxed.key.field("im2col") == 1);
      CHECK(boxed.input_copy);
      CHECK(static_cast<bool>(boxed.prep) == (d.kernel.d > 1));  // (kd, kh, kw, c) rows of several taps
      CHECK_FALSE(boxed.unaligned);  // the map reads the copy
    }
  }
  for (const Conv3dDesc& d : {
           typed(test::make(2, 64, {4, 8, 8}, 64, {1, 1, 1}, 1, 0, 1, 2)),           // grouped
           typed(test::make(2, 2048, {4, 8, 8}, 64, {1, 1, 1}), DataType::BFloat16, true),  // long, float32 out
           test::make(2, 64, {4, 8, 8}, 64, {1, 1, 1}),                              // float32
       }) {
    DYNAMIC_SECTION(describe(d)) { CHECK_THROWS_AS(plan_of(d, "gemm_sm90"), Error); }
  }
}

TEST_CASE("gemm_sm90: NDHWC layers as one GEMM of the batch's rows, forced or tuned") {
  for (const bool tf32 : {false, true}) {
    Conv3dDesc d = typed(test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}));
    if (tf32) {
      d.dtype = DataType::Float32;
      d.precision = Precision::Tf32;
    }
    d.layout = Layout::NDHWC;
    DYNAMIC_SECTION(describe(d)) {
      // The planner's: gemm_sm90 for 16-bit types, igemm_sm90_half for the tf32 class.
      CHECK(family_of(plan_of(d)) == (tf32 ? "igemm_sm90_half" : "gemm_sm90"));
      const detail::Plan p = plan_of(d, "gemm_sm90");
      CHECK(family_of(p) == "gemm_sm90");
      CHECK(p.key.field("bm") == 256);
      CHECK(p.key.field("bn") == 128);
      CHECK(p.grid == 132u);
      REQUIRE(p.unaligned);
      CHECK(family_of(*p.unaligned) == "igemm_sm90_half");
      CHECK(plan_of(d, "gemm_sm90:128,256").key.field("bn") == 256);  // two m64 blocks a warpgroup
      CHECK_THROWS_AS(plan_of(d, "gemm_sm90:256,256"), Error);
      CHECK_THROWS_AS(plan_of(d, "gemm_sm90:128,112"), Error);
      CHECK_THROWS_AS(plan_of(d, "gemm_sm90:bm=128,bn=128,split=1"), Error);
      // NDHWC needs no D·H·W multiple of 8: the positions are rows.
      Conv3dDesc odd = d;
      odd.d = 3, odd.h = 7, odd.w = 5;
      CHECK(family_of(plan_of(odd, "gemm_sm90")) == "gemm_sm90");
      // 16-bit outputs with a residual: tiles of 128 channels (one set of 128 accumulators spilled).
      Conv3dDesc res = d;
      res.epilogue.residual = true;
      CHECK(plan_of(res, "gemm_sm90").key.field("bm") == (tf32 ? 256 : 128));
      CHECK(family_of(plan_of(res)) == "igemm_sm90_half");  // the planner's for a residual
      // 96 output channels (three quarters of a tile) stay on igemm_sm90_half; 128 take this kernel.
      Conv3dDesc narrow = d;
      narrow.k = 96;
      CHECK(family_of(plan_of(narrow)) == "igemm_sm90_half");
      narrow.k = 128;
      CHECK(family_of(plan_of(narrow)) == (tf32 ? "igemm_sm90_half" : "gemm_sm90"));
    }
  }
  // Every tile and the heaviest epilogues compile without spills or serialised wgmmas.
  for (const DataType type : {DataType::BFloat16, DataType::Float32}) {
    for (const char* forced : {"gemm_sm90:128,128", "gemm_sm90:128,256", "gemm_sm90:256,128"}) {
      Conv3dDesc c = test::make(2, 72, {3, 5, 7}, 100, {1, 1, 1}, 1, 0, 1, 1, true);
      c.layout = Layout::NDHWC;
      c.dtype = type;
      if (type == DataType::Float32) c.precision = Precision::Tf32;
      const bool wide = std::string(forced) == "gemm_sm90:256,128";
      c.epilogue = test::epilogue_cases()[wide && type != DataType::Float32 ? 4 : 3];  // GELU (tanh), scaled, (residual)
      DYNAMIC_SECTION(forced << " " << describe(c)) {
        check_compiles_clean(c, forced, "gemm_sm90 ");
      }
    }
  }
}

TEST_CASE("gemm_sm90: NDHWC bf16 / fp16 layers of any window through im2col boxes, forced or tuned") {
  Conv3dDesc d = typed(test::make(1, 512, {17, 66, 66}, 512, {3, 3, 3}, 1, Dims3{0, 1, 1}, 1, 1, true));
  d.layout = Layout::NDHWC;
  // The planner's: 4 rounds of 128 x 256 tiles an SM or more, output channels whole 128-channel
  // tiles (up to 512); igemm_sm90_half's for fewer tiles, other channel counts and a residual.
  const detail::Plan chosen = plan_of(d);
  CHECK(family_of(chosen) == "gemm_sm90");
  CHECK(chosen.key.field("bn") == 256);
  CHECK(chosen.key.field("im2col") == 1);
  Conv3dDesc few = d;
  few.d = 9;  // 7 output planes: 4 x 120 tiles of 128 x 256, 3.6 rounds of 132
  CHECK(family_of(plan_of(few)) == "igemm_sm90_half");
  few.d = 10;  // 8: 4 x 137 tiles
  CHECK(family_of(plan_of(few)) == "gemm_sm90");
  Conv3dDesc other_k = d;
  other_k.k = 320;
  CHECK(family_of(plan_of(other_k)) == "igemm_sm90_half");
  Conv3dDesc with_residual = d;
  with_residual.epilogue.residual = true;
  CHECK(family_of(plan_of(with_residual)) == "igemm_sm90_half");
  const detail::Plan p = plan_of(d, "gemm_sm90:128,256");
  CHECK(family_of(p) == "gemm_sm90");
  CHECK(p.key.field("im2col") == 1);  // the default where the layer is no GEMM
  CHECK(p.grid == 132u);
  CHECK_FALSE(p.prep);  // the NDHWC weight's rows are (kd, kh, kw, c) as it is
  CHECK_FALSE(p.input_copy);
  REQUIRE(p.unaligned);
  CHECK(family_of(*p.unaligned) == "igemm_sm90_half");
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:bm=128,bn=256,im2col=0"), Error);  // tiled boxes: GEMMs only
  // A GEMM through im2col boxes too, when forced; tiled by default.
  Conv3dDesc pointwise = typed(test::make(2, 64, {4, 8, 8}, 128, {1, 1, 1}));
  pointwise.layout = Layout::NDHWC;
  CHECK(plan_of(pointwise, "gemm_sm90").key.field("im2col") == 0);
  CHECK(plan_of(pointwise, "gemm_sm90:bm=128,bn=128,im2col=1").key.field("im2col") == 1);
  // Strides, dilations, per-side padding; tuning offers it.
  Conv3dDesc strided = typed(test::make(2, 72, {6, 10, 13}, 99, {3, 3, 3}, {2, 2, 2}, Padding::per_side({2, 1, 0}, {0, 1, 2}),
                                        {1, 2, 1}));
  strided.layout = Layout::NDHWC;
  CHECK(plan_of(strided, "gemm_sm90").key.field("im2col") == 1);
  int ours = 0;
  for (const detail::Candidate& c :
       detail::tuning_candidates(detail::make_problem(d), detail::limits_for_arch("sm_90"), 24)) {
    ours += family_of(c.plan) == "gemm_sm90";
  }
  CHECK(ours >= 2);
  // Layers its boxes cannot read: the tf32 class, other padding modes, strides past 8,
  // groups, C off 8, and float32 outputs of reductions past 1024 terms.
  // NCDHW: the same boxes of a channels-last copy (the input's every call, the weight's once), no
  // twin; 64-channel tiles a warpgroup's whole (split) too.
  Conv3dDesc ncdhw = d;
  ncdhw.layout = Layout::NCDHW;
  CHECK(family_of(plan_of(ncdhw)) == "igemm_sm90_half");  // NCDHW: the planner's for C <= 64 and K >= 128 only
  Conv3dDesc narrow = typed(test::make(1, 48, {16, 128, 192}, 128, {3, 3, 3}, 1, Dims3{0, 1, 1}, 1, 1, true));
  CHECK(family_of(plan_of(narrow)) == "gemm_sm90");
  Conv3dDesc small = narrow;
  small.d = 4;  // 2 output planes of 128 x 192: 192 tiles, under 3 rounds
  CHECK(family_of(plan_of(small)) == "igemm_sm90_half");
  narrow.k = 64;
  CHECK(family_of(plan_of(narrow)) == "igemm_sm90_half");
  const detail::Plan copied = plan_of(ncdhw, "gemm_sm90:128,256");
  CHECK(copied.key.field("im2col") == 1);
  CHECK(copied.input_copy);
  CHECK(copied.prep);
  CHECK_FALSE(copied.unaligned);
  CHECK(plan_of(ncdhw, "gemm_sm90:bm=64,bn=256,split=1").key.field("bm") == 64);
  CHECK_THROWS_AS(plan_of(ncdhw, "gemm_sm90:bm=64,bn=256"), Error);  // 64 channels: split only
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:bm=64,bn=256,split=1"), Error);  // NDHWC does not split
  Conv3dDesc tf32 = d;
  tf32.dtype = DataType::Float32;
  tf32.precision = Precision::Tf32;
  Conv3dDesc reflect = d;
  reflect.padding_mode = PaddingMode::Reflect;
  Conv3dDesc far = typed(test::make(1, 64, {4, 40, 40}, 128, {1, 3, 3}, {1, 9, 9}));
  far.layout = Layout::NDHWC;
  Conv3dDesc grouped = typed(test::make(1, 64, {4, 8, 8}, 128, {3, 3, 3}, 1, 1, 1, 2));
  grouped.layout = Layout::NDHWC;
  Conv3dDesc odd = typed(test::make(1, 36, {4, 8, 8}, 128, {3, 3, 3}, 1, 1));
  odd.layout = Layout::NDHWC;
  Conv3dDesc long_fp32 = typed(test::make(1, 40, {4, 8, 8}, 128, {3, 3, 3}, 1, 1), DataType::BFloat16, true);
  long_fp32.layout = Layout::NDHWC;  // 1080 terms
  for (const Conv3dDesc& bad : {tf32, reflect, far, grouped, odd, long_fp32}) {
    DYNAMIC_SECTION(describe(bad)) { CHECK_THROWS_AS(plan_of(bad, "gemm_sm90"), Error); }
  }
  // An NDHWC image of 2^31 elements or more (a video VAE's full-resolution layer), which
  // igemm_sm90_half refuses: this kernel's boxes take it whatever its channels, with direct's plan
  // for an input off 16 bytes; NCDHW ones stay refused.
  Conv3dDesc huge = typed(test::make(1, 128, {33, 720, 1280}, 96, {3, 3, 3}, 1, 1, 1, 1, true));
  huge.layout = Layout::NDHWC;
  huge.epilogue.residual = true;
  CHECK(family_of(plan_of(huge)) == "gemm_sm90");
  huge.k = 128;
  huge.epilogue.residual = false;
  const detail::Plan big = plan_of(huge, "gemm_sm90");
  CHECK(big.key.field("im2col") == 1);
  REQUIRE(big.unaligned);
  CHECK(family_of(*big.unaligned) == "direct");
  Conv3dDesc huge_pointwise = huge;
  huge_pointwise.kernel = {1, 1, 1};
  huge_pointwise.padding = 0;
  CHECK(family_of(plan_of(huge_pointwise)) == "gemm_sm90");  // the planner's pointwise choice, any image
  CHECK(plan_of(huge_pointwise).key.field("im2col") == 0);
  Conv3dDesc huge_ncdhw = huge_pointwise;
  huge_ncdhw.layout = Layout::NCDHW;
  CHECK_THROWS_AS(plan_of(huge_ncdhw, "gemm_sm90"), Error);
  Conv3dDesc short_fp32 = long_fp32;
  short_fp32.c = 32;  // 864 terms
  CHECK(family_of(plan_of(short_fp32, "gemm_sm90")) == "gemm_sm90");
  // Every tile, with the heaviest epilogues, compiles without spills or serialised wgmmas.
  for (const char* forced : {"gemm_sm90:128,128", "gemm_sm90:128,256", "gemm_sm90:256,128",
                             "gemm_sm90:bm=64,bn=256,split=1", "gemm_sm90:bm=128,bn=128,split=1", "gemm_sm90:bm=64,bn=128,split=1"}) {
    Conv3dDesc c = typed(test::make(2, 72, {5, 9, 11}, 100, {3, 3, 3}, {1, 2, 1}, 1, {2, 1, 1}, 1, true));
    const bool split = std::string(forced).find("split") != std::string::npos;
    c.layout = split || std::string(forced) == "gemm_sm90:128,256" ? Layout::NCDHW : Layout::NDHWC;
    c.epilogue = test::epilogue_cases()[std::string(forced) == "gemm_sm90:256,128" || split ? 4 : 3];
    DYNAMIC_SECTION(forced << " " << describe(c)) {
      check_compiles_clean(c, forced, "gemm_sm90 ");
    }
  }
}

TEST_CASE("gemm_sm90: row boxes, a kernel row's taps on one im2col box") {
  Conv3dDesc d = typed(test::make(2, 72, {5, 9, 11}, 100, {3, 3, 3}, 1, 1, {1, 1, 2}, 1, true));
  d.layout = Layout::NDHWC;
  const detail::Plan p = plan_of(d, "gemm_sm90:bm=128,bn=256,rowbox=1");
  CHECK(p.key.field("rowbox") == 1);
  // A stage: 3 weight boxes of 128 rows and 256 + (3 - 1)·2 input rows (in whole 8-row groups).
  CHECK(p.key.field("stages") == 2);
  CHECK(p.shared_bytes == 2 * (3 * 128 + 264) * 128 + 1024 + 16 * 8 + 16);
  // Output rows of OW + (3 - 1)·2 = 9 + 4: 2 x 5 x 9 x 13 positions, 5 tiles of 256.
  CHECK(p.grid == 5u);
  CHECK(plan_of(d, "gemm_sm90:bm=128,bn=256").key.field("rowbox") == 0);  // the default
  // The stores' map of positions to outputs: every output once, in order, and each row's overhang none.
  for (const int ow : {1, 9, 11, 58}) {
    for (const int extra : {1, 2, 4, 6}) {
      long long next = 0;
      int wrong = 0;
      for (int v = 0; v < 3 * (ow + extra); ++v) {
        const long long output = gemm_sm90_geometry::row_box_output(v, ow, extra);
        wrong += output != (v % (ow + extra) < ow ? next++ : -1);
      }
      CHECK(wrong == 0);
      CHECK(next == 3 * ow);
    }
  }
  Conv3dDesc ncdhw = d;
  ncdhw.layout = Layout::NCDHW;
  CHECK(plan_of(ncdhw, "gemm_sm90:bm=64,bn=192,split=1,rowbox=1").key.field("stages") == 4);
  // Refused: a stride along W (tap kw's origins are no rows of the box), a residual (its reads are
  // not mapped past the overhang), a kernel row of one tap, a 7-tap row whose weight boxes leave no
  // room for two stages.
  Conv3dDesc strided = d;
  strided.stride = {1, 1, 2};
  Conv3dDesc residual = d;
  residual.epilogue.residual = true;
  Conv3dDesc temporal = typed(test::make(1, 96, {3, 20, 24}, 192, {3, 1, 1}, 1, Dims3{1, 0, 0}, 1, 1, true));
  temporal.layout = Layout::NDHWC;
  Conv3dDesc wide = typed(test::make(2, 64, {16, 56, 56}, 64, {3, 1, 7}, 1, Dims3{1, 0, 3}));
  for (const Conv3dDesc& bad : {strided, residual, temporal}) {
    DYNAMIC_SECTION(describe(bad)) { CHECK_THROWS_AS(plan_of(bad, "gemm_sm90:bm=128,bn=128,rowbox=1"), Error); }
  }
  CHECK_THROWS_AS(plan_of(wide, "gemm_sm90:bm=64,bn=128,split=1,rowbox=1"), Error);
  // Both layouts and output types, the heaviest epilogue without a residual (the tanh GELU, scaled).
  for (const char* forced : {"gemm_sm90:bm=128,bn=256,rowbox=1", "gemm_sm90:bm=64,bn=192,split=1,rowbox=1",
                             "gemm_sm90:bm=128,bn=128,rowbox=1"}) {
    for (const bool fp32_output : {false, true}) {
      // (C = 32 for float32 outputs: at most 1024 terms.)
      Conv3dDesc c = typed(test::make(2, fp32_output ? 32 : 72, {5, 9, 11}, 100, {3, 3, 3}, 1, 1, {1, 1, 2}, 1, true),
                           fp32_output ? DataType::Float16 : DataType::BFloat16, fp32_output);
      c.layout = std::string(forced).find("split") != std::string::npos ? Layout::NCDHW : Layout::NDHWC;
      c.epilogue = test::epilogue_cases()[4];
      DYNAMIC_SECTION(forced << " " << describe(c)) { check_compiles_clean(c, forced, "gemm_sm90 "); }
    }
  }
}

TEST_CASE("gemm_sm90: chunks of 32 and 16 channels for im2col boxes") {
  Conv3dDesc d = typed(test::make(1, 48, {16, 128, 192}, 128, {3, 3, 3}, 1, Dims3{0, 1, 1}, 1, 1, true));
  d.layout = Layout::NDHWC;
  CHECK(plan_of(d, "gemm_sm90:bm=128,bn=256").key.field("chunk") == 64);  // the default: a 128-byte row
  // A stage of 64-byte rows: 128 weight rows and 256 input rows; of 32-byte rows with row boxes:
  // 3 x 128 weight rows and 256 + 2 input rows, in whole 1024 bytes (20 544 -> 21 504).
  const detail::Plan half = plan_of(d, "gemm_sm90:bm=128,bn=256,chunk=32");
  CHECK(half.key.field("chunk") == 32);
  CHECK(half.key.field("stages") == 8);
  CHECK(half.shared_bytes == 8 * (128 + 256) * 64 + 1024 + 16 * 8 + 16);
  const detail::Plan rows = plan_of(d, "gemm_sm90:bm=128,bn=256,rowbox=1,chunk=16");
  CHECK(rows.shared_bytes == static_cast<unsigned>(rows.key.field("stages") * 21504 + 1024 + 16 * 8 + 16));
  // Tuning offers chunks of 32 and the snug 16 (48 channels) beside the 128-byte row's.
  std::set<int> offered;
  for (const detail::Candidate& c :
       detail::tuning_candidates(detail::make_problem(d), detail::limits_for_arch("sm_90"), 32)) {
    if (family_of(c.plan) == "gemm_sm90") offered.insert(c.plan.key.field("chunk"));
  }
  CHECK(offered == std::set<int>{16, 32, 64});
  // The planner's: NDHWC layers of 32 to 160 channels off whole 64s into 96 to 192, with kernel rows
  // and 4 rounds of tiles, take 128 x 256 row boxes in 32-channel chunks; the family alone forced
  // is the planner's choice, named fields the optional ones' defaults.
  CHECK(detail::canonical_text(plan_of(d).key) == detail::canonical_text(plan_of(d, "gemm_sm90:bm=128,bn=256,rowbox=1,chunk=32").key));
  CHECK(plan_of(d, "gemm_sm90").key.field("chunk") == 32);
  CHECK(plan_of(d, "gemm_sm90:bm=128,bn=256").key.field("rowbox") == 0);
  const Conv3dDesc decoder = typed(test::make(2, 128, {8, 16, 16}, 64, {3, 3, 3}, 1, 1));  // the planner's split row boxes
  CHECK(plan_of(decoder).key.field("split") == 1);
  CHECK(plan_of(decoder, "gemm_sm90:bm=128,bn=256").key.field("split") == 0);
  CHECK(plan_of(decoder, "gemm_sm90:bm=128,bn=256").key.field("rowbox") == 0);
  Conv3dDesc into96 = d;
  into96.c = 96;
  into96.k = 96;  // (NDHWC K <= 96 is declined otherwise)
  CHECK(plan_of(into96).key.field("chunk") == 32);
  for (const auto& [c, k] : {std::pair{128, 128}, std::pair{48, 256}, std::pair{48, 64}, std::pair{24, 128}}) {
    Conv3dDesc other = d;
    other.c = c;
    other.k = k;
    DYNAMIC_SECTION("C = " << c << ", K = " << k) {
      const detail::Plan p = plan_of(other);
      CHECK(!(family_of(p) == "gemm_sm90" && p.key.field("chunk") == 32));
    }
  }
  Conv3dDesc ncdhw = d;
  ncdhw.layout = Layout::NCDHW;  // (measured 0.89x there)
  CHECK(plan_of(ncdhw).key.field("chunk") == 64);
  Conv3dDesc few = d;
  few.d = 4;  // 2 output planes: under 4 rounds of tiles
  CHECK(!(family_of(plan_of(few)) == "gemm_sm90" && plan_of(few).key.field("chunk") == 32));
  // Refused: other chunks, narrower chunks of tiled boxes (a GEMM) or of the tf32 class.
  for (const char* bad : {"gemm_sm90:bm=128,bn=256,chunk=8", "gemm_sm90:bm=128,bn=256,chunk=48",
                          "gemm_sm90:bm=128,bn=256,chunk=128"}) {
    DYNAMIC_SECTION(bad) { CHECK_THROWS_AS(plan_of(d, bad), Error); }
  }
  Conv3dDesc pointwise = typed(test::make(2, 64, {4, 8, 8}, 128, {1, 1, 1}));
  CHECK_THROWS_AS(plan_of(pointwise, "gemm_sm90:bm=128,bn=128,chunk=32"), Error);
  Conv3dDesc tf32 = pointwise;
  tf32.dtype = DataType::Float32;
  tf32.precision = Precision::Tf32;
  CHECK(plan_of(tf32, "gemm_sm90").key.field("chunk") == 32);  // a 128-byte row of floats
  CHECK_THROWS_AS(plan_of(tf32, "gemm_sm90:bm=128,bn=128,chunk=16"), Error);
  // Both layouts, both chunks, with and without row boxes, the heaviest epilogue without a residual.
  for (const char* forced : {"gemm_sm90:bm=128,bn=256,chunk=32", "gemm_sm90:bm=128,bn=256,rowbox=1,chunk=16",
                             "gemm_sm90:bm=64,bn=256,split=1,rowbox=1,chunk=32", "gemm_sm90:bm=128,bn=256,chunk=16"}) {
    Conv3dDesc c = typed(test::make(2, 40, {5, 9, 11}, 100, {3, 3, 3}, 1, 1, {1, 1, 2}, 1, true));
    c.layout = std::string(forced).find("split") != std::string::npos || std::string(forced).find("rowbox") == std::string::npos
                   ? Layout::NCDHW
                   : Layout::NDHWC;
    c.epilogue = test::epilogue_cases()[4];
    DYNAMIC_SECTION(forced << " " << describe(c)) { check_compiles_clean(c, forced, "gemm_sm90 "); }
  }
}

TEST_CASE("gemm_sm90: float32 layers in the tf32 class, forced or tuned") {
  Conv3dDesc d = test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1});
  d.precision = Precision::Tf32;
  CHECK(family_of(plan_of(d)) == "igemm_sm90");  // the planner's: the tf32 form ran 0.86-1.01x it
  const detail::Plan p = plan_of(d, "gemm_sm90");
  CHECK(family_of(p) == "gemm_sm90");
  CHECK(p.key.field("bm") == 256);
  CHECK(p.key.field("bn") == 128);  // tf32 tiles: 64 positions a consumer warpgroup
  CHECK(p.shared_bytes == static_cast<unsigned>(gemm_sm90_geometry::shared_bytes(256, 128, p.key.field("stages"), 4)));
  CHECK(p.shared_bytes <= 227u * 1024u);
  REQUIRE(p.unaligned);
  CHECK(family_of(*p.unaligned) == "igemm_sm90");
  CHECK(plan_of(d, "gemm_sm90:128,128").key.field("stages") == 7);  // 32 KB stages
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:128,256"), Error);
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:128,112"), Error);
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:bm=128,bn=128,split=1"), Error);
  Conv3dDesc fp32 = d;
  fp32.precision = Precision::Fp32;  // 3xTF32's class: not this kernel's
  CHECK_THROWS_AS(plan_of(fp32, "gemm_sm90"), Error);
  Conv3dDesc ndhwc = d;
  ndhwc.layout = Layout::NDHWC;
  CHECK(family_of(*plan_of(ndhwc, "gemm_sm90").unaligned) == "igemm_sm90_half");  // NDHWC's twin
  int ours = 0;
  for (const detail::Candidate& c :
       detail::tuning_candidates(detail::make_problem(d), detail::limits_for_arch("sm_90"), 24)) {
    ours += family_of(c.plan) == "gemm_sm90";
  }
  CHECK(ours == 2);  // BM 256 and 128
  // Every tile and the heaviest epilogue compile without spills or serialised wgmmas.
  for (const char* forced : {"gemm_sm90:128,128", "gemm_sm90:256,128"}) {
    for (const bool heavy : {false, true}) {
      Conv3dDesc c = test::make(2, 72, {3, 5, 8}, 100, {1, 1, 1}, 1, 0, 1, 1, true);
      c.precision = Precision::Tf32;
      if (heavy) c.epilogue = test::epilogue_cases()[3];  // GELU, scaled, with the residual
      DYNAMIC_SECTION(forced << " " << describe(c)) {
        check_compiles_clean(c, forced, "gemm_sm90 fp32 ");
      }
    }
  }
}

TEST_CASE("gemm_sm90: tuning times its tiles beside the planner's, each replayed by its configuration text") {
  const Conv3dDesc d = typed(test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}));
  const detail::Problem prob = detail::make_problem(d);
  const detail::DeviceLimits sm90 = detail::limits_for_arch("sm_90");
  int ours = 0;
  for (const detail::Candidate& c : detail::tuning_candidates(prob, sm90, 24)) {
    if (family_of(c.plan) != "gemm_sm90") continue;
    ++ours;
    INFO(c.config);
    CHECK(detail::same_launch(detail::make_plan(prob, sm90, c.config), c.plan));
    // Every one's accumulators fit: 128 a consumer thread at most.
    const int rows = c.plan.key.field("split") == 1 ? c.plan.key.field("bm") : c.plan.key.field("bm") / 2;
    CHECK(rows / 64 * c.plan.key.field("bn") <= 256);
  }
  CHECK(ours >= 3);  // its choice, BM 256, split and the other tiles
}

TEST_CASE("gemm_sm90: forced widths and rings") {
  const Conv3dDesc d = typed(test::make(2, 72, {3, 5, 8}, 100, {1, 1, 1}));
  CHECK(plan_of(d, "gemm_sm90:128,192").key.field("bn") == 192);
  CHECK(plan_of(d, "gemm_sm90:128,64,2").key.field("stages") == 2);
  CHECK(plan_of(d, "gemm_sm90:128,256").key.field("stages") == 4);  // 48 KB stages
  CHECK(plan_of(d, "gemm_sm90:256,128").key.field("stages") == 4);  // 48 KB stages
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:256,192"), Error);  // 192 accumulators a thread
  CHECK(plan_of(d, "gemm_sm90:bm=128,bn=112,split=1").key.field("split") == 1);
  // Split: a half of the ring a warpgroup, at least two stages each.
  CHECK(plan_of(d, "gemm_sm90:bm=128,bn=112,split=1").key.field("stages") == 6);
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:bm=128,bn=112,stages=5,split=1"), Error);
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:bm=128,bn=112,stages=2,split=1"), Error);
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:bm=128,bn=192,split=1"), Error);  // 192 accumulators a thread
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:bm=256,bn=64,split=1"), Error);
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:192,128"), Error);
  // A set of 128 accumulators with 16-bit outputs of the erf GELU, no residual: spills (two of
  // 64 do not).
  Conv3dDesc gelu = d;
  gelu.epilogue.activation = Activation::Gelu;
  CHECK_THROWS_AS(plan_of(gelu, "gemm_sm90:128,256"), Error);
  CHECK(plan_of(gelu, "gemm_sm90:256,128").key.field("bn") == 128);
  CHECK(plan_of(typed(test::make(8, 128, {16, 56, 56}, 128, {1, 1, 1})), "gemm_sm90").key.field("bn") == 256);
  gelu = typed(test::make(8, 128, {16, 56, 56}, 128, {1, 1, 1}));
  gelu.epilogue.activation = Activation::Gelu;
  CHECK(plan_of(gelu, "gemm_sm90").key.field("bn") <= 192);
  // Forced past the heuristic's C >= 32 and K >= 64, never past its rules.
  CHECK(family_of(plan_of(typed(test::make(1, 8, {4, 4, 4}, 24, {1, 1, 1})), "gemm_sm90")) == "gemm_sm90");
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:128,80"), Error);
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:128,128,1"), Error);
  CHECK_THROWS_AS(plan_of(d, "gemm_sm90:128,256,6"), Error);  // past the shared memory
  // D·H·W off 8: im2col boxes of the channels-last copy, in whole boxes of 64 rows.
  const Conv3dDesc odd = typed(test::make(2, 64, {3, 7, 5}, 64, {1, 1, 1}));
  CHECK(plan_of(odd, "gemm_sm90").key.field("im2col") == 1);
  CHECK(plan_of(odd, "gemm_sm90").key.field("bn") % 64 == 0);
  CHECK_THROWS_AS(plan_of(odd, "gemm_sm90:bm=128,bn=112"), Error);
  CHECK_THROWS_AS(plan_of(odd, "gemm_sm90:bm=128,bn=128,im2col=0"), Error);
}

TEST_CASE("gemm_sm90 kernels compile for sm_90a without spills") {
  const Conv3dDesc d = test::make(2, 72, {3, 5, 8}, 100, {1, 1, 1}, 1, 0, 1, 1, true);
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    for (const bool fp32_output : {false, true}) {
      for (const char* forced : {"gemm_sm90:128,64", "gemm_sm90:128,112", "gemm_sm90:128,192", "gemm_sm90:128,256",
                                  "gemm_sm90:256,112", "gemm_sm90:256,128", "gemm_sm90:bm=128,bn=128,split=1"}) {
        Conv3dDesc c = typed(d, type, fp32_output);
        // The heaviest epilogues: erf GELU, scaled, with the residual (float32 outputs); 16-bit
        // outputs regroup in the quad, the tanh GELU without (bf16) and SiLU with the residual
        // (fp16). Plain bf16 outputs are the compile test's own.
        const std::vector<Epilogue> epilogues = test::epilogue_cases();
        c.epilogue = fp32_output ? epilogues[3] : type == DataType::BFloat16 ? epilogues[4] : epilogues[5];
        DYNAMIC_SECTION(forced << " " << describe(c)) {
          check_compiles_clean(c, forced, "gemm_sm90 ");
        }
      }
    }
  }
}
