// grouped: groups > 1, NCDHW or NDHWC, float32, bf16 or fp16. A block computes KB channels of one group
// for BH x BW outputs of a run of ODB output planes while the input planes stream through a ring
// of shared-memory slots (docs/kernels/grouped.md).
#include <algorithm>

#include "grouped/geometry.cuh"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {
namespace {

struct GroupedConfig {
  int bh, bw, th, tw, odb, kb, pf;
};

const ConfigTable<GroupedConfig, 7> kTable{{{
    {{"bh", FieldRole::Chosen, "output rows a block (a multiple of TH, <= 256)"}, &GroupedConfig::bh},
    {{"bw", FieldRole::Chosen, "output columns a block (a multiple of TW, <= 256)"}, &GroupedConfig::bw},
    {{"th", FieldRole::Chosen, "output rows a thread"}, &GroupedConfig::th},
    {{"tw", FieldRole::Chosen, "output columns a thread"}, &GroupedConfig::tw},
    {{"odb", FieldRole::Chosen, "output planes a block walks (<= 1024)"}, &GroupedConfig::odb},
    {{"kb", FieldRole::Optional, "channels of one group a block, dividing K/groups (KB x TH x TW <= 32; default 1)"},
     &GroupedConfig::kb},
    {{"pf", FieldRole::Optional, "output planes whose inputs are in flight, 1..8 (default 2)"}, &GroupedConfig::pf},
}}};

// The depth runs are chosen for a device of this many SMs whatever the device: a key must not
// depend on the SM count, so that a cache precompiled for an arch serves every device of it (the
// grid, a run-time argument, still uses the device's own count).
constexpr int kPlanningSms = 132;

GroupedGeometry geometry(const Problem& prob, const GroupedConfig& c) {
  const Conv3dDesc& d = prob.desc;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return grouped_geometry(i(prob.c_per_group), i(d.kernel.d), i(d.kernel.h), i(d.kernel.w), i(d.stride.d),
                          i(d.stride.h), i(d.stride.w), i(d.dilation.d), i(d.dilation.h), i(d.dilation.w), c.bh,
                          c.bw, c.th, c.tw, c.kb, c.pf, d.layout == Layout::NDHWC);
}

// The kernel's blocks an SM (its register budget), as its __launch_bounds__ compute them.
int blocks_an_sm(const SpecKey& key) {
  const GroupedConfig c = kTable.load(key.config);
  return grouped_geometry(key.c_per_group, key.kd, key.kh, key.kw, key.sd, key.sh, key.sw, key.dd, key.dh, key.dw,
                          c.bh, c.bw, c.th, c.tw, c.kb, c.pf, key.layout == Layout::NDHWC)
      .min_blocks;
}

long long blocks(const Problem& prob, const GroupedConfig& c) {
  return prob.out.n * (prob.out.k / c.kb) * ceil_div(prob.out.d, c.odb) * ceil_div(prob.out.h, c.bh) *
         ceil_div(prob.out.w, c.bw);
}

// Blocks an SM holds: by warps, by shared memory (the ring and the static weights) and by the
// 32-block limit.
int per_sm(const GroupedGeometry& g, const DeviceLimits& limits) {
  const int by_smem = limits.max_smem_per_sm / (g.shared_bytes + 4 * g.weight_floats + kSharedPerBlockReserved);
  return std::min({32, 64 / ((g.threads + 31) / 32), by_smem});
}

// The kernel's shapes: BH a multiple of TH, BW of TW, at most 1024 threads; KB channels of one
// group whose weights fit 16 KB of static shared memory (a block's static and dynamic shared memory
// within the opt-in limit together); KB x TH x TW <= 32 accumulators (each with its per-channel
// partial); two blocks per SM; extents and the block index in 32 bits.
bool fits(const Problem& prob, const GroupedConfig& c, const GroupedGeometry& g, const DeviceLimits& limits) {
  const long long limit = (1LL << 31) - 1;
  const Conv3dDesc& d = prob.desc;
  const bool shapes = c.th >= 1 && c.tw >= 1 && c.kb >= 1 && c.odb >= 1 && c.pf >= 1 && c.pf <= 8 &&
                      c.bh % c.th == 0 && c.bw % c.tw == 0 && g.threads >= 1 && g.threads <= 1024 &&
                      c.kb * c.th * c.tw <= 32;
  const bool extents = std::max({d.d, d.h, d.w}) <= limit && std::max({prob.out.d, prob.out.h, prob.out.w}) <= limit;
  return shapes && extents && prob.k_per_group % c.kb == 0 && g.weight_floats <= 4096 &&
         g.shared_bytes + 4 * g.weight_floats <= limits.max_smem_per_block_optin && per_sm(g, limits) >= 2 &&
         blocks(prob, c) <= limit;
}

class GroupedFamily final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }

  // Every element type and layout: half inputs are converted to float as they are staged, NDHWC
  // ones read a channel at a time.
  Refusal serves_types(const Problem&) const override { return std::nullopt; }

  Refusal can_implement(const Problem& prob, const DeviceLimits&) const override {
    if (prob.desc.groups == 1) return "groups > 1";
    return std::nullopt;
  }

  // Columns: 4 a thread (float4 rows and stores), the block as wide as OW up to 128 (even tiles
  // beyond). Channels: as many of a group's as divide it, up to 8 (they share the whole input).
  // Rows: TH so that a thread holds 16 or 32 accumulators (8 when an output has few terms, CG x
  // KVOL <= 64, so that the kernel's 72-register budget holds them), about 128 threads, even
  // tiles. Two output planes' inputs in flight. Plane runs: the longest that still fills every
  // SM once (each run starts by waiting for its first planes; docs/kernels/grouped.md).
  // Where two such rings do not fit an SM (many channels a group), smaller tiles: half and a
  // quarter of the columns, 64 and 32 threads, never fewer than a warp's; only for layers no other
  // family but direct takes (NDHWC ones, and NCDHW ones whose K / groups is no multiple of
  // direct_tiled's 8 channels).
  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    if (prob.desc.groups == 1) return std::nullopt;
    if (auto plan = choose_tile(prob, limits, 1, 128)) return plan;
    if (prob.desc.layout == Layout::NCDHW && prob.k_per_group % 8 == 0) return std::nullopt;
    for (const auto& [split, threads] : {std::pair{1, 64}, {2, 64}, {2, 32}, {4, 32}}) {
      if (auto plan = choose_tile(prob, limits, split, threads)) return plan;
    }
    return std::nullopt;
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    const GroupedConfig c = kTable.apply(GroupedConfig{0, 0, 0, 0, 0, 1, 2}, forced);
    const bool ok = c.bh >= 1 && c.bw >= 1 && c.th >= 1 && c.tw >= 1 && c.odb >= 1 && c.kb >= 1 && c.pf >= 1 &&
                    c.bh <= 256 && c.bw <= 256 && c.odb <= 1024;
    const GroupedGeometry g = ok ? geometry(prob, c) : GroupedGeometry{};
    if (!ok || prob.desc.groups == 1 || !fits(prob, c, g, limits)) {
      refuse_config(forced, "groups > 1, BH a multiple of TH, BW of TW, at most 1024 threads, KB dividing the "
                            "channels per group with KB x TH x TW <= 32, PF in 1..8, and two blocks' rings of "
                            "input planes per SM");
    }
    return plan(prob, c, g);
  }

 private:
  // choose()'s tile with the columns of the natural one split `split` ways, about `threads`
  // threads a block.
  std::optional<Plan> choose_tile(const Problem& prob, const DeviceLimits& limits, int split, int threads) const {
    GroupedConfig c{};
    c.tw = 4;
    const long long tiles_w = ceil_div(prob.out.w, 128) * split;
    c.bw = static_cast<int>(ceil_div(ceil_div(prob.out.w, tiles_w), c.tw) * c.tw);
    const int segs = c.bw / c.tw;
    const long long terms = prob.c_per_group * prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
    c.pf = 2;
    for (c.kb = 8; c.kb >= 1; c.kb /= 2) {
      c.th = terms <= 64 ? std::max(1, 2 / c.kb) : std::max(1, 4 / c.kb);
      const long long rowgroups = std::min(ceil_div(threads, segs), ceil_div(prob.out.h, c.th));
      const long long tiles_h = ceil_div(prob.out.h, rowgroups * c.th);
      c.bh = static_cast<int>(ceil_div(ceil_div(prob.out.h, tiles_h), c.th) * c.th);
      std::optional<Plan> shortest;
      for (int64_t odb : {prob.out.d, int64_t{16}, int64_t{8}, int64_t{4}, int64_t{2}, int64_t{1}}) {
        if (odb > prob.out.d) continue;
        c.odb = static_cast<int>(odb);
        const GroupedGeometry g = geometry(prob, c);
        if (!fits(prob, c, g, limits) || (threads < 128 && g.threads < 32)) continue;
        if (blocks(prob, c) >= 1LL * kPlanningSms * per_sm(g, limits)) return plan(prob, c, g);
        shortest = plan(prob, c, g);
      }
      if (shortest) return shortest;
    }
    return std::nullopt;
  }

  Plan plan(const Problem& prob, const GroupedConfig& c, const GroupedGeometry& g) const {
    Plan plan = new_plan(prob, *this, kTable, c, g.threads, g.shared_bytes);
    plan.grid = static_cast<unsigned>(blocks(prob, c));
    return plan;
  }

  const KernelDef def_{"grouped", "grouped/grouped.cu", kUsesConvolution, false, kTable.infos(), &blocks_an_sm};
};

}  // namespace

const Family& grouped_family() {
  static const GroupedFamily family;
  return family;
}

}  // namespace conv3djit::detail
