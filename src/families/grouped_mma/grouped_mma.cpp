// grouped_mma: grouped bf16 / fp16 layers of 4, 8, 16, .. channels a group on mma.sync tensor cores
// (sm_80 or newer): a block stages a TH x TW output tile's input for GB groups, channels-last, and
// its warps gather A fragments with ldmatrix at each tap (docs/kernels/grouped_mma.md).
#include <algorithm>

#include "grouped_mma/geometry.cuh"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {
namespace {

namespace geo = grouped_mma_geometry;

struct GroupedMmaConfig {
  int th, tw, gb, odb, nw, wm, ng;
};

const ConfigTable<GroupedMmaConfig, 7> kTable{{{
    {{"th", FieldRole::Chosen, "output rows a tile"}, &GroupedMmaConfig::th},
    {{"tw", FieldRole::Chosen, "output columns a tile (TH x TW <= 256)"}, &GroupedMmaConfig::tw},
    {{"gb", FieldRole::Chosen, "groups a block, dividing the groups"}, &GroupedMmaConfig::gb},
    {{"odb", FieldRole::Chosen, "output planes a block walks, its input planes in a ring (<= 1024)"},
     &GroupedMmaConfig::odb},
    {{"nw", FieldRole::Optional,
      "column blocks of 8 a warp, dividing K / groups / 8 (default: the most whose weights fit 64 registers)"},
     &GroupedMmaConfig::nw},
    {{"wm", FieldRole::Optional, "warps a group's column blocks share, each taking every WM-th m16 block (default 1)"},
     &GroupedMmaConfig::wm},
    {{"ng", FieldRole::Derived, "column blocks of 8 a group: K / groups / 8 rounded up"}, &GroupedMmaConfig::ng},
}}};

/// Tiles of at most this many output positions (16 m16 blocks a warp).
constexpr int kMaxTilePositions = 256;
/// Threads a block at most: two blocks an SM at the 128 registers a thread's weights and
/// accumulators need, so that a budget that spills can be relaxed to one (blocks_an_sm).
constexpr int kMaxThreads = 256;
/// Shared memory a block's input tile may take where the planner chooses it: four blocks an SM.
constexpr int kChosenSharedBytes = 48 * 1024;
/// Warps a block where the planner chooses it.
constexpr int kChosenWarps = 8;
/// Registers a thread's column blocks may take where the planner chooses NW (widest_nw).
constexpr int kMaxChosenColumnRegisters = 128;

geo::GroupedMmaGeometry geometry(int cg, int kd, int kh, int kw, int sd, int sh, int sw, int dd, int dh, int dw,
                                 const GroupedMmaConfig& c) {
  return geo::geometry(cg, kd, kh, kw, sd, sh, sw, dd, dh, dw, c.th, c.tw, c.gb, c.ng, c.nw, c.wm, c.odb);
}

geo::GroupedMmaGeometry geometry(const Problem& prob, const GroupedMmaConfig& c) {
  const Conv3dDesc& d = prob.desc;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return geometry(i(prob.c_per_group), i(d.kernel.d), i(d.kernel.h), i(d.kernel.w), i(d.stride.d), i(d.stride.h),
                  i(d.stride.w), i(d.dilation.d), i(d.dilation.h), i(d.dilation.w), c);
}

int blocks_an_sm(const SpecKey& key) {
  const GroupedMmaConfig c = kTable.load(key.config);
  return geometry(key.c_per_group, key.kd, key.kh, key.kw, key.sd, key.sh, key.sw, key.dd, key.dh, key.dw, c)
      .min_blocks;
}

long long blocks(const Problem& prob, const GroupedMmaConfig& c) {
  return prob.out.n * ceil_div(prob.out.d, c.odb) * (prob.desc.groups / c.gb) * ceil_div(prob.out.h, c.th) *
         ceil_div(prob.out.w, c.tw);
}

long long items(const Problem& prob) {
  return prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w * geo::pieces(static_cast<int>(prob.c_per_group));
}

Refusal refusal(const Problem& prob, const DeviceLimits& limits) {
  const Conv3dDesc& d = prob.desc;
  const long long limit = (1LL << 31) - 1;
  if (d.groups == 1) return "groups > 1";
  if (limits.cc_major < 8) return "sm_80 or newer";
  if (prob.c_per_group % 8 != 0 && prob.c_per_group != 4) {
    return "input channels a group a multiple of 8, or 4 (16-byte rows of a tap's channels)";
  }
  if (prob.k_per_group % 8 != 0 && prob.k_per_group != 4) {
    return "output channels a group a multiple of 8, or 4 (m16n8 column blocks)";
  }
  if (items(prob) > geo::kMaxItems) {
    return "at most 64 pieces of 8 channels an output (C / groups rounded up to 8, x KD x KH x KW): longer chains "
           "of mma.sync drift";
  }
  if (std::max({d.d, d.h, d.w, prob.out.d, prob.out.h, prob.out.w}) > limit) return "extents below 2^31";
  return std::nullopt;
}

// Column blocks a warp: NW must divide NG, and the B fragments (2 registers a step and column
// block) fit their 64 registers.
bool nw_fits(const Problem& prob, int nw) {
  const long long ng = ceil_div(prob.k_per_group, 8), steps = (items(prob) + 1) / 2;
  return nw >= 1 && ng % nw == 0 && steps * nw * 2 <= geo::kMaxWeightRegisters;
}

bool fits(const Problem& prob, const DeviceLimits& limits, const GroupedMmaConfig& c) {
  if (refusal(prob, limits) || c.th < 1 || c.tw < 1 || c.th * c.tw > kMaxTilePositions || c.gb < 1 ||
      prob.desc.groups % c.gb != 0 || !nw_fits(prob, c.nw) || c.wm < 1 || c.wm > (c.th * c.tw + 15) / 16 ||
      c.odb < 1 || c.odb > 1024) {
    return false;
  }
  const geo::GroupedMmaGeometry g = geometry(prob, c);
  return g.threads <= kMaxThreads && g.shared_bytes + kSharedPerBlockReserved <= limits.max_smem_per_block_optin &&
         blocks(prob, c) <= (1LL << 31) - 1;
}

// The most column blocks a warp whose weights fit its registers (K / groups / 8 of them, or a
// divisor), and whose per-column registers together stay within 128: 2 a step of weights, 4
// accumulators (an m16 block at a time) and 2 of bias. Groups of 256 output channels had spilled
// with all their column blocks in one warp: 32 of one step (80 bytes at 255 registers), 16 of two
// (16 bytes).
int widest_nw(const Problem& prob) {
  const long long steps = (items(prob) + 1) / 2;
  int nw = static_cast<int>(ceil_div(prob.k_per_group, 8));
  while (nw > 1 && (!nw_fits(prob, nw) || nw * (2 * steps + 6) > kMaxChosenColumnRegisters)) --nw;
  return nw;
}

class GroupedMmaFamily final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  const char* arch() const override { return "sm_80 or newer"; }

  Refusal serves_types(const Problem& prob) const override {
    if (prob.desc.dtype == DataType::Float32) return "bf16 / fp16 tensors";
    return std::nullopt;
  }

  Refusal can_implement(const Problem& prob, const DeviceLimits& limits) const override {
    return refusal(prob, limits);
  }

  // Columns: the whole output row up to 32, else the row split evenly into tiles of at most 32
  // (a tile's positions are a row-major TH x TW block, so no width wastes a column more than the
  // split does). Rows: about 128 positions a tile (8 m16 blocks), split evenly over OH. Warps: a
  // group's column blocks, NW a warp (the most whose weights fit 64 registers). Groups: the most
  // that divide the layer's, up to 8 warps and 48 KB of input tile a block; then runs of planes;
  // a group of more than 8 warps' columns is left to the families after it.
  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    if (refusal(prob, limits)) return std::nullopt;
    const GroupedMmaConfig c = chosen(prob, limits);
    if (!fits(prob, limits, c)) return std::nullopt;
    return plan(prob, c);
  }

  // choose()'s tile, then half and twice its groups a block, and tiles of half and twice its rows.
  std::vector<Plan> candidates(const Problem& prob, const DeviceLimits& limits, int count) const override {
    std::vector<Plan> plans;
    if (refusal(prob, limits)) return plans;
    const GroupedMmaConfig best = chosen(prob, limits);
    std::vector<GroupedMmaConfig> tiles = {best};
    for (const int gb : {best.gb / 2, best.gb * 2}) tiles.push_back({best.th, best.tw, gb, best.odb, best.nw, best.wm, best.ng});
    for (const int th : {best.th / 2, best.th * 2}) tiles.push_back({th, best.tw, best.gb, best.odb, best.nw, best.wm, best.ng});
    for (const int odb : {best.odb / 2, best.odb * 2}) tiles.push_back({best.th, best.tw, best.gb, odb, best.nw, best.wm, best.ng});
    for (const int wm : {best.wm / 2, best.wm * 2}) tiles.push_back({best.th, best.tw, best.gb, best.odb, best.nw, wm, best.ng});
    for (const GroupedMmaConfig& c : tiles) {
      if (fits(prob, limits, c)) plans.push_back(plan(prob, c));
    }
    return distinct_plans(std::move(plans), count);
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    GroupedMmaConfig c = kTable.apply(GroupedMmaConfig{0, 0, 0, 0, 0, 1, 0}, forced);
    c.ng = static_cast<int>(ceil_div(prob.k_per_group, 8));
    if (!forced.get("nw")) c.nw = widest_nw(prob);
    if (!fits(prob, limits, c)) {
      refuse_config(forced, "groups > 1, sm_80 or newer, bf16 / fp16, channels a group (in and out) multiples of 8 or "
                            "4, at most 64 pieces of 8 channels an output, TH x TW <= 256 positions, GB dividing the groups, NW "
                            "dividing K / groups / 8 with 2 x NW registers a step of 16 terms at most 64, WM at most the tile's "
                            "m16 blocks, at most "
                            "256 threads, and the input tile within a block's shared memory");
    }
    return plan(prob, c);
  }

 private:
  static GroupedMmaConfig chosen(const Problem& prob, const DeviceLimits& limits) {
    GroupedMmaConfig c{};
    c.ng = static_cast<int>(ceil_div(prob.k_per_group, 8));
    c.nw = widest_nw(prob);
    c.wm = 1;
    c.odb = 1;
    const long long tiles_w = ceil_div(prob.out.w, 32);
    c.tw = static_cast<int>(ceil_div(prob.out.w, tiles_w));
    const long long rows = std::min<long long>(std::max(1, 128 / c.tw), prob.out.h);
    c.th = static_cast<int>(ceil_div(prob.out.h, ceil_div(prob.out.h, rows)));
    const int warps_per_group = c.ng / c.nw;
    c.gb = 1;
    for (int gb = 2; gb <= prob.desc.groups && gb * warps_per_group <= kChosenWarps; ++gb) {
      if (prob.desc.groups % gb != 0) continue;
      GroupedMmaConfig wider = c;
      wider.gb = gb;
      if (geometry(prob, wider).shared_bytes > kChosenSharedBytes || !fits(prob, limits, wider)) break;
      c.gb = gb;
    }
    // Runs of output planes: the longest of OD, 16, 8, 4, 2 whose ring fits the same 48 KB and
    // whose blocks still give every SM one, for blocks of 4 warps or more (a smaller block waits on
    // its own copies at every plane: a stride-2 layer of one warp a block ran 1.4x slower in runs).
    if (geometry(prob, c).threads >= 128) {
      for (const int64_t odb : {prob.out.d, int64_t{16}, int64_t{8}, int64_t{4}, int64_t{2}}) {
        GroupedMmaConfig run = c;
        run.odb = static_cast<int>(std::min<int64_t>(odb, 1024));
        if (odb > prob.out.d || odb < 2 || geometry(prob, run).shared_bytes > kChosenSharedBytes ||
            blocks(prob, run) < kWaveBlocks || !fits(prob, limits, run)) {
          continue;
        }
        c.odb = run.odb;
        break;
      }
    }
    return c;
  }

  Plan plan(const Problem& prob, const GroupedMmaConfig& c) const {
    const geo::GroupedMmaGeometry g = geometry(prob, c);
    Plan plan = new_plan(prob, *this, kTable, c, g.threads, g.shared_bytes);
    plan.grid = checked_grid(blocks(prob, c), *this);
    return plan;
  }

  const KernelDef def_{"grouped_mma", "grouped_mma/grouped_mma.cu", kUsesConvolution, false, kTable.infos(),
                       &blocks_an_sm};
};

}  // namespace

const Family& grouped_mma_family() {
  static const GroupedMmaFamily family;
  return family;
}

}  // namespace conv3djit::detail
