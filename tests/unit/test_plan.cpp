// The planner, without a GPU: which kernel family serves which problem on which arch, and that
// every plan it makes fits the device (shared memory, threads, the wgmma kernel's tile pitches and
// its weight preparation step).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <array>
#include <map>
#include <set>
#include <vector>

#include "catch.hpp"
#include "config_cases.hpp"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"
#include "core/problem.hpp"
#include "families/igemm_sm90/search.hpp"
#include "igemm_sm90/geometry.cuh"
#include "depthwise/geometry.cuh"
#include "pitch_rows/geometry.cuh"

using namespace conv3djit;

namespace {

detail::Plan plan_for(const Conv3dDesc& d, const std::string& arch, const std::string& forced = "") {
  return detail::make_plan(detail::make_problem(d), detail::limits_for_arch(arch), forced);
}

std::string kernel(const detail::SpecKey& k) { return k.kernel ? k.kernel->name : ""; }

// igemm_sm90's own pick for d (its first tuning candidate), also where its heuristic leaves d to a
// later family.
detail::Plan sm90_pick(const Conv3dDesc& d) {
  const auto& families = detail::registry();
  const auto it = std::find_if(families.begin(), families.end(),
                               [](const detail::Family* f) { return std::string(f->kernel().name) == "igemm_sm90"; });
  REQUIRE(it != families.end());
  auto plans = (*it)->candidates(detail::make_problem(d), detail::limits_for_arch("sm_90"), 1);
  REQUIRE(plans.size() == 1);
  return plans.front();
}

Conv3dDesc reference_problem() { return test::make(16, 3, {64, 64, 64}, 64, {3, 5, 7}); }

// The igemm_sm90 geometry a plan's key describes (raw weights' 1 KB of alignment included).
Sm90Geometry sm90_geometry_of(const Conv3dDesc& d, const detail::SpecKey& k) {
  const detail::Problem prob = detail::make_problem(d);
  const int split = detail::sm90_split(prob) ? 1 : 0;
  const int raw = detail::sm90_raw(prob, k.field("cc"), k.field("tma") == 1) ? 1 : 0;
  return sm90_geometry(k.c_per_group, k.kd, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, k.field("th"), k.field("tw"),
                       k.field("bn"), k.field("cc"), k.field("cp"), split, k.field("rows"), k.field("planes"),
                       k.layout == Layout::NCDHW, k.field("across"), raw);
}

}  // namespace

TEST_CASE("the reference problem runs on wgmma on sm_90, resident weights, one block per SM, row tiles") {
  // Its 60 x 58 planes in runs of 256 positions: 14 tiles a plane (the last 152 positions), where
  // 4 x 64 tiles would waste 6 of every 64 columns.
  for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
    Conv3dDesc d = reference_problem();
    d.precision = precision;
    const detail::Plan plan = plan_for(d, "sm_90");
    REQUIRE(kernel(plan.key) == "igemm_sm90");
    CHECK(plan.key.field("th") == 4);   // TH x TW: 4 warpgroups of 64 positions
    CHECK(plan.key.field("tw") == 64);
    CHECK(plan.key.field("bn") == 64);  // BN = K
    CHECK(plan.key.field("cc") == 3);   // CC = C: the weights stay in shared memory
    CHECK(plan.key.field("rows") == 58);  // row tiles of the 58-wide output rows
    // tf32: two output planes a tile (each gathered input plane feeds both); 3xTF32: one.
    CHECK(plan.key.field("planes") == (precision == Precision::Tf32 ? 2 : 1));
    CHECK_FALSE(plan.prep);
    CHECK(plan.block == 512);
    CHECK(plan.grid == 132);
    const Sm90Geometry g = sm90_geometry_of(d, plan.key);
    CHECK(plan.shared_bytes == static_cast<unsigned>(g.shared_bytes));
    CHECK(plan.shared_bytes <= 227u * 1024);
    // 256 positions touch at most 6 rows of 58 (starting at a row's last column): 6 + 5 - 1 input
    // rows, each all 58 + 7 - 1 columns.
    CHECK(sm90_row_span(256, 58) == 6);
    CHECK(g.in_h == 10);
    CHECK(g.in_w == 64);
    CHECK(plan.key.field("pp") == 10 * plan.key.field("rp"));
    // No twin: an input that is not 16-byte aligned is copied for the TMA boxes, an aligned one not.
    CHECK_FALSE(plan.unaligned);
    CHECK_FALSE(plan.copies_input(true));
    CHECK(plan.copies_input(false));
    // tf32: each warp stages its outputs in a 4 KB box (16 positions x 2 planes x 32 channels)
    // after two input stages, in place of a third. 3xTF32 stores from registers.
    const bool tf32 = precision == Precision::Tf32;
    CHECK(g.store_channels == (tf32 ? 32 : 0));
    CHECK(plan.store_channels == g.store_channels);
    CHECK(g.store_floats == (tf32 ? 16 * 16 * 2 * 32 : 0));
    CHECK(g.store_at == g.tiles_at + g.stages * g.tile_floats);
    CHECK(g.stages == 2);
  }
}

TEST_CASE("output staging: the largest box that fits beside the stages, channels dividing BN") {
  CHECK(sm90_store_channels(64, 2, 1024) == 32);
  CHECK(sm90_store_channels(64, 1, 1024) == 64);
  CHECK(sm90_store_channels(32, 1, 1024) == 32);   // 64 channels: more than BN
  CHECK(sm90_store_channels(64, 3, 1024) == 16);   // 21 -> 16
  CHECK(sm90_store_channels(256, 3, 512) == 8);    // 10 -> 8
  CHECK(sm90_store_channels(64, 5, 512) == 0);     // 6 < 8
  // A tf32 3 x 3 x 3 layer with C = 4 in row tiles of 64-wide rows (input tiles of 4 x 3 planes x
  // 7 rows of 68 floats): 4 KB boxes (64 channels, one round a tile), and three stages still fit;
  // the same tiles in TH x TW tiles or in the fp32 class stage nothing.
  constexpr int CP = 3 * 7 * 68;
  const Sm90Geometry g = sm90_geometry(4, 3, 3, 3, 1, 1, 1, 1, 4, 64, 64, 4, CP, 0, 64, 1);
  CHECK(g.store_channels == 64);
  CHECK(g.store_floats == 16 * 16 * 64);
  CHECK(g.stages == 3);
  CHECK(g.shared_bytes == 4 * (g.tiles_at + 3 * g.tile_floats + g.store_floats));
  CHECK(g.shared_bytes + 1024 <= kSm90SharedPerSm);
  CHECK(sm90_geometry(4, 3, 3, 3, 1, 1, 1, 1, 4, 64, 64, 4, CP, 0, 0, 1).store_channels == 0);
  CHECK(sm90_geometry(4, 3, 3, 3, 1, 1, 1, 1, 4, 64, 64, 4, CP, 1, 64, 1).store_channels == 0);  // 3xTF32
  // C = 8: its 45 KB input tiles leave room for the boxes with two stages only.
  const Sm90Geometry c8 = sm90_geometry(8, 3, 3, 3, 1, 1, 1, 1, 4, 64, 64, 8, CP, 0, 64, 1);
  CHECK(c8.store_channels == 64);
  CHECK(c8.stages == 2);
  // TH x TW tiles stage at 256 columns only (narrower ones ran slower staged and compile fast from
  // registers), with any epilogue (the plain one uses the boxes only where TMA stores them), and
  // only where a warp's 16 positions lie in one tile row (TW % 16 == 0).
  CHECK(sm90_geometry(4, 3, 3, 3, 1, 1, 1, 1, 4, 64, 64, 4, CP, 0, 0, 1).store_channels == 0);
  CHECK(sm90_geometry(4, 3, 3, 3, 1, 1, 1, 1, 4, 64, 128, 4, CP, 0, 0, 1).store_channels == 0);
  CHECK(sm90_geometry(4, 3, 3, 3, 1, 1, 1, 1, 2, 64, 256, 4, 3 * 4 * 68, 0, 0, 1).store_channels > 0);
  CHECK(sm90_geometry(4, 3, 3, 3, 1, 1, 1, 1, 8, 24, 256, 4, 3 * 10 * 28, 0, 0, 1).store_channels == 0);
  // NDHWC outputs (staged 0) leave from registers.
  CHECK(sm90_geometry(4, 3, 3, 3, 1, 1, 1, 1, 2, 64, 256, 4, 3 * 4 * 68, 0, 0, 1, 0).store_channels == 0);
  // TMA stores the boxes (sm90_stores_staged) where the output is aligned for it and a warp's 16
  // positions never reach past their row: row tiles, or TH x TW tiles on rows of whole tiles.
  constexpr unsigned long long kAligned = 1ull << 20;
  CHECK(sm90_stores_staged(64, 64, 58, 58 * 60, kAligned, 4));        // row tiles: any width
  CHECK(sm90_stores_staged(0, 64, 128, 128 * 5, kAligned, 4));        // two tiles a row
  CHECK_FALSE(sm90_stores_staged(0, 64, 48, 48 * 5, kAligned, 4));    // a tile past the row's end
  CHECK_FALSE(sm90_stores_staged(0, 64, 64, 64 * 5, kAligned + 4, 4));  // output off 16 bytes
  CHECK_FALSE(sm90_stores_staged(64, 64, 58, 58 * 59, kAligned, 4));  // planes off 16 bytes
}

TEST_CASE("two output planes a tile: the tf32 class, one chunk, unit stride and dilation along D, KD >= PL") {
  Conv3dDesc d = reference_problem();
  d.precision = Precision::Tf32;
  const detail::Plan plan = plan_for(d, "sm_90", "sm90:4,64,64,3,1,1,2");
  CHECK(plan.key.field("planes") == 2);
  const Sm90Geometry g = sm90_geometry_of(d, plan.key);
  // Each kd's 3 x 5 x 7 = 105 terms padded to 14 slices; the input tile holds 2 + 3 - 1 planes,
  // with no zero plane (the gather zeroes the padding slots).
  CHECK(g.plane_slices == 14);
  CHECK(g.slices == 42);
  CHECK(g.table_ints == 0);  // the gather pattern replaces the table (below)
  CHECK(g.in_d == 4);
  CHECK(g.zero_channel == 0);
  CHECK(plan.key.field("cp") == 4 * plan.key.field("pp"));  // the box: 4 planes a channel
  CHECK(plan.shared_bytes <= 227u * 1024);
  // Half the tiles: 16 images x 31 plane pairs x 14 runs of 256 positions, over 132 SMs.
  CHECK(plan.grid == 132);
  // The GPU test of outputs not 16-byte aligned: these tiles stage their outputs there too.
  Conv3dDesc small = test::make(2, 3, {9, 20, 32}, 40, {3, 5, 7}, 1, 1, 1, 1, true);
  small.precision = Precision::Tf32;
  CHECK(plan_for(small, "sm_90", "sm90:4,64,64,3,1,1,2").store_channels == 32);
  Conv3dDesc fp32 = reference_problem();
  CHECK_THROWS_AS(plan_for(fp32, "sm_90", "sm90:4,64,64,3,1,1,2"), Error);    // 3xTF32
  Conv3dDesc chunked = test::make(1, 32, {8, 16, 16}, 64, {3, 3, 3}, 1, 1);
  chunked.precision = Precision::Tf32;
  CHECK_THROWS_AS(plan_for(chunked, "sm_90", "sm90:2,64,64,8,1,0,2"), Error);  // CC < C
  Conv3dDesc strided = test::make(1, 3, {9, 16, 16}, 64, {3, 3, 3}, {2, 1, 1}, 1);
  strided.precision = Precision::Tf32;
  CHECK_THROWS_AS(plan_for(strided, "sm_90", "sm90:2,64,64,3,1,0,2"), Error);  // stride along D
  Conv3dDesc flat = test::make(1, 3, {9, 16, 16}, 64, {1, 3, 3}, 1, 1);
  flat.precision = Precision::Tf32;
  CHECK_THROWS_AS(plan_for(flat, "sm_90", "sm90:2,64,64,3,1,0,2"), Error);     // KD < PL
  // Three planes need more accumulators than 4 warpgroups may hold, not 2.
  CHECK_THROWS_AS(plan_for(d, "sm_90", "sm90:4,64,64,3,1,1,3"), Error);
  CHECK(plan_for(d, "sm_90", "sm90:2,64,64,3,1,1,3").key.field("planes") == 3);
}

TEST_CASE("with several output planes, every weight of a chunk sits in exactly one slot") {
  for (int pl : {1, 2, 3}) {
    for (const auto& [cc, kd, kh, kw] : {std::array<int, 4>{3, 3, 5, 7}, {4, 3, 3, 3}, {1, 2, 1, 1}, {16, 2, 3, 3}}) {
      const int slots = sm90_geometry(cc, kd, kh, kw, 1, 1, 1, 1, 4, 64, 64, cc, 0, 0, 0, pl).slices * 8;
      std::vector<int> seen(static_cast<size_t>(cc * kd * kh * kw), 0);
      int padding = 0;
      for (int r = 0; r < slots; ++r) {
        const int w = sm90_slot_weight(r, cc, kd, kh, kw, pl);
        if (w < 0) {
          ++padding;
        } else {
          REQUIRE(w < static_cast<int>(seen.size()));
          ++seen[static_cast<size_t>(w)];
          // The slot's kd is the one the kernel's plane loop gives it.
          if (pl > 1) CHECK(w / (kh * kw) % kd == r / 8 / ((cc * kh * kw + 7) / 8));
        }
      }
      INFO("pl " << pl << " cc " << cc << " kernel " << kd << "x" << kh << "x" << kw);
      CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<long>(seen.size()));
      CHECK(padding == slots - cc * kd * kh * kw);
    }
  }
}

TEST_CASE("paired A rows need a pattern translated along kw by one output column and rows of even width") {
  CHECK(sm90_paired(3, 5, 7, 1, 1, 58, 2, 1));   // the tf32 reference: 3 x 5 x 1 box, 7 translates
  CHECK(sm90_paired(3, 5, 7, 1, 1, 0, 2, 1));    // TH x TW tiles (the kernel checks OW for its stores)
  CHECK(sm90_paired(8, 3, 3, 1, 1, 0, 2, 1));    // one group of 8 channels, 3 translates a kernel row
  CHECK_FALSE(sm90_paired(3, 5, 7, 1, 1, 31, 2, 1));  // odd row tiles: p + 1 may be the next row
  CHECK_FALSE(sm90_paired(3, 5, 7, 2, 1, 0, 2, 1));   // stride 2: translate o at p is o - 2 at p + 1
  CHECK_FALSE(sm90_paired(3, 5, 7, 1, 2, 0, 2, 1));   // dilation 2 along W, likewise
  CHECK_FALSE(sm90_paired(3, 5, 7, 1, 1, 58, 1, 1));  // one plane a tile: no pattern
  CHECK_FALSE(sm90_paired(3, 3, 3, 1, 1, 0, 2, 1));   // no pattern for 3 x 3 x 3 on 3 channels
  CHECK_FALSE(sm90_paired(3, 5, 7, 1, 1, 58, 2, 0));  // cp.async staging (spilled paired)
  // What the kernel relies on: a slice one translate after slice s - NG (same kernel row) reads
  // every slot SW floats further on, so its inputs at p are slice s - NG's at p + 1.
  struct Shape {
    int cc, kd, kh, kw;
  };
  for (const Shape sh : {Shape{3, 3, 5, 7}, Shape{8, 3, 3, 3}, Shape{8, 2, 3, 5}}) {
    const Sm90Pattern p = sm90_pattern(sh.cc, sh.kh, sh.kw, 2);
    REQUIRE(sm90_paired(sh.cc, sh.kh, sh.kw, 1, 1, 0, 2, 1));
    const int translates_a_row = sh.kw / p.box[2];
    int reused = 0;
    for (int r = 8 * p.groups; r < p.slices * 8; ++r) {
      const int s = r / 8;
      if (s / p.groups % translates_a_row == 0 || sm90_slot_term(r, sh.cc, sh.kd, sh.kh, sh.kw, 2).c < 0) continue;
      const int before = r - 8 * p.groups;
      CHECK(sm90_term_offset(r, sh.cc, sh.kd, sh.kh, sh.kw, 1, 1, 72, 720, 2880, 2) ==
            sm90_term_offset(before, sh.cc, sh.kd, sh.kh, sh.kw, 1, 1, 72, 720, 2880, 2) + 1);
      ++reused;
    }
    CHECK(reused > 0);
  }
}

TEST_CASE("paired rows with TMA and unit stride along W load in pairs; the key holds the box shift's parity") {
  CHECK(sm90_pair_loads(3, 5, 7, 1, 1, 58, 2, 1));
  CHECK(sm90_pair_loads(8, 3, 3, 1, 1, 0, 2, 1));
  CHECK_FALSE(sm90_pair_loads(3, 5, 7, 1, 1, 58, 2, 0));  // cp.async staging: pitches of any parity
  CHECK_FALSE(sm90_pair_loads(3, 5, 7, 2, 2, 0, 2, 1));   // stride 2 (paired): p + 1 is 2 columns on
  CHECK_FALSE(sm90_pair_loads(3, 5, 7, 1, 1, 31, 2, 1));  // not paired
  Conv3dDesc ref = reference_problem();
  ref.precision = Precision::Tf32;
  const detail::Plan plan = plan_for(ref, "sm_90");
  CHECK(plan.key.field("parity") == 0);  // no padding: shift 0
  CHECK(plan_for(ref, "sm_90", "sm90:4,64,64,3,0,1,2").key.field("parity") == 0);  // cp.async: no pair loads
  ref.padding = Padding::same();  // pad_w 3: the box starts 1 column early
  CHECK(plan_for(ref, "sm_90", "sm90:4,64,64,3,1,1,2").key.field("parity") == 1);
  ref.padding = Dims3{1, 2, 2};
  CHECK(plan_for(ref, "sm_90", "sm90:4,64,64,3,1,1,2").key.field("parity") == 0);
  // The GPU cases (config_cases.cpp): every one pairs its loads, with the parity its comment says.
  const int parity[] = {1, 0, 1, 1, 1, 0};
  const std::vector<Conv3dDesc> cases = test::pair_load_cases();
  REQUIRE(cases.size() == std::size(parity));
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(describe(cases[i]));
    for (const char* config : {"sm90:2,64,64,512,1,0,2", i < 4 ? "sm90:4,64,64,512,1,1,2" : "sm90:2,64,64,512,1,0,2"}) {
      const detail::SpecKey k = plan_for(cases[i], "sm_90", config).key;
      CHECK(sm90_pair_loads(k.field("cc"), k.kh, k.kw, k.sw, k.dw, k.field("rows"), k.field("planes"), k.field("tma")));
      CHECK(k.field("parity") == parity[i]);
    }
  }
}

TEST_CASE("a gather pattern cuts one kd's terms into translates of a box, never into more slices than packed densely") {
  // The reference's 3 x 5 x 7: a 3 x 5 x 1 box of 15 cells (two groups, the last cell padding),
  // 7 translates along kw: 14 slices, as the dense packing.
  const Sm90Pattern ref = sm90_pattern(3, 5, 7, 2);
  CHECK(ref.groups == 2);
  CHECK(ref.cells == 15);
  CHECK(ref.box[0] == 3);
  CHECK(ref.box[1] == 5);
  CHECK(ref.box[2] == 1);
  CHECK(ref.slices == 14);
  CHECK(sm90_pattern(3, 5, 7, 1).groups == 0);  // one plane a tile: the table
  CHECK(sm90_pattern(8, 3, 3, 2).groups == 1);  // 8 channels: one group, no padding
  CHECK(sm90_pattern(8, 3, 3, 2).slices == 9);
  // 3 x 3 x 3 = 27 terms, 4 slices packed densely: no box of at most 16 cells tiles it in 4.
  CHECK(sm90_pattern(3, 3, 3, 2).groups == 0);
  // Every slot's offset is its box cell's plus its translate's, and the slots hold each term once.
  for (const auto& [cc, kh, kw] : {std::array<int, 3>{3, 5, 7}, {8, 3, 3}, {16, 1, 1}, {2, 4, 4}, {5, 3, 1}}) {
    const Sm90Pattern p = sm90_pattern(cc, kh, kw, 2);
    INFO("cc " << cc << " kernel " << kh << "x" << kw);
    REQUIRE(p.groups > 0);
    CHECK(p.slices <= (cc * kh * kw + 7) / 8);
    std::set<std::array<int, 3>> terms;
    for (int q = 0; q < p.slices * 8; ++q) {
      const Sm90Term x = sm90_pattern_slot(p, q, kh, kw);
      if (x.c < 0) {
        CHECK(q % 8 + q / 8 % p.groups * 8 >= p.cells);
        continue;
      }
      CHECK(terms.insert({x.c, x.kh, x.kw}).second);
      const Sm90Term inner = sm90_pattern_cell(p, q / 8 % p.groups * 8 + q % 8, kh, kw, false);
      const Sm90Term outer = sm90_pattern_cell(p, q / 8 / p.groups, kh, kw, true);
      CHECK(sm90_term_at(x, 2, 1, 40, 0, 900) ==
            sm90_term_at(inner, 2, 1, 40, 0, 900) + sm90_term_at(outer, 2, 1, 40, 0, 900));
      CHECK(sm90_term_offset(q, cc, 3, kh, kw, 2, 1, 40, 0, 900, 2) == sm90_term_at(x, 2, 1, 40, 0, 900));
    }
    CHECK(terms.size() == static_cast<size_t>(cc * kh * kw));
  }
}

TEST_CASE("wgmma is planned only for compute capability 9.0") {
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_100", "sm_120"}) {
    INFO(arch);
    CHECK(kernel(plan_for(reference_problem(), arch).key) != "igemm_sm90");
    CHECK_THROWS_AS(plan_for(reference_problem(), arch, "sm90:4,64,64,3"), Error);
  }
}

TEST_CASE("a long reduction runs in channel chunks whose weights are prepared first") {
  const Conv3dDesc d = test::make(2, 32, {64, 64, 64}, 64, {3, 3, 3}, 1, 1);  // unet3d encoder
  const detail::Plan plan = plan_for(d, "sm_90");
  REQUIRE(kernel(plan.key) == "igemm_sm90");
  const Sm90Geometry g = sm90_geometry_of(d, plan.key);
  CHECK(g.chunks > 1);
  CHECK(g.weight_buffers == g.stages);  // one weight chunk per item in flight
  CHECK(g.stages >= 2);
  CHECK(g.stages <= kSm90MaxStages);
  REQUIRE(plan.prep);
  CHECK(kernel(plan.prep->key) == "igemm_sm90_weights");
  CHECK(plan.prep->key.field("bn") == plan.key.field("bn"));  // BN
  CHECK(plan.prep->key.field("cc") == plan.key.field("cc"));  // CC
  const long long k_blocks = (64 + plan.key.field("bn") - 1) / plan.key.field("bn");
  CHECK(plan.prep->workspace_bytes == static_cast<uint64_t>(k_blocks * g.chunks * g.weight_floats) * 4);
  CHECK(plan.grid % k_blocks == 0);
  // One preparation kernel serves every stride and dilation of the same weights' shape.
  Conv3dDesc strided = d;
  strided.stride = Dims3{1, 2, 2};
  const detail::Plan other = plan_for(strided, "sm_90");
  if (other.prep && other.key.field("bn") == plan.key.field("bn") && other.key.field("cc") == plan.key.field("cc")) {
    CHECK(other.prep->key == plan.prep->key);
  }
}

TEST_CASE("a block alone on its SM streams its weight chunks through as many stages as fit") {
  // pointwise_512's 2 x 64 tiles of 256 columns (tf32): 64-channel chunks take 99 KB a stage (two
  // fit), 32-channel chunks 50 KB (four); a whole reduction (resident weights) takes a third input
  // tile where it fits; two blocks an SM keep two stages.
  auto geometry = [](int cc, int cg, int bn) { return sm90_geometry(cg, 1, 1, 1, 1, 1, 1, 1, 2, 64, bn, cc, 136, 0, 0); };
  for (const auto& [cc, stages] : {std::pair{64, 2}, std::pair{32, 4}, std::pair{16, 4}}) {
    const Sm90Geometry g = geometry(cc, 512, 256);
    INFO("CC " << cc);
    CHECK(g.min_blocks == 1);
    CHECK(g.stages == stages);
    CHECK(g.weight_buffers == stages);
    CHECK(g.shared_bytes + 1024 <= kSm90SharedPerSm);
    // (then the warps' output staging boxes, where they fit)
    CHECK(g.tiles_at + stages * g.tile_floats + g.store_floats == g.shared_bytes / 4);
    CHECK(g.store_at == g.tiles_at + stages * g.tile_floats);
  }
  const Sm90Geometry one_chunk = geometry(24, 24, 256);
  CHECK(one_chunk.stages == 3);
  CHECK(one_chunk.weight_buffers == 1);
  CHECK(one_chunk.shared_bytes + 1024 <= kSm90SharedPerSm);
  const Sm90Geometry two_blocks = geometry(8, 64, 32);
  CHECK(two_blocks.min_blocks == 2);
  CHECK(two_blocks.stages == 2);
}

TEST_CASE("tf32 layers of 128 or 256 columns take chunks that stream through 3 or more stages") {
  // Such items run without draining the tensor cores (igemm_sm90.cu): c3d_conv3b (256 channels,
  // 3 x 3 x 3) in 2-channel chunks of 256 columns, pointwise_512 in 32-channel ones; 64 columns keep the chunk
  // that wastes the fewest reduction slots (unet3d_decoder: 8 channels, 27 slices).
  struct Case {
    Conv3dDesc d;
    int bn, cc;
    bool streamed;  // 3 or more stages
  };
  const Conv3dDesc c3b = test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1, 1, 1, true);
  const Conv3dDesc pw512 = test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1});
  const Conv3dDesc decoder = test::make(2, 128, {32, 32, 32}, 64, {3, 3, 3}, 1, 1);
  for (Case c : {Case{c3b, 256, 2, true}, Case{pw512, 256, 32, true}, Case{decoder, 64, 8, false}}) {
    c.d.precision = Precision::Tf32;
    INFO(describe(c.d));
    const detail::Plan plan = sm90_pick(c.d);  // c3d_conv3b's is igemm_sm90_half's, tune times both
    REQUIRE(kernel(plan.key) == "igemm_sm90");
    CHECK(plan.key.field("bn") == c.bn);
    CHECK(plan.key.field("cc") == c.cc);
    const int32_t* k = plan.key.config;
    const Sm90Geometry g = sm90_geometry(plan.key.c_per_group, plan.key.kd, plan.key.kh, plan.key.kw, plan.key.sh,
                                         plan.key.sw, plan.key.dh, plan.key.dw, k[0], k[1], k[2], k[3], k[6], 0, k[8]);
    CHECK(g.chunks > 1);
    CHECK((g.stages >= 3) == c.streamed);
  }
  // The fp32 class (3xTF32 drains every chain anyway) keeps 2-channel chunks for c3d_conv3b too,
  // chosen by reduction slots alone.
  CHECK(plan_for(c3b, "sm_90").key.field("cc") == 2);
}

TEST_CASE("wgmma plans stage by TMA: in place, or from a pitched copy where rows are not 16-byte multiples") {
  // W % 4 == 0 (here 64, 28, 20), any padding, dilation along D up to 8: TMA boxes of the input.
  for (const Conv3dDesc& d : {reference_problem(), test::make(2, 32, {16, 28, 28}, 64, {3, 3, 3}, 1, 1),
                              test::make(1, 16, {12, 20, 20}, 64, {3, 3, 3}, 1, 2, {2, 2, 2})}) {
    INFO(describe(d));
    const detail::Plan plan = plan_for(d, "sm_90");
    REQUIRE(kernel(plan.key) == "igemm_sm90");
    CHECK(plan.key.field("tma") == 1);
    CHECK_FALSE(plan.copies_input(true));
    const Sm90Geometry g = sm90_geometry_of(d, plan.key);
    // The box is stored densely; its row is a multiple of 4 floats from the narrowest (in_w after
    // the aligned origin's shift) to 28 wider, the width picked against gather bank conflicts.
    const int narrowest = sm90_tma_row(g.in_w, sm90_tma_shift(static_cast<int>(resolved_padding(d).before.w)));
    CHECK(plan.key.field("rp") >= narrowest);
    CHECK(plan.key.field("rp") <= narrowest + 28);
    CHECK(plan.key.field("pp") == g.in_h * plan.key.field("rp"));
    CHECK(plan.key.field("cp") == plan.key.kd * plan.key.field("pp"));
    CHECK(plan.key.field("rp") % 4 == 0);
    CHECK(plan.key.field("rp") <= 256);
    CHECK(plan.key.kd * plan.key.dd <= 256);
    // 128-byte aligned tiles for the box destination.
    CHECK(g.tiles_at % 32 == 0);
    CHECK(g.tile_floats % 32 == 0);
    // No twin: an input that is not 16-byte aligned is copied per call, in rows of W floats.
    CHECK_FALSE(plan.unaligned);
    CHECK(plan.copies_input(false));
    REQUIRE(plan.input_copy);
    CHECK(kernel(plan.input_copy->key) == "pitch_rows");
    CHECK(plan.input_copy->workspace_bytes == static_cast<uint64_t>(d.n * d.c * d.d * d.h * d.w * 4));
  }
  // Rows that are not 16-byte multiples (W = 66, 63, 70, 30): boxes of a copy in rows of 68, 64,
  // 72, 32 floats, made for every call.
  Conv3dDesc small = test::make(2, 32, {16, 28, 30}, 64, {3, 3, 3}, 1, 1);
  small.precision = Precision::Tf32;
  for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
    for (int64_t w : {66, 63, 70}) {
      Conv3dDesc d = w == 70 ? test::make(16, 3, {16, 20, 70}, 64, {3, 5, 7}) : reference_problem();
      d.w = w;
      d.precision = precision;
      INFO(describe(d));
      const detail::Plan plan = plan_for(d, "sm_90");
      REQUIRE(kernel(plan.key) == "igemm_sm90");
      CHECK(plan.key.field("tma") == 1);
      REQUIRE(plan.input_copy);
      CHECK(plan.copies_input(true));
      CHECK(kernel(plan.input_copy->key) == "pitch_rows");
      CHECK(detail::input_row_pitch(w) == (w + 3) / 4 * 4);
      CHECK(plan.input_copy->workspace_bytes == static_cast<uint64_t>(d.n * d.c * d.d * d.h * detail::input_row_pitch(w) * 4));
      CHECK(int64_t{plan.input_copy->grid} * plan.input_copy->block >= 1);
      CHECK_FALSE(plan.unaligned);
      CHECK(plan.key.field("planes") == (precision == Precision::Tf32 ? 2 : 1));  // PL
    }
  }
  const detail::Plan small_plan = plan_for(small, "sm_90");
  CHECK(small_plan.key.field("tma") == 1);
  CHECK(small_plan.copies_input(true));
  CHECK(detail::input_row_pitch(30) == 32);
  // A dilation along D past 8: cp.async, no twin.
  const detail::Plan dilated = plan_for(test::make(1, 16, {40, 20, 20}, 64, {3, 3, 3}, 1, 0, {9, 1, 1}), "sm_90");
  REQUIRE(kernel(dilated.key) == "igemm_sm90");
  CHECK(dilated.key.field("tma") == 0);
  CHECK_FALSE(dilated.input_copy);
  CHECK_FALSE(dilated.copies_input(false));
  CHECK_FALSE(dilated.unaligned);
  // Forced staging: 1 where a box fits (from a pitched copy where W % 4 != 0), an error where it
  // does not; 0 always.
  CHECK(plan_for(reference_problem(), "sm_90", "sm90:4,64,64,3,0").key.field("tma") == 0);
  CHECK(plan_for(reference_problem(), "sm_90", "sm90:4,64,64,3,1").key.field("tma") == 1);
  const detail::Plan forced = plan_for(test::make(1, 3, {16, 20, 70}, 64, {3, 5, 7}), "sm_90", "sm90:4,64,64,3,1");
  CHECK(forced.key.field("tma") == 1);
  CHECK(forced.copies_input(true));
  CHECK_THROWS_AS(plan_for(test::make(1, 16, {40, 20, 20}, 64, {3, 3, 3}, 1, 0, {9, 1, 1}), "sm_90", "sm90:4,64,64,3,1"),
                  Error);
  CHECK_THROWS_AS(plan_for(reference_problem(), "sm_90", "sm90:4,64,64,3,2"), Error);
  // The reference problem's box row (row tiles: 10 input rows of 64 columns): of those with the
  // fewest gather wavefronts, the narrowest, 84 floats (the 3xTF32 weights leave just room for it).
  // The tf32 class's gather pattern loads rows kh = 0..3 (or 4 and channels 1's rows 0..2) of one
  // column at once: 72 = 8 mod 32 floats puts the four in four different quarters of the banks.
  Conv3dDesc reference_tf32 = reference_problem();
  reference_tf32.precision = Precision::Tf32;
  CHECK(plan_for(reference_tf32, "sm_90").key.field("rp") == 72);
  CHECK(plan_for(reference_problem(), "sm_90").key.field("rp") == 84);
}

TEST_CASE("a chunk size that only cp.async can stage loses to one TMA can") {
  // The suite's asymmetric_kernel layer: 8-channel chunks fill their slices (168 terms) but their
  // tiles fit only with cp.async staging; 6-channel ones (126 of 128) fit a TMA box. H200, fp32:
  // 0.292 against 0.211 ms.
  const Conv3dDesc d = test::make(2, 64, {16, 56, 56}, 64, {3, 1, 7}, 1, Dims3{1, 0, 3});
  const detail::Plan plan = plan_for(d, "sm_90");
  REQUIRE(kernel(plan.key) == "igemm_sm90");
  CHECK(plan.key.field("cc") == 6);  // CC
  CHECK(plan.key.field("tma") == 1);  // TMA
  CHECK(plan_for(d, "sm_90", "sm90:3,64,64,8,0,1").key.field("cc") == 8);  // the other, when forced
}

TEST_CASE("where 64 columns only stage by cp.async, two blocks of 32 columns by TMA boxes win") {
  // The I3D stem (C = 3 -> 64, 7^3, stride 2): its 64-column tiles' boxes do not fit. H200, tf32:
  // 1.189 ms by cp.async, 0.726 in 32-column blocks by TMA. A forced configuration keeps its width.
  Conv3dDesc d = test::make(4, 3, {32, 224, 224}, 64, {7, 7, 7}, 2, 3);
  d.precision = Precision::Tf32;
  const detail::Plan plan = plan_for(d, "sm_90");
  REQUIRE(kernel(plan.key) == "igemm_sm90");
  CHECK(plan.key.field("bn") == 32);
  CHECK(plan.key.field("tma") == 1);
  CHECK(plan_for(d, "sm_90", "sm90:16,8,64,1").key.field("bn") == 64);
  // Where the natural width has a box, it stays (the reference problem).
  Conv3dDesc ref = reference_problem();
  ref.precision = Precision::Tf32;
  CHECK(plan_for(ref, "sm_90").key.field("bn") == 64);
}

TEST_CASE("tf32 NCDHW layers of 8 to 15 output channels run on igemm_sm90, fp32-class ones on direct_tiled") {
  // SlowFast's fast stem (C = 3 -> 8, 5 x 7 x 7, stride 1 x 2 x 2). H200: tf32 igemm_sm90 0.86 ms,
  // direct_tiled 1.74; fp32 class 1.63 against 1.74 (not moved).
  Conv3dDesc d = test::make(8, 3, {32, 224, 224}, 8, {5, 7, 7}, Dims3{1, 2, 2}, Dims3{2, 3, 3});
  CHECK(kernel(plan_for(d, "sm_90").key) == "direct_tiled");
  d.precision = Precision::Tf32;
  CHECK(kernel(plan_for(d, "sm_90").key) == "igemm_sm90");
  Conv3dDesc narrower = test::make(8, 3, {32, 224, 224}, 7, {5, 7, 7}, Dims3{1, 2, 2}, Dims3{2, 3, 3});
  narrower.precision = Precision::Tf32;
  CHECK(kernel(plan_for(narrower, "sm_90").key) == "direct_tiled");
}

TEST_CASE("half NDHWC layers of one group with at most 32 output channels and long reductions run igemm_sm90") {
  // bf16 384 -> 32, 5^3 (C x taps 48000; H100: igemm_sm90 1.48x igemm_sm90_half). Shorter
  // reductions (128 -> 16, 2^3 lost 0.58x there) and 64 output channels keep igemm_sm90_half;
  // inputs of fewer than 32 channels keep igemm_sm80, and grouped ones igemm_sm90_half.
  auto bf16 = [](Conv3dDesc d) {
    d.dtype = DataType::BFloat16;
    d.layout = Layout::NDHWC;
    return d;
  };
  CHECK(kernel(plan_for(bf16(test::make(4, 384, {16, 32, 32}, 32, {5, 5, 5}, 1, 2)), "sm_90").key) == "igemm_sm90");
  CHECK(kernel(plan_for(bf16(test::make(2, 384, {16, 14, 21}, 16, {4, 7, 5}, 1, Dims3{2, 3, 2})), "sm_90").key) ==
        "igemm_sm90");
  CHECK(kernel(plan_for(bf16(test::make(4, 128, {4, 60, 62}, 16, {2, 2, 2}, 1, 1)), "sm_90").key) ==
        "igemm_sm90_half");
  CHECK(kernel(plan_for(bf16(test::make(1, 128, {16, 56, 58}, 16, {3, 5, 7}, 1, Dims3{1, 2, 3})), "sm_90").key) ==
        "igemm_sm90_half");
  CHECK(kernel(plan_for(bf16(test::make(4, 384, {16, 32, 32}, 64, {5, 5, 5}, 1, 2)), "sm_90").key) ==
        "igemm_sm90_half");
  CHECK(kernel(plan_for(bf16(test::make(4, 16, {16, 32, 32}, 32, {3, 3, 3}, 1, 1)), "sm_90").key) == "igemm_sm80");
  CHECK(kernel(plan_for(bf16(test::make(4, 128, {16, 32, 32}, 64, {3, 3, 3}, 1, 1, 1, 2)), "sm_90").key) ==
        "igemm_sm90_half");
}

TEST_CASE("every forced configuration of the GPU suite's cases plans on sm_90") {
  // Caught here, a case that does not fit would otherwise fail only on the GPU machine.
  for (const test::ConfigCase& c : test::config_cases().forced) {
    for (const Conv3dDesc& d : c.descs) {
      INFO(c.config << " " << describe(d));
      detail::Plan plan;
      CHECK_NOTHROW(plan = plan_for(d, "sm_90", c.config));
      // Every plan with TMA boxes carries the copy a misaligned input needs; no other plan does.
      const bool boxed = kernel(plan.key) == "igemm_sm90" && plan.key.field("tma") == 1;
      CHECK(plan.input_copy.has_value() == boxed);
    }
  }
}

TEST_CASE("row tiles: runs of positions of a plane up to 64 wide, one chunk or the fp32 class") {
  // (The reference problem's: above.) Wider planes keep TH x TW tiles (their input rows would be
  // all of W); so do chunked reductions in the tf32 class.
  CHECK(plan_for(test::make(1, 3, {8, 40, 100}, 64, {3, 5, 7}), "sm_90").key.field("rows") == 0);
  Conv3dDesc dilated = test::make(2, 64, {16, 56, 56}, 64, {3, 3, 3}, 1, 2, 2);  // the suite's dilated layer
  CHECK(plan_for(dilated, "sm_90").key.field("rows") == 56);
  dilated.precision = Precision::Tf32;
  const detail::Plan chunked = plan_for(dilated, "sm_90");
  REQUIRE(kernel(chunked.key) == "igemm_sm90");
  CHECK(sm90_geometry_of(dilated, chunked.key).chunks > 1);
  CHECK(chunked.key.field("rows") == 0);
  // At about equal useful area, 128 columns take the row tiles (the fp32 c3d_conv3b: 28 x 28 plane,
  // 2 warpgroups); 64 columns (unet3d_decoder) and pointwise layers keep their TH x TW tiles.
  const detail::Plan c3b = plan_for(test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1, 1, 1, true), "sm_90");
  CHECK(c3b.key.field("bn") == 128);
  CHECK(c3b.key.field("rows") == 28);
  CHECK(plan_for(test::make(2, 128, {32, 32, 32}, 64, {3, 3, 3}, 1, 1), "sm_90").key.field("rows") == 0);
  CHECK(plan_for(test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}), "sm_90").key.field("rows") == 0);
  // Forced: ROWS 1 takes row tiles with either staging, 0 the TH x TW tiles.
  CHECK(plan_for(reference_problem(), "sm_90", "sm90:4,64,64,3,1,1").key.field("rows") == 58);
  CHECK(plan_for(reference_problem(), "sm_90", "sm90:2,64,64,3,0,1").key.field("rows") == 58);
  Conv3dDesc reference_tf32 = reference_problem();
  reference_tf32.precision = Precision::Tf32;
  CHECK(plan_for(reference_tf32, "sm_90", "sm90:4,64,64,3,1,0").key.field("rows") == 0);
  CHECK_THROWS_AS(plan_for(reference_problem(), "sm_90", "sm90:4,64,64,3,1,2"), Error);
}

TEST_CASE("pointwise tf32 layers with K > 128 take 256 columns; conflict-free channel pitches") {
  // pointwise_512 of the suite: planned as 8 x 14 x 56 planes in 2 x 64 tiles (channels 136
  // floats apart: k t and t + 1 of a load 8 banks apart); 8 x 16 tiles would put every channel of
  // a load on one bank.
  Conv3dDesc d = test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1});
  d.precision = Precision::Tf32;
  const detail::Plan plan = plan_for(d, "sm_90");
  REQUIRE(kernel(plan.key) == "igemm_sm90");
  CHECK(plan.key.field("th") * plan.key.field("tw") == 128);  // 2 warpgroups: 128 accumulators each
  CHECK(plan.key.field("bn") == 256);
  CHECK(plan.key.field("cp") % 32 == 8);
  // The fp32 class (3xTF32) has no registers for 256 columns, and K <= 128 no use for them.
  d.precision = Precision::Fp32;
  CHECK(plan_for(d, "sm_90").key.field("bn") == 128);
  CHECK_THROWS_AS(plan_for(d, "sm_90", "sm90:2,64,256,64"), Error);
  Conv3dDesc narrow = test::make(8, 128, {16, 56, 56}, 128, {1, 1, 1});  // pointwise_128
  narrow.precision = Precision::Tf32;
  const detail::Plan narrow_plan = plan_for(narrow, "sm_90");
  REQUIRE(kernel(narrow_plan.key) == "igemm_sm90");
  CHECK(narrow_plan.key.field("bn") == 128);
}

TEST_CASE("tiled plans copy input rows 16 bytes at a time where W and padding allow, with a 4-byte twin") {
  // sm_80 serves the reference kernel with the tiled FFMA kernel; V (copy width) is its last field.
  struct Case {
    Conv3dDesc d;
    int v;
  };
  for (const Case& c : {Case{test::make(2, 3, {24, 24, 24}, 16, {3, 5, 7}), 4},
                        Case{test::make(2, 3, {24, 24, 24}, 16, {3, 5, 7}, 1, Dims3{0, 0, 4}), 4},
                        Case{test::make(2, 3, {24, 24, 26}, 16, {3, 5, 7}), 1},
                        Case{test::make(2, 3, {24, 24, 24}, 16, {3, 5, 7}, 1, Dims3{0, 0, 2}), 1}}) {
    INFO(describe(c.d));
    const detail::Plan plan = plan_for(c.d, "sm_80");
    REQUIRE(kernel(plan.key) == "direct_tiled");
    CHECK(plan.key.field("v") == c.v);
    REQUIRE(static_cast<bool>(plan.unaligned) == (c.v == 4));
    if (plan.unaligned) {
      const detail::SpecKey& twin = plan.unaligned->key;
      CHECK(kernel(twin) == "direct_tiled");
      CHECK(twin.field("v") == 1);
      for (int i : {0, 1, 2, 3, 4, 6}) CHECK(twin.config[i] == plan.key.config[i]);
      CHECK(plan.unaligned->grid == plan.grid);
      CHECK(plan.unaligned->shared_bytes == plan.shared_bytes);
      CHECK_FALSE(plan.unaligned->unaligned);
    }
  }
  // Forced: V absent = automatic, 1 always, 4 only where it is safe.
  const Conv3dDesc aligned = test::make(2, 3, {24, 24, 24}, 16, {3, 5, 7});
  const Conv3dDesc odd = test::make(2, 3, {24, 24, 26}, 16, {3, 5, 7});
  CHECK(plan_for(aligned, "sm_90", "tiled:2,1,8,3,8").key.field("v") == 4);
  CHECK(plan_for(aligned, "sm_90", "tiled:2,1,8,3,8,1").key.field("v") == 1);
  CHECK(plan_for(odd, "sm_90", "tiled:2,1,8,3,8").key.field("v") == 1);
  CHECK_THROWS_AS(plan_for(odd, "sm_90", "tiled:2,1,8,3,8,4"), Error);
  CHECK_THROWS_AS(plan_for(aligned, "sm_90", "tiled:2,1,8,3,8,2"), Error);
}

TEST_CASE("two teams of warps share resident weights, each double-buffering its input tiles") {
  // The FFMA reference configuration: 8 warps a team, 80 KB of weights once, 2 x 2 input tiles of
  // 9 (c, kd) planes x 8 rows x 76 floats, 2 x 8 warps' staging rows (4 x 68 floats).
  const int weights = 3 * 3 * 5 * 7 * 64, tile = 3 * 3 * 8 * 76, stage = 8 * 4 * 68;
  const detail::Plan pair = plan_for(reference_problem(), "sm_90", "tiled:8,1,4,3,8");
  CHECK(pair.key.field("p") == 2);
  CHECK(pair.block == 512);
  CHECK(pair.shared_bytes == 4u * (weights + 2 * 2 * tile + 2 * stage));
  CHECK(pair.grid == 132);  // one block an SM: 7440 tile pairs
  const detail::Plan single = plan_for(reference_problem(), "sm_90", "tiled:8,1,4,3,8,4,1");
  CHECK(single.key.field("p") == 1);
  CHECK(single.block == 256);
  CHECK(single.shared_bytes == 4u * (weights + 2 * tile + stage));
  // Fewer tiles than the SMs hold: a block a pair of tiles. 3 output planes of 4 x 14, a tile
  // each: 2 blocks, the second one's second team without a tile.
  const detail::Plan small = plan_for(test::make(1, 3, {5, 8, 20}, 64, {3, 5, 7}), "sm_90", "tiled:8,1,4,3,8");
  CHECK(small.grid == 2);
  // Chunked reductions keep one team (two buffers of weights and input); P = 2 is refused there,
  // as is a pair of 16-warp teams.
  const Conv3dDesc chunked = test::make(1, 48, {4, 7, 12}, 64, {3, 3, 3}, 1, 1);
  CHECK(plan_for(chunked, "sm_90", "tiled:8,1,4,3,8").key.field("p") == 1);
  CHECK_THROWS_AS(plan_for(chunked, "sm_90", "tiled:8,1,4,3,8,4,2"), Error);
  CHECK_THROWS_AS(plan_for(reference_problem(), "sm_90", "tiled:8,2,4,3,8,4,2"), Error);
  CHECK_THROWS_AS(plan_for(reference_problem(), "sm_90", "tiled:8,1,4,3,8,4,3"), Error);
}

TEST_CASE("pointwise layers are planned as the flat plane whose tiles they fill") {
  const Conv3dDesc pw256 = test::make(8, 256, {8, 28, 28}, 256, {1, 1, 1});  // 28 x 28: 87.5 % of 4 x 32
  const detail::Plan plan = plan_for(pw256, "sm_90");
  REQUIRE(kernel(plan.key) == "igemm_sm90");
  CHECK(plan.params.od == 1);
  CHECK(plan.params.d == 1);
  CHECK(plan.params.oh * plan.params.ow == 8 * 28 * 28);
  CHECK(plan.params.oh % plan.key.field("th") == 0);  // TH
  CHECK(plan.params.ow % plan.key.field("tw") == 0);  // TW
  // pointwise_512's best flat tiles (8 x 16 of a 7 x 112 plane) are 87.5 % full: enough since TMA
  // staging; 13 x 13 planes (no flat width divides 4 x 13 x 13) fill 16 x 8 tiles to 66 %: not enough.
  CHECK(kernel(plan_for(test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}), "sm_90").key) == "igemm_sm90");
  CHECK(kernel(plan_for(test::make(8, 512, {4, 13, 13}, 2048, {1, 1, 1}), "sm_90").key) == "igemm_sm80");
  // Strides or padding make positions differ: those keep their shape.
  for (const Conv3dDesc& d : {test::make(8, 256, {8, 28, 28}, 256, {1, 1, 1}, {1, 2, 2}),
                              test::make(8, 256, {8, 28, 28}, 256, {1, 1, 1}, 1, 1)}) {
    const detail::Plan p = plan_for(d, "sm_90");
    CHECK(p.params.od == detail::make_problem(d).out.d);
    CHECK(p.params.ow == detail::make_problem(d).out.w);
  }
}

TEST_CASE("tiles across images: asked for only, on pointwise NCDHW layers planned 8 columns wide") {
  // pointwise_512: 784 positions an image, 6.1 tiles of 128. As 98 rows of 8 an image, 16-row
  // tiles of all 8 x 98 rows fill 49 tiles exactly; with streamed weights every one of the 132
  // blocks walks items of all the column blocks. The heuristic keeps its tiles within images
  // (measured faster); a forced configuration or the tuner's candidates take these.
  for (const Precision precision : {Precision::Tf32, Precision::Fp32}) {
    Conv3dDesc d = test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1});
    d.precision = precision;
    INFO(describe(d));
    CHECK(plan_for(d, "sm_90").key.field("across") == 0);
    const detail::Plan plan = plan_for(d, "sm_90", "sm90:16,8,128,32,1,0,1,1");
    REQUIRE(kernel(plan.key) == "igemm_sm90");
    CHECK(plan.key.field("across") == 1);
    CHECK(plan.key.field("tw") == 8);
    CHECK(plan.key.field("tma") == 1);
    CHECK((plan.params.n == 8 && plan.params.d == 1 && plan.params.oh == 98 && plan.params.ow == 8));
    CHECK(plan.key.field("cp") == 8);
    CHECK(plan.key.field("rp") == plan.key.field("cc") * 8);
    const Sm90Geometry g = sm90_geometry_of(d, plan.key);
    CHECK(g.tile_floats == plan.key.field("th") * plan.key.field("cc") * 8);
    CHECK(g.zero_channel == 0);
    CHECK(g.chunks > 1);
    CHECK(g.store_channels == 0);  // positions leave from registers
    CHECK(plan.grid == 132);       // not a multiple of the column blocks: streamed weights
    CHECK(sm90_across_tiles(8, 98, plan.key.field("th")) * plan.key.field("th") == 8 * 98);
  }
  // The tuner's candidates include them where they fit.
  Conv3dDesc tf32 = test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1});
  tf32.precision = Precision::Tf32;
  bool offered = false;
  for (const detail::Family* f : detail::registry()) {
    for (const detail::Plan& p : f->candidates(detail::make_problem(tf32), detail::limits_for_arch("sm_90"), 16)) {
      offered |= kernel(p.key) == "igemm_sm90" && p.key.field("across") == 1;
    }
  }
  CHECK(offered);
  // Forced: tiles across images need a pointwise NCDHW layer whose image is a whole number of
  // 8-position rows, TW 8, CC a multiple of 8 and TMA.
  const Conv3dDesc pw = test::make(3, 64, {2, 6, 10}, 40, {1, 1, 1});
  CHECK(plan_for(pw, "sm_90", "sm90:16,8,64,32,1,0,1,1").key.field("across") == 1);
  CHECK_THROWS_AS(plan_for(pw, "sm_90", "sm90:8,16,64,32,1,0,1,1"), Error);  // TW 16
  CHECK_THROWS_AS(plan_for(pw, "sm_90", "sm90:16,8,64,12,1,0,1,1"), Error);  // CC 12
  CHECK_THROWS_AS(plan_for(pw, "sm_90", "sm90:16,8,64,32,0,0,1,1"), Error);  // cp.async
  CHECK_THROWS_AS(plan_for(test::make(3, 64, {2, 6, 9}, 40, {1, 1, 1}), "sm_90", "sm90:16,8,64,32,1,0,1,1"),
                  Error);  // 108 positions an image
  CHECK_THROWS_AS(plan_for(test::make(3, 64, {2, 6, 10}, 40, {1, 3, 3}, 1, Dims3{0, 1, 1}), "sm_90",
                           "sm90:16,8,64,32,1,0,1,1"),
                  Error);
  Conv3dDesc ndhwc = pw;
  ndhwc.layout = Layout::NDHWC;
  CHECK_THROWS_AS(plan_for(ndhwc, "sm_90", "sm90:16,8,64,32,1,0,1,1"), Error);
  // Streamed weights take every resident block, resident ones a multiple of the column blocks.
  const detail::Plan resident = plan_for(test::make(64, 16, {4, 14, 14}, 192, {1, 1, 1}), "sm_90", "sm90:16,8,64,16,1,0,1,1");
  CHECK(sm90_geometry_of(test::make(64, 16, {4, 14, 14}, 192, {1, 1, 1}), resident.key).chunks == 1);
  CHECK(resident.grid % 3 == 0);
}

TEST_CASE("grouped layers put all channels of a group in one block, up to 8, and stream planes in runs") {
  const Conv3dDesc resnext = test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1, 1, 32);
  const detail::Plan plan = plan_for(resnext, "sm_90");
  CHECK(kernel(plan.key) == "grouped");
  CHECK(plan.key.field("kb") == 8);
  // Depthwise with a stride along W is a grouped layer for the grouped kernel.
  const Conv3dDesc depthwise = test::make(8, 64, {16, 54, 108}, 64, {3, 3, 3}, {1, 1, 2}, 1, 1, 64);
  const detail::Plan dw = plan_for(depthwise, "sm_90");
  CHECK(kernel(dw.key) == "grouped");
  CHECK(dw.key.field("kb") == 1);
  CHECK(dw.key.field("bw") == 56);              // one tile covers the 54 columns
  CHECK(dw.key.field("bh") % dw.key.field("th") == 0);
  CHECK(dw.key.field("odb") > 1);                // several output planes share their input planes
  CHECK_THROWS_AS(plan_for(resnext, "sm_90", "grouped:4,32,1,4,2,3"), Error);  // 3 does not divide 8
  CHECK_THROWS_AS(plan_for(resnext, "sm_90", "grouped:4,32,2,4,2,8"), Error);  // 64 accumulators
  CHECK_THROWS_AS(plan_for(resnext, "sm_90", "grouped:5,32,2,4,2"), Error);    // TH does not divide BH
  CHECK_THROWS_AS(plan_for(reference_problem(), "sm_90", "grouped:4,32,1,4,2"), Error);  // groups == 1
}

TEST_CASE("grouped layers whose group the grouped kernel cannot hold run on direct_tiled, a block within a group") {
  // 16 channels a group with 3 x 3 x 3 (the grouped kernel's ring of every channel of the group
  // does not fit two blocks an SM) and 8 with 5 x 5 x 5 (chunks of channels): direct_tiled, with
  // BK = 8 WK dividing a group's K.
  for (const Conv3dDesc& d : {test::make(8, 32, {16, 56, 56}, 32, {3, 3, 3}, 1, 1, 1, 2),
                              test::make(2, 128, {16, 32, 32}, 128, {5, 5, 5}, 1, 2, 1, 16, true),
                              test::make(2, 48, {8, 20, 30}, 72, {3, 5, 5}, 1, 1, 1, 3)}) {
    INFO(describe(d));
    const detail::Plan plan = plan_for(d, "sm_90");
    REQUIRE(kernel(plan.key) == "direct_tiled");
    CHECK(detail::make_problem(d).k_per_group % (8 * plan.key.field("wk")) == 0);
    CHECK(plan.key.field("cc") <= d.c / d.groups);
  }
  // The grouped kernel keeps the groups it holds (ResNeXt: 8 channels a group, 3 x 3 x 3).
  CHECK(kernel(plan_for(test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1, 1, 32), "sm_90").key) == "grouped");
  // A group's K that is no multiple of 8 (12: 48 -> 36 in 3 groups) leaves direct_tiled out.
  const Conv3dDesc odd = test::make(2, 48, {8, 20, 30}, 36, {3, 5, 5}, 1, 1, 1, 3);
  CHECK(kernel(plan_for(odd, "sm_90").key) == "direct");
  CHECK_THROWS_AS(plan_for(odd, "sm_90", "tiled:1,4,4,4,8"), Error);
  // A forced block of 16 channels needs a group's K a multiple of 16.
  const Conv3dDesc eight = test::make(2, 64, {8, 20, 30}, 64, {3, 3, 3}, 1, 1, 1, 8);
  CHECK_NOTHROW(plan_for(eight, "sm_90", "tiled:1,4,4,4,8"));
  CHECK_THROWS_AS(plan_for(eight, "sm_90", "tiled:2,4,4,4,8"), Error);
}

TEST_CASE("grouped layers whose natural tiles' rings do not fit take smaller ones where only direct would serve") {
  // 8 channels a group over 40 x 56, 16 over 19 x 30 (K / groups 12), a ResNeXt stage of 16.
  const Conv3dDesc eight = test::make(1, 64, {4, 40, 56}, 64, {3, 3, 3}, 1, 1, 1, 8, true);
  const Conv3dDesc sixteen = test::make(1, 64, {3, 19, 30}, 48, {3, 3, 3}, 1, 1, 1, 4, true);
  const Conv3dDesc stage = test::make(8, 512, {8, 28, 28}, 512, {3, 3, 3}, 1, 1, 1, 32);
  for (Conv3dDesc d : {eight, sixteen, stage}) {
    d.layout = Layout::NDHWC;
    INFO(describe(d));
    const detail::Plan plan = plan_for(d, "sm_90");
    REQUIRE(kernel(plan.key) == "grouped");
    CHECK(plan.block >= 32);
    CHECK(plan.block < 128);  // smaller than the natural tile's
  }
  // NCDHW: direct_tiled keeps the groups whose K is a multiple of 8; the others take the tiles.
  CHECK(kernel(plan_for(eight, "sm_90").key) == "direct_tiled");
  CHECK(kernel(plan_for(sixteen, "sm_90").key) == "grouped");
  // 32 channels a group: no ring of a warp's tile fits two blocks an SM.
  Conv3dDesc wide = test::make(8, 1024, {4, 14, 14}, 1024, {3, 3, 3}, 1, 1, 1, 32);
  wide.layout = Layout::NDHWC;
  CHECK(kernel(plan_for(wide, "sm_90").key) == "direct");
}

TEST_CASE("output heads of 1 to 3 channels run on direct_tiled, not direct") {
  // A U-Net's segmentation head (32 -> 2, 1 x 1 x 1), a VAE's output convolution (128 -> 3,
  // 3 x 3 x 3), a single-channel regression head: float32 NCDHW in both classes.
  for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
    for (Conv3dDesc d : {test::make(2, 32, {64, 64, 64}, 2, {1, 1, 1}, 1, 0, 1, 1, true),
                         test::make(1, 128, {8, 128, 128}, 3, {3, 3, 3}, 1, 1, 1, 1, true),
                         test::make(1, 64, {16, 64, 64}, 1, {3, 3, 3}, 1, 1)}) {
      d.precision = precision;
      INFO(describe(d));
      const detail::Plan plan = plan_for(d, "sm_90");
      CHECK(kernel(plan.key) == "direct_tiled");
      CHECK(kernel(plan_for(d, "sm_80").key) == "direct_tiled");
    }
  }
}

TEST_CASE("explain_plan walks the registry as make_plan does, a verdict for every family up to its pick") {
  std::vector<Conv3dDesc> descs = test::random_ndhwc(300, 20261205);
  for (const auto& list : test::config_cases().automatic) descs.insert(descs.end(), list.begin(), list.end());
  const auto& families = detail::registry();
  for (const char* arch : {"sm_90", "sm_80"}) {
    const detail::DeviceLimits limits = detail::limits_for_arch(arch);
    for (const Conv3dDesc& d : descs) {
      INFO(arch << " " << describe(d));
      const detail::Problem prob = detail::make_problem(d);
      std::vector<detail::FamilyVerdict> verdicts;
      const detail::Plan plan = detail::explain_plan(prob, limits, &verdicts);
      CHECK(detail::canonical_text(plan.key) == detail::canonical_text(detail::make_plan(prob, limits).key));
      REQUIRE(!verdicts.empty());
      CHECK(verdicts.back().family == plan.family);
      CHECK(verdicts.back().passed.empty());
      for (size_t i = 0; i < verdicts.size(); ++i) {
        CHECK(verdicts[i].family == families[i]);  // the planner's order, none skipped
        if (i + 1 < verdicts.size()) CHECK(!verdicts[i].passed.empty());
      }
      // A family that declines a problem it could serve offers no plan for it.
      for (const detail::Family* f : families) {
        if (f->serves_types(prob) || f->can_implement(prob, limits) || !f->declines(prob, limits)) continue;
        INFO(f->kernel().name << ": " << *f->declines(prob, limits));
        CHECK_FALSE(f->choose(prob, limits).has_value());
      }
    }
  }
}

TEST_CASE("depthwise layers stream through registers, a row group per output row") {
  // The suite's depthwise layer: OW = 56 is 14 storing lanes plus one halo lane plus one for the
  // shift (padding 1: S = 3), so a warp holds two row groups of 2 rows; 56 rows are 14 warps,
  // two even H tiles of 7.
  const Conv3dDesc depthwise = test::make(8, 64, {16, 56, 56}, 64, {3, 3, 3}, 1, 1, 1, 64);
  const detail::Plan plan = plan_for(depthwise, "sm_90");
  CHECK(kernel(plan.key) == "depthwise");
  CHECK(plan.key.field("th") == 2);   // TH
  CHECK(plan.key.field("lanes") == 16);  // lanes a row group
  CHECK(plan.key.field("warps") == 7);   // warps
  CHECK(plan.key.field("odb") == 4);   // runs of SPAN + 1 planes: one unrolled pass
  CHECK(plan.key.field("shift") == 3);   // S
  CHECK(plan.key.field("v") == 4);   // V: 16-byte loads
  CHECK(plan.block == 7 * 32);
  CHECK(plan.grid == 8 * 64 * 2 * 4);
  CHECK(plan.shared_bytes == 0);
  // Its twin for an input that is not 16-byte aligned: the same plan, element loads.
  REQUIRE(plan.unaligned);
  CHECK(plan.unaligned->key.field("v") == 1);
  for (int i = 0; i < 5; ++i) CHECK(plan.unaligned->key.config[i] == plan.key.config[i]);
  CHECK(plan.unaligned->grid == plan.grid);
  CHECK(plan.unaligned->block == plan.block);
  CHECK_FALSE(plan.unaligned->unaligned);
  // Rows that are not 16-byte multiples too: element loads only, no twin.
  const detail::Plan odd = plan_for(test::make(8, 64, {16, 54, 54}, 64, {3, 3, 3}, 1, 1, 1, 64), "sm_90");
  CHECK(kernel(odd.key) == "depthwise");
  CHECK(odd.key.field("v") == 1);
  CHECK_FALSE(odd.unaligned);
  // Wider rows take whole warps and W tiles; a channel multiplier is still one channel per group.
  const detail::Plan wide = plan_for(test::make(1, 32, {8, 30, 224}, 64, {3, 3, 3}, 1, 1, 1, 32), "sm_90");
  CHECK(kernel(wide.key) == "depthwise");
  CHECK(wide.key.field("lanes") == 32);
  // Not for it: stride along W or D, several channels per group, more than 32 taps.
  CHECK(kernel(plan_for(test::make(8, 64, {16, 56, 56}, 64, {3, 3, 3}, {1, 1, 2}, 1, 1, 64), "sm_90").key) == "grouped");
  CHECK(kernel(plan_for(test::make(8, 64, {16, 56, 56}, 64, {3, 3, 3}, 1, 1, 1, 32), "sm_90").key) == "grouped");
  CHECK(kernel(plan_for(test::make(8, 64, {16, 56, 56}, 64, {3, 5, 5}, 1, 1, 1, 64), "sm_90").key) == "grouped");
  CHECK_THROWS_AS(plan_for(depthwise, "sm_90", "depthwise:2,2,4,4"), Error);   // 2 lanes: no storing lane
  CHECK_THROWS_AS(plan_for(depthwise, "sm_90", "depthwise:5,16,4,4"), Error);  // TH > 4
  CHECK_THROWS_AS(plan_for(test::make(8, 64, {16, 56, 56}, 64, {3, 3, 3}, 1, 1, 1, 32), "sm_90",
                           "depthwise:2,16,4,4"), Error);  // two channels per group
}

TEST_CASE("every depthwise plan covers its output with aligned row loads and fits the register budget") {
  const test::DepthwiseRanges wide{4, 64, {20, 80, 300}, {3, 3, 7}, 3, 3, {3, 3, 6}, 3};
  for (const Conv3dDesc& d : test::random_depthwise(400, 1129, wide)) {
    const detail::Problem prob = detail::make_problem(d);
    const detail::Plan plan = plan_for(d, "sm_90");
    INFO(describe(d));
    REQUIRE(kernel(plan.key) == "depthwise");
    const int th = plan.key.field("th"), lanes = plan.key.field("lanes"), warps = plan.key.field("warps");
    const int odb = plan.key.field("odb"), shift = plan.key.field("shift");
    const DepthwiseGeometry g = depthwise_geometry(plan.key.kd, plan.key.kh, plan.key.kw, plan.key.sh, plan.key.dd,
                                                   plan.key.dh, plan.key.dw, th, lanes, warps, shift);
    // Every lane's float4 starts on a multiple of 4 columns: the tile starts S = -pad_w mod 4 early.
    CHECK((shift + prob.pad.before.w) % 4 == 0);
    // The storing lanes, their realignment neighbour and the halo lanes fit one row group.
    CHECK(g.stores >= 1);
    CHECK(g.stores + g.halo_lanes + (shift > 0 ? 1 : 0) == lanes);
    CHECK(g.bw == 4 * g.stores);
    // One row group covers the output row, or whole-warp row groups tile it.
    CHECK((lanes == 32 || g.bw >= prob.out.w));
    CHECK(g.threads == plan.block);
    CHECK(plan.block <= 8 * 32);
    CHECK(plan.grid == prob.out.n * prob.out.k * ((prob.out.d + odb - 1) / odb) * ((prob.out.h + g.bh - 1) / g.bh) *
                           ((prob.out.w + g.bw - 1) / g.bw));
    // Runs are one unrolled pass of the walk; the accumulators, taps and rows stay in the budget.
    CHECK(odb <= g.span + 1);
    CHECK(g.span * th * 4 <= 48);
    CHECK(g.rows <= (th == 2 ? 4 : 8));
    CHECK(plan.shared_bytes == 0);
  }
}

TEST_CASE("every plan for the GPU suite's problems fits its device") {
  std::set<std::string> seen;
  const test::ConfigCases cases = test::config_cases();
  std::vector<Conv3dDesc> all = {reference_problem()};
  for (const auto& list : cases.automatic) all.insert(all.end(), list.begin(), list.end());
  // ... and a tf32 pointwise layer whose chunks igemm_sm90 reads raw.
  all.push_back(test::make(8, 256, {8, 28, 28}, 256, {1, 1, 1}));
  all.back().precision = Precision::Tf32;
  for (const char* arch : {"sm_80", "sm_90"}) {
    const detail::DeviceLimits limits = detail::limits_for_arch(arch);
    for (const Conv3dDesc& d : all) {
      INFO(arch << " " << describe(d));
      const detail::Plan plan = plan_for(d, arch);
      seen.insert(kernel(plan.key));
      CHECK(plan.grid >= 1);
      CHECK(plan.block >= 1);  // the grouped kernel gives small planes small blocks
      CHECK(plan.block <= 1024);
      CHECK(plan.shared_bytes <= static_cast<unsigned>(limits.max_smem_per_block_optin));
      if (kernel(plan.key) == "igemm_sm90") {
        const Sm90Geometry g = sm90_geometry_of(d, plan.key);
        const int rp = plan.key.field("rp"), pp = plan.key.field("pp"), cp = plan.key.field("cp");
        CHECK(rp >= g.in_w);
        CHECK(pp >= g.in_h * rp);
        CHECK(cp >= plan.key.kd * pp);
        CHECK(plan.block == static_cast<unsigned>(g.threads));
        CHECK(plan.shared_bytes == static_cast<unsigned>(g.shared_bytes));
        CHECK(plan.prep.has_value() == (g.chunks > 1 && !plan.weight_map));  // (raw weights: no step)
      }
    }
  }
  // The list reaches every kernel family the planner picks on its own.
  CHECK(seen.count("igemm_sm90") == 1);
  CHECK(seen.count("igemm_sm80") == 1);
  CHECK(seen.count("grouped") == 1);
  CHECK(seen.count("depthwise") == 1);
  CHECK(seen.count("direct_tiled") == 1);
}


namespace {
// The forced configuration that names every chosen and optional field of plan's key by name.
std::string forced_form(const detail::Plan& plan) {
  std::string text = std::string(plan.key.kernel->name) + ":";
  const auto& fields = plan.key.kernel->fields;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].role == detail::FieldRole::Derived) continue;
    int value = plan.key.config[i];
    if (std::string(fields[i].name) == "rows") value = value > 0 ? 1 : 0;  // the key holds the width
    text += fmt::format("{}{}={}", text.back() == ':' ? "" : ",", fields[i].name, value);
  }
  return text;
}
}  // namespace

TEST_CASE("forcing the planner's own choice takes the planner's path and gives its plan") {
  const test::ConfigCases cases = test::config_cases();
  std::vector<Conv3dDesc> all = {reference_problem(), test::make(8, 256, {8, 28, 28}, 256, {1, 1, 1})};
  for (const auto& list : cases.automatic) all.insert(all.end(), list.begin(), list.end());
  std::set<std::string> seen;
  for (const char* arch : {"sm_80", "sm_90"}) {
    for (Conv3dDesc d : all) {
      for (Precision precision : {Precision::Fp32, Precision::Tf32}) {
        d.precision = precision;
        const detail::Plan plan = plan_for(d, arch);
        const std::string forced = forced_form(plan);
        INFO(arch << " " << describe(d) << " " << forced);
        const detail::Plan again = plan_for(d, arch, forced);
        seen.insert(kernel(plan.key));
        CHECK(detail::canonical_text(again.key) == detail::canonical_text(plan.key));
        CHECK(again.grid == plan.grid);
        CHECK(again.block == plan.block);
        CHECK(again.shared_bytes == plan.shared_bytes);
        CHECK(again.params.w == plan.params.w);  // a pointwise layer's flat plane too
        CHECK(again.prep.has_value() == plan.prep.has_value());
        CHECK(again.input_copy.has_value() == plan.input_copy.has_value());
        CHECK((again.unaligned != nullptr) == (plan.unaligned != nullptr));
      }
    }
  }
  CHECK(seen.size() >= 5);
}

TEST_CASE("forced configurations: positional, named and by alias, from one field table") {
  const Conv3dDesc ref = reference_problem();
  const std::string key = detail::canonical_text(plan_for(ref, "sm_90", "sm90:4,64,64,3").key);
  CHECK(detail::canonical_text(plan_for(ref, "sm_90", "igemm_sm90:4,64,64,3").key) == key);
  CHECK(detail::canonical_text(plan_for(ref, "sm_90", "igemm_sm90:th=4,tw=64,bn=64,cc=3").key) == key);
  CHECK(detail::canonical_text(plan_for(ref, "sm_90", "igemm_sm90:cc=3,bn=64,tw=64,th=4").key) == key);
  CHECK(detail::canonical_text(plan_for(ref, "sm_90", "tiled:8,1,4,3,8").key) ==
        detail::canonical_text(plan_for(ref, "sm_90", "direct_tiled:wk=8,ws=1,wr=4,cc=3,tw=8").key));
  CHECK(kernel(plan_for(ref, "sm_90", "generic").key) == "direct");
  CHECK(plan_for(ref, "sm_90", "direct").key.field("tw") == 4);
  CHECK(plan_for(ref, "sm_90", "direct:tw=2").key.field("tw") == 2);
  auto message = [&](const std::string& forced) {
    try {
      plan_for(ref, "sm_90", forced);
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::InvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto contains = [](const std::string& text, const char* part) { return text.find(part) != std::string::npos; };
  const std::string unknown = message("fast");
  CHECK(contains(unknown, "no kernel family 'fast'"));
  CHECK(contains(unknown, "igemm_sm90:th,tw,bn,cc[,tma[,rows[,planes[,across]]]]"));
  CHECK(contains(unknown, "direct[:tw]"));
  CHECK(contains(message("igemm_sm90:th=4,tw=64,bn=64"), "igemm_sm90 needs cc"));
  CHECK(contains(message("igemm_sm90:th=4,tw=64,bn=64,cc=3,rp=84"), "no field 'rp' to set"));
  CHECK(contains(message("igemm_sm90:th=4,tw=64,bn=64,cc=3,zz=1"), "no field 'zz'"));
  CHECK(contains(message("igemm_sm90:th=4,th=4,tw=64,bn=64,cc=3"), "th given twice"));
  CHECK(contains(message("igemm_sm80:128,64,1"), "too many values"));
  CHECK(contains(message("igemm_sm80:128,x"), "bn = 'x' is not a non-negative integer"));
  CHECK(contains(message("grouped:8,64,2,4,4"), "grouped needs groups > 1"));
  CHECK(contains(message("igemm_sm90:4,64,96,3"), "igemm_sm90 needs groups == 1, compute"));
  CHECK(contains(message("direct:3"), "direct needs tw 1, 2, 4 or 8"));
  // Every family and every field appear in the help text, with what they mean, the meanings
  // starting in one column (one past the longest name).
  const std::string help = detail::config_help();
  size_t width = 0;
  for (const detail::Family* f : detail::registry()) {
    for (const detail::FieldInfo& field : f->kernel().fields) width = std::max(width, std::strlen(field.name));
  }
  for (const detail::Family* f : detail::registry()) {
    CHECK(help.find(f->kernel().name) != std::string::npos);
    for (const detail::FieldInfo& field : f->kernel().fields) {
      INFO(f->kernel().name << "." << field.name);
      CHECK(help.find(fmt::format("\n    {:<{}} {}", field.name, width, field.help)) != std::string::npos);
    }
  }
}

TEST_CASE("igemm_sm90's padding passes write each padded cell the gather reads once, from cells inside") {
  // Boxes at every offset around small inputs, with dilated planes and shifted rows: the column
  // pass must cover exactly the columns outside along W, the row pass the other cells of the rows
  // outside along D or H, 16 bytes only where aligned and inside.
  int boxes = 0;
  for (const int dd : {1, 2}) {
    for (const int shift : {0, 1, 3}) {
      for (const auto& [extent, in_h, in_w] : {std::array<int, 3>{5, 3, 7}, {8, 6, 12}, {3, 5, 9}, {13, 4, 17}}) {
        const int in_d = 3, channels = 2, rp = sm90_tma_row(in_w, shift);
        for (int id0 = -3 * dd; id0 <= extent; id0 += 2) {
          for (int ih0 = -in_h; ih0 <= extent; ++ih0) {
            for (int iw0 = -in_w - shift; iw0 <= extent; ++iw0) {
              const Sm90Border b = sm90_border(id0, ih0, iw0, shift, dd, in_d, in_h, in_w, extent, extent, extent);
              const Sm90Span span = sm90_border_span(b, shift, in_w);
              std::vector<int> written(static_cast<size_t>(channels * in_d * in_h * rp), 0);
              auto at = [&](int c, int z, int y, int x) -> int& { return written[((c * in_d + z) * in_h + y) * rp + x]; };
              auto outside = [&](int v) { return v < 0 || v >= extent; };
              // The first wrong cell of a box, if any (one check a box: they are many).
              std::string wrong;
              auto fail = [&](const std::string& what) {
                if (wrong.empty()) wrong = what;
              };
              const int columns = channels * in_d * in_h * (b.left + b.right);
              for (int i = 0; i < columns; ++i) {
                const Sm90BorderCell cell = sm90_border_column(b, i, shift, in_d, in_h, in_w);
                if (!outside(iw0 + cell.x)) fail(fmt::format("column cell {} inside along W", i));
                ++at(cell.c, cell.z, cell.y, cell.x);
              }
              const int units = channels * sm90_border_rows(b, in_d, in_h) * span.units;
              for (int i = 0; i < units; ++i) {
                const Sm90BorderCell cell = sm90_border_row(b, span, i, in_d, in_h);
                if (!outside(id0 + cell.z * dd) && !outside(ih0 + cell.y)) fail(fmt::format("row unit {} of a row inside", i));
                if (cell.x < span.lo || cell.x + (cell.vec ? 4 : 1) > span.hi) fail(fmt::format("row unit {} outside along W", i));
                if (cell.vec && cell.x % 4 != 0) fail(fmt::format("row unit {}: 16 bytes unaligned", i));
                for (int e = 0; e < (cell.vec ? 4 : 1); ++e) ++at(cell.c, cell.z, cell.y, cell.x + e);
              }
              for (int c = 0; c < channels; ++c) {
                for (int z = 0; z < in_d; ++z) {
                  for (int y = 0; y < in_h; ++y) {
                    for (int x = shift; x < shift + in_w; ++x) {
                      const bool padded = outside(id0 + z * dd) || outside(ih0 + y) || outside(iw0 + x);
                      if (at(c, z, y, x) != (padded ? 1 : 0)) {
                        fail(fmt::format("cell {}, {}, {}, {} written {} times", c, z, y, x, at(c, z, y, x)));
                      }
                    }
                  }
                }
              }
              INFO("box at " << id0 << ", " << ih0 << ", " << iw0 << ", dilation " << dd << ", shift " << shift);
              CHECK(wrong == "");
              ++boxes;
            }
          }
        }
      }
    }
  }
  CHECK(boxes > 10000);
}

TEST_CASE("igemm_sm90 stages padding modes by TMA boxes where float rows need no pitched copy, in the tf32 class") {
  // The kernel rewrites a box's zero-filled padding from the mode; with W % 4 != 0 the box would
  // read a pitched copy of the input, a pass that cp.async staging does without. The fp32 class
  // keeps cp.async for padding modes unless a configuration forces boxes.
  for (const PaddingMode mode : {PaddingMode::Zeros, PaddingMode::Replicate, PaddingMode::Reflect, PaddingMode::Circular}) {
    for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
      for (const int64_t w : {64, 62}) {
        Conv3dDesc d = test::make(1, 128, {9, 64, w}, 128, {3, 3, 3}, 1, Padding::per_side({2, 1, 1}, {0, 1, 1}));
        d.padding_mode = mode;
        d.precision = precision;
        const detail::Plan plan = plan_for(d, "sm_90");
        INFO(describe(d) << ": " << detail::canonical_text(plan.key));
        REQUIRE(kernel(plan.key) == "igemm_sm90");
        const bool boxed = mode == PaddingMode::Zeros || (w % 4 == 0 && precision == Precision::Tf32);
        CHECK(plan.key.field("tma") == (boxed ? 1 : 0));
        CHECK(plan.copies_input(true) == (boxed && w % 4 != 0));
        if (mode != PaddingMode::Zeros && w % 4 == 0) {  // (a forced box)
          const detail::Plan forced = plan_for(d, "sm_90", fmt::format("sm90:{},{},{},{},1", plan.key.field("th"),
                                                                      plan.key.field("tw"), plan.key.field("bn"),
                                                                      plan.key.field("cc")));
          CHECK(forced.key.field("tma") == 1);
        }
      }
    }
  }
}

TEST_CASE("causal, replicate and reflect padding add no pass and no scratch memory to a plan") {
  // A video VAE's causal conv (zeros before in time) and replicate- and reflect-padded ones, in
  // both float32 classes and bf16, both layouts: the padded plan runs one convolution kernel, after
  // the same weight preparation (scratch of the same size) and input copies as the layer without
  // padding (float32 NCDHW copies an aligned input never; half NCDHW inputs on igemm_sm90_half go
  // channels-last on every call, padded or not).
  struct Type {
    DataType dtype;
    Precision precision;
  };
  for (const PaddingMode mode : {PaddingMode::Zeros, PaddingMode::Replicate, PaddingMode::Reflect}) {
    for (const Type type : {Type{DataType::Float32, Precision::Fp32}, Type{DataType::Float32, Precision::Tf32},
                            Type{DataType::BFloat16, Precision::Fp32}}) {
      for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
        for (const int64_t c : {16, 128}) {
          Conv3dDesc padded = test::make(1, c, {8, 64, 64}, 128, {3, 3, 3}, 1,
                                         mode == PaddingMode::Zeros ? Padding::per_side({2, 1, 1}, {0, 1, 1}) : Padding(1));
          padded.padding_mode = mode;
          padded.dtype = type.dtype;
          padded.precision = type.precision;
          padded.layout = layout;
          Conv3dDesc unpadded = padded;
          unpadded.padding = Padding(0);
          unpadded.padding_mode = PaddingMode::Zeros;
          const detail::Plan with = plan_for(padded, "sm_90"), without = plan_for(unpadded, "sm_90");
          INFO(describe(padded) << ": " << detail::canonical_text(with.key));
          CHECK(kernel(with.key) == kernel(without.key));
          if (type.dtype == DataType::Float32 && layout == Layout::NCDHW) CHECK(!with.copies_input(true));
          for (const bool aligned : {true, false}) {
            CHECK((!with.copies_input(aligned) || without.copies_input(aligned)));
            if (with.copies_input(aligned)) {
              CHECK(with.for_input(aligned).input_copy->workspace_bytes <=
                    without.for_input(aligned).input_copy->workspace_bytes);
            }
          }
          REQUIRE(with.prep.has_value() == without.prep.has_value());
          if (with.prep) CHECK(with.prep->workspace_bytes == without.prep->workspace_bytes);
        }
      }
    }
  }
}

TEST_CASE("float32 NDHWC layers with long kernels take narrower igemm_sm90 columns, not direct") {
  // 3xTF32's chunk weights of a 5 x 5 x 5 kernel at 128 columns need 262 KB for two buffers; the
  // tf32 class's 7 x 7 x 7 at 128 as well (of fewer than 32 channels: igemm_sm90_half takes more).
  // NCDHW layers keep declining (igemm_sm80 serves them).
  struct Case {
    Conv3dDesc desc;
    Precision precision;
    int bn;
  };
  for (Case c : {Case{test::make(1, 48, {4, 28, 28}, 128, {5, 5, 5}, 1, 2), Precision::Fp32, 32},
                 Case{test::make(2, 96, {4, 56, 63}, 96, {4, 7, 5}, 1, Dims3{2, 3, 2}), Precision::Fp32, 32},
                 Case{test::make(2, 24, {16, 28, 28}, 512, {7, 7, 7}, 1, 3), Precision::Tf32, 64}}) {
    c.desc.layout = Layout::NDHWC;
    c.desc.precision = c.precision;
    INFO(describe(c.desc));
    const detail::Plan plan = plan_for(c.desc, "sm_90");
    REQUIRE(kernel(plan.key) == "igemm_sm90");
    CHECK(plan.key.field("bn") == c.bn);
    c.desc.layout = Layout::NCDHW;
    CHECK(kernel(plan_for(c.desc, "sm_90").key) != "igemm_sm90");
  }
}

TEST_CASE("float32 NDHWC layers run on wgmma from a transposed copy of the input, outputs from registers") {
  // The reference problem (row tiles, two planes in tf32), C3D's conv3b (chunks), a pointwise
  // layer (a flat plane) and a reflect-padded one with W % 4 != 0, in both float32 classes: the
  // NCDHW twin's tiles where it has no output staging (a padding mode may take boxes where the
  // twin has none: the copy is made anyway), an input copy on every call (the kernel reads NCDHW
  // rows of W rounded up to 4 floats), and no output staging. In the tf32 class,
  // layers of 32 channels or more run on igemm_sm90_half instead, reading input and weight in
  // place.
  Conv3dDesc odd = test::make(2, 5, {7, 9, 11}, 33, {3, 3, 3}, 1, 1);
  odd.padding_mode = PaddingMode::Reflect;
  for (const Conv3dDesc& base : {reference_problem(), test::make(8, 256, {8, 28, 28}, 256, {3, 3, 3}, 1, 1),
                                 test::make(8, 512, {4, 14, 14}, 2048, {1, 1, 1}), odd}) {
    for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
      Conv3dDesc d = base;
      d.precision = precision;
      d.layout = Layout::NDHWC;
      Conv3dDesc ncdhw = d;
      ncdhw.layout = Layout::NCDHW;
      const detail::Plan plan = plan_for(d, "sm_90"), twin = plan_for(ncdhw, "sm_90");
      INFO(describe(d) << ": " << detail::canonical_text(plan.key));
      if (precision == Precision::Tf32 && d.c >= 32) {
        CHECK(kernel(plan.key) == "igemm_sm90_half");
        CHECK_FALSE(plan.input_copy);
        CHECK_FALSE(plan.prep);
        continue;
      }
      REQUIRE(kernel(plan.key) == "igemm_sm90");
      CHECK(plan.key.layout == Layout::NDHWC);
      CHECK(plan.store_channels == 0);
      CHECK(sm90_geometry_of(d, plan.key).store_channels == 0);
      if (twin.store_channels == 0) {
        for (const char* field : {"th", "tw", "bn", "cc", "rows", "planes"}) {
          CHECK(plan.key.field(field) == twin.key.field(field));
        }
      }
      REQUIRE(plan.input_copy);
      CHECK(kernel(plan.input_copy->key) == "pitch_rows");
      CHECK(plan.input_copy->key.layout == Layout::NDHWC);
      CHECK(plan.copies_input(true));
      CHECK(plan.input_copy->workspace_bytes ==
            static_cast<uint64_t>(plan.params.n * plan.params.c * plan.params.d * plan.params.h *
                                  detail::input_row_pitch(plan.params.w) * 4));
      if (plan.prep) CHECK(plan.prep->key.layout == Layout::NDHWC);  // the weights, read in their order
    }
  }
  // Layers that NCDHW hands to igemm_sm80 or direct_tiled (a pointwise plane its tiles fill to
  // 75 %, K < 16) have no such kernel in NDHWC: they keep the wgmma rather than direct's FFMA.
  for (Conv3dDesc d : {test::make(2, 128, {4, 6, 8}, 96, {1, 1, 1}), test::make(1, 8, {6, 10, 12}, 5, {3, 3, 3})}) {
    d.layout = Layout::NDHWC;
    INFO(describe(d));
    CHECK(kernel(plan_for(d, "sm_90").key) == "igemm_sm90");
  }
  // An image of 2^31 input positions or more (stride 2: its output is an eighth of that) is past
  // the copy's 32-bit position count: the generic kernel.
  Conv3dDesc huge = test::make(1, 4, {1300, 1300, 1300}, 16, {3, 3, 3}, 2, 1);
  huge.layout = Layout::NDHWC;
  CHECK(kernel(plan_for(huge, "sm_90").key) == "direct");
  huge.layout = Layout::NCDHW;
  CHECK(kernel(plan_for(huge, "sm_90").key) == "igemm_sm90");
  // Half types in NDHWC: fewer than 8 channels widened and transposed by the copy (the copy's
  // key holds the input's type and layout); 8 to 31 on igemm_sm80's 16-byte channel groups, 32
  // and more read in place by igemm_sm90_half.
  for (const int64_t c : {3, 7, 8, 16, 31, 32, 48}) {
    Conv3dDesc half = test::make(2, c, {5, 8, 9}, 70, {3, 3, 3}, 1, 1);
    half.dtype = DataType::BFloat16;
    half.layout = Layout::NDHWC;
    const detail::Plan plan = plan_for(half, "sm_90");
    INFO(describe(half) << ": " << detail::canonical_text(plan.key));
    if (c < 8) {
      REQUIRE(kernel(plan.key) == "igemm_sm90");
      REQUIRE(plan.input_copy);
      CHECK(plan.copies_input(true));
      CHECK(plan.input_copy->key.dtype == DataType::BFloat16);
      CHECK(plan.input_copy->key.layout == Layout::NDHWC);
    } else {
      CHECK(kernel(plan.key) == (c < 32 ? "igemm_sm80" : "igemm_sm90_half"));
    }
  }
}

TEST_CASE("random NDHWC descriptions of every type plan on sm_90 and sm_80, one group mostly on tensor cores") {
  std::map<std::string, int> families;
  for (const Conv3dDesc& d : test::random_ndhwc(2000, 20261204)) {
    INFO(describe(d));
    const detail::Plan planned = plan_for(d, "sm_90");
    REQUIRE_NOTHROW(plan_for(d, "sm_80"));
    ++families[kernel(planned.key)];
    // Float32 layers of one group on sm_90: igemm_sm90 wherever its search finds a tile, but for
    // the tf32 class's that igemm_sm90_half reads in place.
    if (d.groups == 1 && d.dtype == DataType::Float32 && kernel(planned.key) != "igemm_sm90" &&
        kernel(planned.key) != "igemm_sm90_half") {
      const auto& all = detail::registry();
      const auto sm90 = std::find_if(all.begin(), all.end(),
                                     [](const detail::Family* f) { return f->kernel().name == std::string("igemm_sm90"); });
      REQUIRE(sm90 != all.end());
      CHECK((*sm90)->candidates(detail::make_problem(d), detail::limits_for_arch("sm_90"), 1).empty());
    }
  }
  INFO(fmt::format("{}", fmt::join(families, ", ")));
  CHECK(families["igemm_sm90"] > 500);
}

TEST_CASE("grouped and depthwise NDHWC layers plan the grouped kernel") {
  for (const int64_t groups : {8, 32, 64}) {
    Conv3dDesc d = test::make(2, 64, {8, 28, 28}, 64, {3, 3, 3}, 1, 1, 1, groups);
    d.layout = Layout::NDHWC;
    INFO(describe(d));
    const detail::Plan plan = plan_for(d, "sm_90");
    CHECK(kernel(plan.key) == "grouped");
    CHECK(plan.key.layout == Layout::NDHWC);
    d.layout = Layout::NCDHW;
    CHECK(kernel(plan_for(d, "sm_90").key) == (groups == 64 ? "depthwise" : "grouped"));
  }
}

TEST_CASE("an NDHWC weight row holds term c * KVOL + tap at tap * CG + c") {
  for (int cg : {1, 3, 16}) {
    for (int kvol : {1, 27, 105}) {
      std::set<int> seen;
      for (int term = 0; term < cg * kvol; ++term) {
        const int at = weight_term(term, cg, kvol, true);
        CHECK(at == term % kvol * cg + term / kvol);
        CHECK(weight_term(term, cg, kvol, false) == term);
        seen.insert(at);
      }
      CHECK(seen.size() == static_cast<size_t>(cg * kvol));
      CHECK(*seen.rbegin() == cg * kvol - 1);
    }
  }
}

TEST_CASE("an NDHWC input's transpose spreads over about 2048 blocks, 1 to 32 steps each") {
  for (const auto& [n, c, positions] : std::vector<std::array<long long, 3>>{
           {3, 24, 17 * 31 * 45}, {2, 32, 64 * 64 * 64}, {16, 3, 64 * 64 * 64}, {8, 128, 16 * 56 * 56}, {1, 1, 1}}) {
    const long long steps = n * ((c + 31) / 32) * ((positions + 63) / 64);
    const long long per_block = pitch_rows_steps(n, c, positions);
    INFO(n << " x " << c << " x " << positions << ": " << steps << " steps, " << per_block << " a block");
    CHECK(per_block >= 1);
    CHECK(per_block <= 32);
    const long long blocks = (steps + per_block - 1) / per_block;
    CHECK((blocks <= 2048 || per_block == 32));
    CHECK((blocks >= 1024 || per_block == 1));
  }
  const detail::Plan plan = plan_for([] {
    Conv3dDesc d = test::make(3, 24, {17, 31, 45}, 40, {3, 3, 3}, 1, 1);
    d.layout = Layout::NDHWC;
    return d;
  }(), "sm_90");
  REQUIRE(plan.input_copy);
  CHECK(plan.input_copy->grid * plan.input_copy->block >= 256);
}
