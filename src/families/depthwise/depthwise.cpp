// depthwise: one input channel per group, unit stride along D and W; a thread computes TH rows x
// 4 columns of one channel over a run of output planes, entirely in registers
// (docs/kernels/depthwise.md). Faster than grouped on every depthwise layer measured.
#include <algorithm>
#include <memory>

#include "depthwise/geometry.cuh"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {
namespace {

struct DepthwiseConfig {
  int th, lanes, warps, odb;
  int shift;  // columns a tile starts early, so that its float4s are 16-byte aligned
  int v;      // 4: 16-byte input loads (W % 4 == 0, an aligned input), 1: element by element
};

const ConfigTable<DepthwiseConfig, 6> kTable{{{
    {{"th", FieldRole::Chosen, "output rows a thread, 1..4"}, &DepthwiseConfig::th},
    {{"lanes", FieldRole::Chosen, "lanes of a row group, 1..32, leaving a storing lane after the halo"},
     &DepthwiseConfig::lanes},
    {{"warps", FieldRole::Chosen, "warps a block, 1..32"}, &DepthwiseConfig::warps},
    {{"odb", FieldRole::Chosen, "output planes a block walks, >= 1"}, &DepthwiseConfig::odb},
    {{"shift", FieldRole::Derived, "columns a tile starts early: -padding[W] mod 4"}, &DepthwiseConfig::shift},
    {{"v", FieldRole::Derived, "floats an input load: 4 where W % 4 == 0 and the input is 16-byte aligned, else 1"},
     &DepthwiseConfig::v},
}}};

// The lanes' float4s are 16-byte aligned when the tile starts S = -pad_w mod 4 columns early.
int depthwise_shift(const Problem& prob) { return static_cast<int>((4 - prob.pad.before.w % 4) % 4); }

DepthwiseGeometry geometry(const Problem& prob, const DepthwiseConfig& c) {
  const Conv3dDesc& d = prob.desc;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return depthwise_geometry(i(d.kernel.d), i(d.kernel.h), i(d.kernel.w), i(d.stride.h), i(d.dilation.d),
                            i(d.dilation.h), i(d.dilation.w), c.th, c.lanes, c.warps, depthwise_shift(prob));
}

long long blocks(const Problem& prob, const DepthwiseConfig& c, const DepthwiseGeometry& g) {
  return prob.out.n * prob.out.k * ceil_div(prob.out.d, c.odb) * ceil_div(prob.out.h, g.bh) *
         ceil_div(prob.out.w, g.bw);
}

Refusal refusal(const Problem& prob) {
  const Conv3dDesc& d = prob.desc;
  if (d.groups == 1 || prob.c_per_group != 1) return "one input channel per group";
  if (d.stride.d != 1 || d.stride.w != 1) return "stride 1 along D and W";
  if (d.kernel.d * d.kernel.h * d.kernel.w > 32) return "at most 32 taps";
  return std::nullopt;
}

// One input channel per group, unit stride along D and W; the taps in registers (<= 32), at
// most 48 accumulators and 8 input rows a plane, a storing lane in every row group, at most 1024
// threads; extents and the block index in 32 bits.
bool fits(const Problem& prob, const DepthwiseConfig& c, const DepthwiseGeometry& g) {
  const long long limit = (1LL << 31) - 1;
  const Conv3dDesc& d = prob.desc;
  const bool shapes = c.th >= 1 && c.th <= 4 && c.lanes <= 32 && c.warps >= 1 && c.warps <= 32 && c.odb >= 1 &&
                      g.stores >= 1 && g.span * c.th * 4 <= 48 && g.rows <= 8;
  const bool extents = std::max({d.d * d.h * d.w, prob.out.d * prob.out.h * prob.out.w}) <= limit;
  return !refusal(prob) && shapes && extents && blocks(prob, c, g) <= limit;
}

class DepthwiseFamily final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  Refusal can_implement(const Problem& prob, const DeviceLimits&) const override { return refusal(prob); }

  // Two rows a thread; a row group as wide as the output row (up to 32 lanes, W tiles beyond);
  // warps so that H tiles are even, up to 8 a block. Runs of SPAN + 1 output planes: the kernel's
  // walk is then one unrolled pass of straight-line code, which ptxas fits in its register cap;
  // longer runs loop and spill at it.
  std::optional<Plan> choose(const Problem& prob, const DeviceLimits&) const override {
    DepthwiseConfig c{2, 32, 1, 1, 0, 0};
    // A second row a thread only where its accumulators, weights and input rows fit the kernel's
    // budget (ptxas holds 21 warps an SM to 80 registers): at most 3 planes of span, 27 taps and
    // 4 input rows (3x3x3 fits in 79; a dilated or strided KH = 3 needs 5-6 rows and spilled).
    const DepthwiseGeometry two = geometry(prob, c);
    if (two.span > 3 || two.kvol > 27 || two.rows > 4) c.th = 1;
    const DepthwiseGeometry full = geometry(prob, c);
    const long long overhead = c.lanes - full.stores;
    c.lanes = static_cast<int>(std::min<long long>(32, ceil_div(prob.out.w, 4) + overhead));
    const long long rows_per_warp = 32 / c.lanes * c.th;
    const long long warps = ceil_div(prob.out.h, rows_per_warp);
    c.warps = static_cast<int>(ceil_div(warps, ceil_div(warps, 8)));
    c.odb = static_cast<int>(std::min<long long>(prob.out.d, full.span + 1));
    const DepthwiseGeometry g = geometry(prob, c);
    if (!fits(prob, c, g)) return std::nullopt;
    return plan(prob, c, g);
  }

  Plan force(const Problem& prob, const DeviceLimits&, const ForcedConfig& forced) const override {
    const DepthwiseConfig c = kTable.apply(DepthwiseConfig{}, forced);
    const bool ok = c.th >= 1 && c.th <= 4 && c.lanes >= 1 && c.lanes <= 32 && c.warps >= 1 && c.warps <= 32 &&
                    c.odb >= 1;
    const DepthwiseGeometry g = ok ? geometry(prob, c) : DepthwiseGeometry{};
    if (!ok || !fits(prob, c, g)) {
      refuse_config(forced, "one input channel per group, stride 1 along D and W, at most 32 taps, TH in 1..4, "
                            "L lanes in 1..32 leaving a storing lane after the halo, 1..32 warps, ODB >= 1, at "
                            "most 48 accumulators and 8 input rows");
    }
    return plan(prob, c, g);
  }

 private:
  // The kernel holds one load path, so a specialisation compiles one unrolled walk, not two.
  Plan plan(const Problem& prob, DepthwiseConfig c, const DepthwiseGeometry& g, int v) const {
    c.shift = depthwise_shift(prob);
    c.v = v;
    Plan plan = new_plan(prob, *this, kTable, c, g.threads);
    plan.grid = static_cast<unsigned>(blocks(prob, c, g));
    return plan;
  }

  // Where W % 4 == 0, the 16-byte plan with its element-by-element twin for an unaligned input.
  Plan plan(const Problem& prob, const DepthwiseConfig& c, const DepthwiseGeometry& g) const {
    if (prob.desc.w % 4 != 0) return plan(prob, c, g, 1);
    Plan p = plan(prob, c, g, 4);
    p.unaligned = std::make_shared<const Plan>(plan(prob, c, g, 1));
    return p;
  }

  const KernelDef def_{"depthwise", "depthwise/depthwise.cu", kUsesConvolution, false, kTable.infos()};
};

}  // namespace

const Family& depthwise_family() {
  static const DepthwiseFamily family;
  return family;
}

}  // namespace conv3djit::detail
