// direct_tiled: register-blocked FFMA for groups == 1. Warps own channel groups (WK) x row bands
// (WS) of a tile; the weights of a channel chunk stay in shared memory while input tiles stream
// through it (docs/kernels/direct_tiled.md).
#include <algorithm>
#include <memory>

#include "direct_tiled/geometry.cuh"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {
namespace {

struct TiledConfig {
  int wk, ws, wr, cc, tw;
  int v;  // floats a copy of the input tile: 4 (16-byte copies) or 1
  int p;  // teams of warps sharing one copy of resident weights
};

const ConfigTable<TiledConfig, 7> kTable{{{
    {{"wk", FieldRole::Chosen, "warps along output channels"}, &TiledConfig::wk},
    {{"ws", FieldRole::Chosen, "warps along output rows (WK x WS <= 16)"}, &TiledConfig::ws},
    {{"wr", FieldRole::Chosen, "output rows a warp: 1, 2, 4, 8, 16 or 32"}, &TiledConfig::wr},
    {{"cc", FieldRole::Chosen, "input channels a chunk of resident weights (capped at C/groups)"}, &TiledConfig::cc},
    {{"tw", FieldRole::Chosen, "outputs along W a thread: 4 or 8"}, &TiledConfig::tw},
    {{"v", FieldRole::Optional, "floats a copy of the input tile: 4 (16-byte, W and padding[W] multiples of 4, zero padding; "
                                "the default there) or 1"}, &TiledConfig::v},
    {{"p", FieldRole::Optional, "teams sharing one copy of resident weights: 1 or 2 (one chunk, P x WK x WS "
                                "<= 16 warps; default 2 where they fit)"}, &TiledConfig::p},
}}};

constexpr int kTiledMaxThreads = 512;  // 128 registers a thread (the 2-block launch bounds' budget)

// 16-byte copies of the kernel's input rows need every row and tile start 16-byte aligned given an
// aligned base: W and pad_w multiples of 4 (a tile starts pad_w before a multiple of 4).
// 16-byte copies need aligned rows and tile starts, and a float4 wholly inside or outside the
// input: zero padding (other modes map each position, common/padding.cuh).
int tiled_copy_width(const Problem& prob) {
  return prob.desc.w % 4 == 0 && prob.pad.before.w % 4 == 0 && prob.desc.padding_mode == PaddingMode::Zeros ? 4 : 1;
}

TiledGeometry geometry(const Problem& prob, int wk, int ws, int wr, int cc, int tw, int teams) {
  const Conv3dDesc& d = prob.desc;
  return tiled_geometry(static_cast<int>(prob.c_per_group), static_cast<int>(d.kernel.d),
                        static_cast<int>(d.kernel.h), static_cast<int>(d.kernel.w), static_cast<int>(d.stride.h),
                        static_cast<int>(d.stride.w), static_cast<int>(d.dilation.h),
                        static_cast<int>(d.dilation.w), wk, ws, wr, cc, tw, teams);
}

// Blocks of this configuration that fit on one SM (shared memory, registers, threads).
int blocks_per_sm(const TiledGeometry& g, const DeviceLimits& limits) {
  if (g.shared_bytes > limits.max_smem_per_block_optin) return 0;
  const int by_smem = limits.max_smem_per_sm / (g.shared_bytes + kSharedPerBlockReserved);
  const int regs_per_thread = g.chunks > 1 ? 224 : 128;  // the kernel's launch bounds
  const int by_regs = 65536 / (regs_per_thread * g.block_threads);
  const int by_threads = 2048 / g.block_threads;
  return std::max(0, std::min({by_smem, by_regs, by_threads, 32}));
}

// Two teams sharing one copy of resident weights where they fit in a block (each team then
// double-buffers its input tiles in the shared memory a second copy of the weights would take),
// else one.
TiledGeometry team_geometry(const Problem& prob, const DeviceLimits& limits, int wk, int ws, int wr, int cc, int tw) {
  const TiledGeometry pair = geometry(prob, wk, ws, wr, cc, tw, 2);
  if (pair.teams == 2 && pair.block_threads <= kTiledMaxThreads && blocks_per_sm(pair, limits) > 0) return pair;
  return geometry(prob, wk, ws, wr, cc, tw, 1);
}

// Channels per chunk: the whole group while its reduction is short enough to sum in one fp32
// accumulator; else chunks of at most 512 terms (blocked summation keeps the fp32 class).
int chunk_channels(const Problem& prob) {
  const long long kvol = prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
  if (prob.c_per_group * kvol <= 1024) return static_cast<int>(prob.c_per_group);
  return static_cast<int>(std::max<long long>(1, std::min<long long>(prob.c_per_group, 512 / kvol)));
}

// The kernel's epilogue addresses a warp's rows with 32-bit offsets.
bool tiled_offsets_fit(const Problem& prob, const TiledGeometry& g) {
  return prob.out.w * g.rows + g.tile_w < 0x7fffffffLL;
}

struct TiledChoice {
  TiledConfig c;
  TiledGeometry g;
  int blocks_per_sm;
};

class TiledFamily final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  std::vector<std::string> aliases() const override { return {"tiled"}; }

  Refusal can_implement(const Problem& prob, const DeviceLimits&) const override {
    if (prob.desc.groups != 1) return "groups == 1";
    return std::nullopt;
  }

  // The best feasible configuration; nothing if the kernel cannot serve the problem.
  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    if (prob.desc.groups != 1 || declines(prob, limits)) return std::nullopt;
    const std::vector<TiledChoice> choices = ranked(prob, limits);
    if (choices.empty()) return std::nullopt;
    return plan(prob, limits, choices.front());
  }

  Refusal declines(const Problem& prob, const DeviceLimits&) const override {
    if (prob.out.k < 4) return "fewer than 4 output channels: left to direct";
    return std::nullopt;
  }

  // The best few feasible configurations, also for K < 4 (which choose() leaves to direct).
  std::vector<Plan> candidates(const Problem& prob, const DeviceLimits& limits, int count) const override {
    std::vector<Plan> plans;
    if (prob.desc.groups != 1) return plans;
    for (const TiledChoice& c : ranked(prob, limits)) {
      if (static_cast<int>(plans.size()) >= count) break;
      plans.push_back(plan(prob, limits, c));
    }
    return plans;
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    // V and P optional (P 0: as the planner would); a chunk never exceeds the group.
    TiledConfig c = kTable.apply(TiledConfig{0, 0, 0, 0, 0, tiled_copy_width(prob), 0}, forced);
    if (prob.desc.groups != 1) refuse_config(forced, "groups == 1");
    c.cc = static_cast<int>(std::min<long long>(c.cc, prob.c_per_group));
    const bool ok = c.wk >= 1 && c.ws >= 1 && c.wk * c.ws <= 16 &&
                    (c.wr == 1 || c.wr == 2 || c.wr == 4 || c.wr == 8 || c.wr == 16 || c.wr == 32) && c.cc >= 1 &&
                    (c.tw == 4 || c.tw == 8) && (c.v == 1 || c.v == tiled_copy_width(prob)) && c.p <= 2;
    TiledGeometry g{};
    if (ok) {
      g = c.p == 0 ? team_geometry(prob, limits, c.wk, c.ws, c.wr, c.cc, c.tw)
                   : geometry(prob, c.wk, c.ws, c.wr, c.cc, c.tw, c.p);
    }
    // Refused: P = 2 for a chunked reduction (geometry() gives it one team), or for teams of 16 warps.
    const bool teams_ok = (c.p != 2 || g.teams == 2) && (g.teams == 1 || g.block_threads <= kTiledMaxThreads);
    const int bpsm = ok && teams_ok && tiled_offsets_fit(prob, g) ? blocks_per_sm(g, limits) : 0;
    if (bpsm == 0) {
      refuse_config(forced, "WK x WS <= 16 warps, WR in 1..32 (powers of 2), CC >= 1, TW 4 or 8, V 1 or (with W "
                            "and padding[W] multiples of 4) 4, P 1 or (one chunk, P x WK x WS <= 16 warps) 2, and "
                            "the tile must fit in shared memory");
    }
    c.p = g.teams;
    return plan(prob, limits, TiledChoice{c, g, bpsm});
  }

 private:
  // One candidate: its channel chunk shrunk until it fits, and its score (the fraction of useful
  // work in the padded tiles, times occupancy); nothing if it cannot run or would spill.
  static std::optional<std::pair<double, TiledChoice>> score(const Problem& prob, const DeviceLimits& limits, int wk,
                                                             int ws, int wr, int tw) {
    int cc = chunk_channels(prob);
    TiledGeometry g = team_geometry(prob, limits, wk, ws, wr, cc, tw);
    while (blocks_per_sm(g, limits) == 0 && cc > 1) g = team_geometry(prob, limits, wk, ws, wr, cc = (cc + 1) / 2, tw);
    // Two blocks per SM cap a single-chunk kernel at 128 registers: TK x TW accumulators plus a
    // row of NX inputs must fit, or it spills (seen with TW = 8, stride 2, KW = 7: NX = 21).
    if (g.chunks == 1 && g.tk * tw + g.nx > 80) return std::nullopt;
    const int bpsm = blocks_per_sm(g, limits);
    if (bpsm == 0 || !tiled_offsets_fit(prob, g)) return std::nullopt;
    const double eff_w = double(prob.out.w) / double(ceil_div(prob.out.w, g.tile_w) * g.tile_w);
    const double eff_h = double(prob.out.h) / double(ceil_div(prob.out.h, g.rows) * g.rows);
    const double eff_k = double(prob.out.k) / double(ceil_div(prob.out.k, g.bk) * g.bk);
    // Latency hiding wants >= 8 resident warps per SM; below that, score by the fraction.
    const double occupancy = std::min(1.0, bpsm * g.block_threads / 32 / 8.0);
    const double s = eff_w * eff_h * eff_k * (tw == 8 ? 1.0 : 0.75) * occupancy;
    return std::make_pair(s, TiledChoice{TiledConfig{wk, ws, wr, cc, tw, tiled_copy_width(prob), g.teams}, g, bpsm});
  }

  // The feasible configurations, best score first (ties in the search's order). Up to 8 warps a
  // block: WK channel groups (as many as K needs) times WS row bands; fewer channel groups only
  // when nothing else fits (large kernels' weights).
  static std::vector<TiledChoice> ranked(const Problem& prob, const DeviceLimits& limits) {
    std::vector<std::pair<double, TiledChoice>> found;
    const int most = static_cast<int>(std::min<long long>(8, ceil_div(prob.out.k, 8)));
    for (int wk = most; wk >= 1 && found.empty(); wk /= 2) {
      for (int ws = 8 / wk; ws >= 1; ws /= 2) {
        for (int tw : {8, 4}) {
          for (int wr : {1, 2, 4, 8, 16, 32}) {
            if (ws * wr > 32) continue;
            if (auto candidate = score(prob, limits, wk, ws, wr, tw)) found.push_back(*candidate);
          }
        }
      }
    }
    std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<TiledChoice> choices;
    for (const auto& f : found) choices.push_back(f.second);
    return choices;
  }

  // The choice's plan; with 16-byte copies it carries its 4-byte twin for inputs not 16-byte aligned.
  Plan plan(const Problem& prob, const DeviceLimits& limits, const TiledChoice& c) const {
    Plan plan = new_plan(prob, *this, kTable, c.c, c.g.block_threads, c.g.shared_bytes);
    const long long k_blocks = ceil_div(prob.out.k, c.g.bk);
    const long long tiles =
        prob.out.n * prob.out.d * ceil_div(prob.out.h, c.g.rows) * ceil_div(prob.out.w, c.g.tile_w);
    const long long tasks = k_blocks * ceil_div(tiles, c.g.teams);  // a block's teams take a tile each
    const long long resident = 1LL * limits.sm_count * c.blocks_per_sm;
    // Persistent: each block keeps one channel block (grid is a multiple of k_blocks) and walks
    // spatial tiles, so its weights are loaded once.
    plan.grid =
        static_cast<unsigned>(tasks <= resident ? tasks : std::max(k_blocks, resident / k_blocks * k_blocks));
    if (c.c.v == 4) {
      TiledChoice scalar = c;
      scalar.c.v = 1;
      plan.unaligned = std::make_shared<const Plan>(this->plan(prob, limits, scalar));
    }
    return plan;
  }

  const KernelDef def_{"direct_tiled", "direct_tiled/direct_tiled.cu", kUsesConvolution, false, kTable.infos()};
};

}  // namespace

const Family& direct_tiled_family() {
  static const TiledFamily family;
  return family;
}

}  // namespace conv3djit::detail
