#include "plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <initializer_list>
#include <iterator>
#include <regex>

#include "tile_geometry.cuh"

namespace conv3djit::detail {
namespace {

constexpr int kSharedPerBlockReserved = 1024;

ConvParams make_params(const Problem& prob) {
  const Conv3dDesc& d = prob.desc;
  ConvParams p{};
  p.n = d.n; p.c = d.c; p.d = d.d; p.h = d.h; p.w = d.w;
  p.k = d.k; p.od = prob.out.d; p.oh = prob.out.h; p.ow = prob.out.w;
  p.k_per_group = prob.k_per_group;
  p.c_per_group = static_cast<int>(prob.c_per_group);
  p.kd = static_cast<int>(d.kernel.d); p.kh = static_cast<int>(d.kernel.h); p.kw = static_cast<int>(d.kernel.w);
  p.sd = static_cast<int>(d.stride.d); p.sh = static_cast<int>(d.stride.h); p.sw = static_cast<int>(d.stride.w);
  p.dd = static_cast<int>(d.dilation.d); p.dh = static_cast<int>(d.dilation.h); p.dw = static_cast<int>(d.dilation.w);
  p.pad_d = static_cast<int>(prob.pad.before.d);
  p.pad_h = static_cast<int>(prob.pad.before.h);
  p.pad_w = static_cast<int>(prob.pad.before.w);
  p.has_bias = d.bias ? 1 : 0;
  return p;
}

SpecKey shape_key(const Problem& prob, Algorithm algorithm) {
  SpecKey k;
  k.algorithm = algorithm;
  k.precision = prob.desc.precision;
  k.c_per_group = static_cast<int32_t>(prob.c_per_group);
  const Conv3dDesc& d = prob.desc;
  k.kd = static_cast<int32_t>(d.kernel.d); k.kh = static_cast<int32_t>(d.kernel.h); k.kw = static_cast<int32_t>(d.kernel.w);
  k.sd = static_cast<int32_t>(d.stride.d); k.sh = static_cast<int32_t>(d.stride.h); k.sw = static_cast<int32_t>(d.stride.w);
  k.dd = static_cast<int32_t>(d.dilation.d); k.dh = static_cast<int32_t>(d.dilation.h); k.dw = static_cast<int32_t>(d.dilation.w);
  return k;
}

// A grid-stride launch of `threads` threads in blocks of `block`, capped at `per_sm` blocks per SM.
unsigned stride_grid(long long threads, unsigned block, const DeviceLimits& limits, int per_sm) {
  const long long blocks = (threads + block - 1) / block;
  return static_cast<unsigned>(std::max<long long>(1, std::min<long long>(blocks, 1LL * limits.sm_count * per_sm)));
}

// The copy of an input of p's extents into rows of input_row_pitch(W) floats (pitch_rows) that
// TMA boxes read.
PrepPlan input_copy_plan(const ConvParams& p, const DeviceLimits& limits) {
  PrepPlan copy;
  copy.key.algorithm = Algorithm::PitchRows;  // shape-generic: no shape fields in its key
  copy.block = 256;
  const long long rows = p.n * p.c * p.d * p.h, pitch = input_row_pitch(p.w);
  copy.grid = stride_grid(rows * (pitch / 4), copy.block, limits, 8);  // a thread per 16 bytes
  copy.workspace_bytes = static_cast<uint64_t>(rows * pitch) * 4;
  return copy;
}

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// What every kernel family's plan starts with: the launch arguments, the key with the family's
// tile parameters, the block and its dynamic shared memory. The caller sizes the grid.
Plan new_plan(const Problem& prob, Algorithm algorithm, std::initializer_list<int> config, int block,
              int shared_bytes = 0) {
  Plan plan;
  plan.params = make_params(prob);
  plan.key = shape_key(prob, algorithm);
  std::copy_n(config.begin(), std::min(config.size(), std::size(plan.key.config)), plan.key.config);
  plan.block = static_cast<unsigned>(block);
  plan.shared_bytes = static_cast<unsigned>(shared_bytes);
  return plan;
}

Plan plan_generic(const Problem& prob, const DeviceLimits& limits, int tw) {
  Plan plan = new_plan(prob, Algorithm::DirectGeneric, {tw}, 256);
  const long long threads = prob.out.n * prob.out.k * prob.out.d * prob.out.h * ceil_div(prob.out.w, tw);
  plan.grid = stride_grid(threads, plan.block, limits, 16);
  return plan;
}

struct TiledChoice {
  int wk, ws, wr, cc, tw;
  TiledGeometry g;
  int blocks_per_sm;
  int v;  // floats a copy of the input tile: 4 (16-byte copies) or 1
};

constexpr int kTiledMaxThreads = 512;  // 128 registers a thread (the 2-block launch bounds' budget)

// 16-byte copies of the tiled kernel's input rows need every row and tile start 16-byte aligned
// given an aligned base: W and pad_w multiples of 4 (a tile starts pad_w before a multiple of 4).
int tiled_copy_width(const Problem& prob) {
  return prob.desc.w % 4 == 0 && prob.pad.before.w % 4 == 0 ? 4 : 1;
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

// The choice's plan; with 16-byte copies it carries its 4-byte twin for inputs not 16-byte aligned.
Plan plan_tiled(const Problem& prob, const DeviceLimits& limits, const TiledChoice& c) {
  Plan plan =
      new_plan(prob, Algorithm::DirectTiled, {c.wk, c.ws, c.wr, c.cc, c.tw, c.v, c.g.teams}, c.g.block_threads,
               c.g.shared_bytes);
  const long long k_blocks = ceil_div(prob.out.k, c.g.bk);
  const long long tiles = prob.out.n * prob.out.d * ceil_div(prob.out.h, c.g.rows) * ceil_div(prob.out.w, c.g.tile_w);
  const long long tasks = k_blocks * ceil_div(tiles, c.g.teams);  // a block's teams take a tile each
  const long long resident = 1LL * limits.sm_count * c.blocks_per_sm;
  // Persistent: each block keeps one channel block (grid is a multiple of k_blocks) and walks
  // spatial tiles, so its weights are loaded once.
  plan.grid = static_cast<unsigned>(tasks <= resident ? tasks : std::max(k_blocks, resident / k_blocks * k_blocks));
  if (c.v == 4) {
    TiledChoice scalar = c;
    scalar.v = 1;
    plan.unaligned = std::make_shared<const Plan>(plan_tiled(prob, limits, scalar));
  }
  return plan;
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

// One tiled candidate: its channel chunk shrunk until it fits, and its score (the fraction of
// useful work in the padded tiles, times occupancy); nullopt if it cannot run or would spill.
std::optional<std::pair<double, TiledChoice>> tiled_candidate(const Problem& prob, const DeviceLimits& limits,
                                                              int wk, int ws, int wr, int tw) {
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
  const double score = eff_w * eff_h * eff_k * (tw == 8 ? 1.0 : 0.75) * occupancy;
  return std::make_pair(score, TiledChoice{wk, ws, wr, cc, tw, g, bpsm, tiled_copy_width(prob)});
}

// The best feasible tiled configuration; nullopt if the kernel cannot serve the problem. Up to 8
// warps a block: WK channel groups (as many as K needs) times WS row bands; fewer channel groups
// only when nothing else fits (large kernels' weights).
std::optional<TiledChoice> choose_tiled(const Problem& prob, const DeviceLimits& limits) {
  if (prob.desc.groups != 1 || prob.out.k < 4) return std::nullopt;
  std::optional<TiledChoice> best;
  double best_score = 0;
  for (int wk = static_cast<int>(std::min<long long>(8, ceil_div(prob.out.k, 8))); wk >= 1 && !best; wk /= 2) {
    for (int ws = 8 / wk; ws >= 1; ws /= 2) {
      for (int tw : {8, 4}) {
        for (int wr : {1, 2, 4, 8, 16, 32}) {
          if (ws * wr > 32) continue;
          auto candidate = tiled_candidate(prob, limits, wk, ws, wr, tw);
          if (candidate && candidate->first > best_score) {
            best_score = candidate->first;
            best = candidate->second;
          }
        }
      }
    }
  }
  return best;
}

struct GroupedChoice {
  int bh, bw, th, tw, odb, kb, pf;
};

GroupedGeometry grouped_geom(const Problem& prob, const GroupedChoice& c) {
  const Conv3dDesc& d = prob.desc;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return grouped_geometry(i(prob.c_per_group), i(d.kernel.d), i(d.kernel.h), i(d.kernel.w), i(d.stride.d),
                          i(d.stride.h), i(d.stride.w), i(d.dilation.d), i(d.dilation.h), i(d.dilation.w), c.bh,
                          c.bw, c.th, c.tw, c.kb, c.pf);
}

long long grouped_blocks(const Problem& prob, const GroupedChoice& c) {
  return prob.out.n * (prob.out.k / c.kb) * ceil_div(prob.out.d, c.odb) * ceil_div(prob.out.h, c.bh) *
         ceil_div(prob.out.w, c.bw);
}

// Blocks of the grouped kernel an SM holds: by warps, by shared memory (the ring and the static
// weights) and by the 32-block limit.
int grouped_per_sm(const GroupedGeometry& g, const DeviceLimits& limits) {
  const int by_smem = limits.max_smem_per_sm / (g.shared_bytes + 4 * g.weight_floats + kSharedPerBlockReserved);
  return std::min({32, 64 / ((g.threads + 31) / 32), by_smem});
}

// The kernel's shapes: BH a multiple of TH, BW of TW, at most 1024 threads; KB channels of one
// group whose weights fit 16 KB of static shared memory; KB x TH x TW <= 32 accumulators (each
// with its per-channel partial); two blocks per SM; extents and the block index in 32 bits.
bool grouped_fits(const Problem& prob, const GroupedChoice& c, const GroupedGeometry& g, const DeviceLimits& limits) {
  const long long limit = (1LL << 31) - 1;
  const Conv3dDesc& d = prob.desc;
  const bool shapes = c.th >= 1 && c.tw >= 1 && c.kb >= 1 && c.odb >= 1 && c.pf >= 1 && c.pf <= 8 &&
                      c.bh % c.th == 0 && c.bw % c.tw == 0 &&
                      g.threads >= 1 && g.threads <= 1024 && c.kb * c.th * c.tw <= 32;
  const bool extents = std::max({d.d, d.h, d.w}) <= limit && std::max({prob.out.d, prob.out.h, prob.out.w}) <= limit;
  return shapes && extents && prob.k_per_group % c.kb == 0 && g.weight_floats <= 4096 &&
         g.shared_bytes <= limits.max_smem_per_block_optin && grouped_per_sm(g, limits) >= 2 &&
         grouped_blocks(prob, c) <= limit;
}

Plan plan_grouped(const Problem& prob, const GroupedChoice& c, const GroupedGeometry& g) {
  Plan plan = new_plan(prob, Algorithm::Grouped, {c.bh, c.bw, c.th, c.tw, c.odb, c.kb, c.pf}, g.threads,
                       g.shared_bytes);
  plan.grid = static_cast<unsigned>(grouped_blocks(prob, c));
  return plan;
}

// Columns: 4 a thread (float4 rows and stores), the block as wide as OW up to 128 (even tiles
// beyond). Channels: as many of a group's as divide it, up to 8 (they share the whole input).
// Rows: TH so that a thread holds 16 or 32 accumulators (8 when an output has few terms, CG x
// KVOL <= 64, so that the kernel's 72-register budget holds them), about 128 threads, even
// tiles. Two output planes' inputs in flight (on depthwise 8x64x16x56x56, 4 measured the same
// and take more shared memory). Plane runs: the longest that still fills every SM once (each run
// starts by waiting for its first planes): depthwise took 0.198 / 0.175 / 0.167 ms with runs of
// 4 / 8 / 16 planes, ResNeXt's grouped layer 0.324 / 0.289 / 0.271 ms with runs of 2 / 4 / 8.
std::optional<Plan> choose_grouped(const Problem& prob, const DeviceLimits& limits) {
  if (prob.desc.groups == 1) return std::nullopt;
  GroupedChoice c{};
  c.tw = 4;
  const long long tiles_w = ceil_div(prob.out.w, 128);
  c.bw = static_cast<int>(ceil_div(ceil_div(prob.out.w, tiles_w), c.tw) * c.tw);
  const int segs = c.bw / c.tw;
  const long long terms = prob.c_per_group * prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
  c.pf = 2;
  for (c.kb = 8; c.kb >= 1; c.kb /= 2) {
    c.th = terms <= 64 ? std::max(1, 2 / c.kb) : std::max(1, 4 / c.kb);
    const long long rowgroups = std::min(ceil_div(128, segs), ceil_div(prob.out.h, c.th));
    const long long tiles_h = ceil_div(prob.out.h, rowgroups * c.th);
    c.bh = static_cast<int>(ceil_div(ceil_div(prob.out.h, tiles_h), c.th) * c.th);
    std::optional<Plan> shortest;
    for (int64_t odb : {prob.out.d, int64_t{16}, int64_t{8}, int64_t{4}, int64_t{2}, int64_t{1}}) {
      if (odb > prob.out.d) continue;
      c.odb = static_cast<int>(odb);
      const GroupedGeometry g = grouped_geom(prob, c);
      if (!grouped_fits(prob, c, g, limits)) continue;
      if (grouped_blocks(prob, c) >= 1LL * limits.sm_count * grouped_per_sm(g, limits)) return plan_grouped(prob, c, g);
      shortest = plan_grouped(prob, c, g);
    }
    if (shortest) return shortest;
  }
  return std::nullopt;
}

struct DepthwiseChoice {
  int th, lanes, warps, odb;
};

// The lanes' float4s are 16-byte aligned when the tile starts S = -pad_w mod 4 columns early.
int depthwise_shift(const Problem& prob) { return static_cast<int>((4 - prob.pad.before.w % 4) % 4); }

DepthwiseGeometry depthwise_geom(const Problem& prob, const DepthwiseChoice& c) {
  const Conv3dDesc& d = prob.desc;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return depthwise_geometry(i(d.kernel.d), i(d.kernel.h), i(d.kernel.w), i(d.stride.h), i(d.dilation.d),
                            i(d.dilation.h), i(d.dilation.w), c.th, c.lanes, c.warps, depthwise_shift(prob));
}

long long depthwise_blocks(const Problem& prob, const DepthwiseChoice& c, const DepthwiseGeometry& g) {
  return prob.out.n * prob.out.k * ceil_div(prob.out.d, c.odb) * ceil_div(prob.out.h, g.bh) *
         ceil_div(prob.out.w, g.bw);
}

// One input channel per group, unit stride along D and W; the taps in registers (<= 32), at
// most 48 accumulators and 8 input rows a plane, a storing lane in every row group, at most 1024
// threads; extents and the block index in 32 bits.
bool depthwise_fits(const Problem& prob, const DepthwiseChoice& c, const DepthwiseGeometry& g) {
  const long long limit = (1LL << 31) - 1;
  const Conv3dDesc& d = prob.desc;
  const bool problem = d.groups > 1 && prob.c_per_group == 1 && d.stride.d == 1 && d.stride.w == 1 && g.kvol <= 32;
  const bool shapes = c.th >= 1 && c.th <= 4 && c.lanes <= 32 && c.warps >= 1 && c.warps <= 32 && c.odb >= 1 &&
                      g.stores >= 1 && g.span * c.th * 4 <= 48 && g.rows <= 8;
  const bool extents = std::max({d.d * d.h * d.w, prob.out.d * prob.out.h * prob.out.w}) <= limit;
  return problem && shapes && extents && depthwise_blocks(prob, c, g) <= limit;
}

// V: 4 = 16-byte input loads (W % 4 == 0, an aligned input), 1 = element by element. The kernel
// holds one load path, so a specialisation compiles one unrolled walk, not two.
Plan plan_depthwise(const Problem& prob, const DepthwiseChoice& c, const DepthwiseGeometry& g, int v) {
  Plan plan =
      new_plan(prob, Algorithm::Depthwise, {c.th, c.lanes, c.warps, c.odb, depthwise_shift(prob), v}, g.threads);
  plan.grid = static_cast<unsigned>(depthwise_blocks(prob, c, g));
  return plan;
}

// Where W % 4 == 0, the 16-byte plan with its element-by-element twin for an unaligned input.
Plan plan_depthwise(const Problem& prob, const DepthwiseChoice& c, const DepthwiseGeometry& g) {
  if (prob.desc.w % 4 != 0) return plan_depthwise(prob, c, g, 1);
  Plan plan = plan_depthwise(prob, c, g, 4);
  plan.unaligned = std::make_shared<const Plan>(plan_depthwise(prob, c, g, 1));
  return plan;
}

// Faster than the grouped kernel on every depthwise layer measured (2026-11-29, H200): 1.4-1.8x
// with 16-byte rows (five layers), 1.1x with element loads (W = 54). Two rows a thread; a row
// group as wide as the output row (up to 32 lanes, W tiles beyond); warps so that H tiles are
// even, up to 8 a block. Runs of SPAN + 1 output planes: the
// kernel's walk is then one unrolled pass of straight-line code, which ptxas fits in its register
// cap; longer runs loop and spill at it. On depthwise 8x64x16x56x56 (2026-11-29, capped) runs of
// 2 / 4 / 8 / 16 planes took 0.101 / 0.087 / 0.117 / 0.114 ms; the halo planes a run reloads
// come from L2 (its neighbour run is the next block).
std::optional<Plan> choose_depthwise(const Problem& prob) {
  DepthwiseChoice c{2, 32, 1, 1};
  // A second row a thread only where its accumulators, weights and input rows fit the kernel's
  // budget (ptxas holds 21 warps an SM to 80 registers): at most 3 planes of span, 27 taps and
  // 4 input rows (3x3x3 fits in 79; a dilated or strided KH = 3 needs 5-6 rows and spilled).
  const DepthwiseGeometry two = depthwise_geom(prob, c);
  if (two.span > 3 || two.kvol > 27 || two.rows > 4) c.th = 1;
  const DepthwiseGeometry full = depthwise_geom(prob, c);
  const long long overhead = c.lanes - full.stores;
  c.lanes = static_cast<int>(std::min<long long>(32, ceil_div(prob.out.w, 4) + overhead));
  const long long rows_per_warp = 32 / c.lanes * c.th;
  const long long warps = ceil_div(prob.out.h, rows_per_warp);
  c.warps = static_cast<int>(ceil_div(warps, ceil_div(warps, 8)));
  c.odb = static_cast<int>(std::min<long long>(prob.out.d, full.span + 1));
  const DepthwiseGeometry g = depthwise_geom(prob, c);
  if (!depthwise_fits(prob, c, g)) return std::nullopt;
  return plan_depthwise(prob, c, g);
}

int igemm_shared(const Problem& prob, int bm, int bn) {
  const long long kred = prob.c_per_group * prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
  return igemm_shared_bytes(static_cast<int>(kred), bm, bn, prob.desc.precision == Precision::Fp32 ? 1 : 0);
}

// Tensor cores (mma.sync TF32) need sm_80; the tile needs BM x BN / 32 threads <= 1024; the
// gather table holds 32-bit offsets within one image and 10-bit tap displacements.
bool igemm_fits(const Problem& prob, const DeviceLimits& limits, int bm, int bn) {
  const Conv3dDesc& d = prob.desc;
  const bool taps_fit = (d.kernel.d - 1) * d.dilation.d < 1024 && (d.kernel.h - 1) * d.dilation.h < 1024 &&
                        (d.kernel.w - 1) * d.dilation.w < 1024;
  return d.groups == 1 && limits.cc_major >= 8 && bm % 32 == 0 && bn % 32 == 0 && bm >= 32 && bn >= 32 &&
         bm * bn / 32 <= 1024 && bm * bn / 32 >= bm && (bm * bn / 32) % 16 == 0 && taps_fit &&
         d.c * d.d * d.h * d.w < (int64_t{1} << 31) && igemm_shared(prob, bm, bn) <= limits.max_smem_per_block_optin;
}

Plan plan_igemm(const Problem& prob, int bm, int bn) {
  Plan plan = new_plan(prob, Algorithm::ImplicitGemm, {bm, bn}, bm * bn / 32, igemm_shared(prob, bm, bn));
  const long long blocks = ceil_div(prob.output_elements / prob.out.k, bm) * ceil_div(prob.out.k, bn);
  if (blocks > 0x7fffffffLL) {
    throw Error(ErrorCategory::Unsupported, fmt::format("implicit GEMM: {} blocks exceed the grid limit", blocks));
  }
  plan.grid = static_cast<unsigned>(blocks);
  return plan;
}

// --- igemm_sm90 -------------------------------------------------------------------------------

// How a tile's input reaches shared memory, and the pitches and geometry that follow.
struct Sm90Staging {
  int tma;  // 1: one TMA box, stored densely; 0: cp.async, pitches chosen against bank conflicts
  int rp, pp, cp;
  Sm90Geometry g;
  double wavefronts;  // of the A gather per warp load (sm90_gather_wavefronts)
};

struct Sm90Choice {
  int th, tw, bn, cc;
  int row;                           // row tiles: the output width (0: TH x TW tiles)
  int pl;                            // output planes a tile
  Sm90Staging copies;                // always fits
  std::optional<Sm90Staging> boxed;  // TMA, where it fits: then the kernel's
  double score = 0;                  // choose_sm90's useful fraction x warpgroup speed
  const Sm90Staging& staging() const { return boxed ? *boxed : copies; }
};

// Shared-memory wavefronts of the A gather with these tile pitches, per warp load, averaged over
// a chunk's loads (1 = conflict-free): the load for one slice and one half (k = t or t + 4) has
// lanes (g, t) at g * SW + offset(term); a bank serves one word per wavefront. With PL > 1 the
// gather table holds one kd's terms (the plane's offset moves every lane alike).
double sm90_gather_wavefronts(const Problem& prob, int cc, int rp, int pp, int cp, int pl) {
  const Conv3dDesc& d = prob.desc;
  const int kd = static_cast<int>(d.kernel.d), kh = static_cast<int>(d.kernel.h), kw = static_cast<int>(d.kernel.w);
  const int terms = cc * (pl > 1 ? 1 : kd) * kh * kw, sw = static_cast<int>(d.stride.w);
  const int dh = static_cast<int>(d.dilation.h), dw = static_cast<int>(d.dilation.w);
  long long wavefronts = 0, loads = 0;
  for (int first = 0; first < (terms + 7) / 8 * 8; first += 4, ++loads) {
    std::array<int, 32> words{};  // the lanes' words, then per bank the distinct ones
    for (int t = 0; t < 4; ++t) {
      const int offset = sm90_term_offset(first + t, cc, kd, kh, kw, dh, dw, rp, pp, cp, pl);
      for (int g = 0; g < 8; ++g) words[t * 8 + g] = g * sw + offset;
    }
    std::sort(words.begin(), words.end());
    std::array<int, 32> per_bank{};
    int most = 0;
    for (int i = 0; i < 32; ++i) {
      if (i > 0 && words[i] == words[i - 1]) continue;  // one word, broadcast
      most = std::max(most, ++per_bank[words[i] % 32]);
    }
    wavefronts += most;
  }
  return loads ? double(wavefronts) / double(loads) : 1.0;
}

// Pitches of the input tile (row, plane, channel), each the first of the 32 values at or above
// its minimum with the fewest gather wavefronts; and those wavefronts.
struct Sm90Pitches {
  int rp, pp, cp;
  double wavefronts;
};
Sm90Pitches sm90_pitches(const Problem& prob, int cc, int in_h, int in_w, int in_d, int pl) {
  double fewest = 0;
  auto best = [&](int lo, auto&& wavefronts_at) {
    int pick = lo;
    fewest = wavefronts_at(lo);
    for (int v = lo + 1; v < lo + 32 && fewest > 1.0; ++v) {
      const double w = wavefronts_at(v);
      if (w < fewest) { fewest = w; pick = v; }
    }
    return pick;
  };
  const int rp = best(in_w, [&](int v) { return sm90_gather_wavefronts(prob, cc, v, in_h * v, in_d * in_h * v, pl); });
  const int pp = best(in_h * rp, [&](int v) { return sm90_gather_wavefronts(prob, cc, rp, v, in_d * v, pl); });
  const int cp = best(in_d * pp, [&](int v) { return sm90_gather_wavefronts(prob, cc, rp, pp, v, pl); });
  return {rp, pp, cp, fewest};
}

Sm90Geometry sm90_geom(const Problem& prob, int th, int tw, int bn, int cc, int cp, int row, int pl) {
  const Conv3dDesc& d = prob.desc;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return sm90_geometry(i(prob.c_per_group), i(d.kernel.d), i(d.kernel.h), i(d.kernel.w), i(d.stride.h),
                       i(d.stride.w), i(d.dilation.h), i(d.dilation.w), th, tw, bn, cc, cp,
                       d.precision == Precision::Fp32 ? 1 : 0, row, pl);
}

// Tiles of one (n, od) output plane: TH x TW blocks, or runs of TH x TW positions (row tiles).
long long sm90_plane_tiles(const Problem& prob, int th, int tw, int row) {
  return row > 0 ? ceil_div(prob.out.h * prob.out.w, th * tw) : ceil_div(prob.out.h, th) * ceil_div(prob.out.w, tw);
}

// Tiles of the whole output: (n, group of PL output planes) x a plane's tiles.
long long sm90_tiles(const Problem& prob, int th, int tw, int row, int pl) {
  return prob.out.n * ceil_div(prob.out.d, pl) * sm90_plane_tiles(prob, th, tw, row);
}

// The fraction of a plane's tile positions that are outputs.
double sm90_area(const Problem& prob, int th, int tw, int row) {
  return double(prob.out.h * prob.out.w) / double(sm90_plane_tiles(prob, th, tw, row) * th * tw);
}

// TMA staging loads each item's tile as one box of the input seen as a 5-D tensor (W, H, D, C, N):
// every box extent at most 256, and a dilation along D at most 8 (the box steps through the
// planes with that traversal stride). The map's strides must be 16-byte multiples: where W % 4 !=
// 0, of a copy of the input with wider rows (Plan::input_copy).
bool sm90_tma_fits(const Problem& prob, int in_h, int box_row, int cc, int in_d) {
  const Conv3dDesc& d = prob.desc;
  return d.dilation.d <= 8 && box_row <= 256 && in_h <= 256 && in_d * d.dilation.d <= 256 && cc <= 256;
}

// wgmma needs sm_90a, so exactly compute capability 9.0. Up to 4 warpgroups of whole 8 + 8 rows,
// within the registers a thread may have at that size; the weights (one chunk, two buffers when
// there are several) and two input tiles must fit in shared memory. Staging: 1 = TMA boxes, 0 =
// cp.async, -1 = TMA where it fits. Every choice fits with cp.async (its `copies` staging, which
// a forced STAGING 0 takes). PL > 1 output planes a tile: the tf32 class, 64 columns, the whole
// reduction in one chunk, unit stride and dilation along D, and KD >= PL (up to 3).
std::optional<Sm90Choice> sm90_candidate(const Problem& prob, const DeviceLimits& limits, int th, int tw, int bn,
                                         int cc, int staging = -1, bool rows = false, int pl = 1) {
  const Conv3dDesc& d = prob.desc;
  if (d.groups != 1 || limits.cc_major != 9 || limits.cc_minor != 0) return std::nullopt;
  if ((bn != 32 && bn != 64 && bn != 128 && bn != 256) || tw < 8 || tw % 8 != 0 || th < 1 || th * tw % 64 != 0 ||
      th * tw > 256 || cc < 1 || cc > prob.c_per_group || pl < 1) {
    return std::nullopt;
  }
  // (Several planes hold their accumulators in the kernel's three named sets of 64 columns.)
  if (pl > 1 && (d.precision != Precision::Tf32 || cc != prob.c_per_group || d.stride.d != 1 || d.dilation.d != 1 ||
                 d.kernel.d < pl || bn != 64 || pl > 3)) {
    return std::nullopt;
  }
  const int row = rows ? static_cast<int>(prob.out.w) : 0;
  // The kernel counts tiles, extents and one image's offsets in 32 bits.
  const long long n_tiles = sm90_tiles(prob, th, tw, row, pl);
  const long long limit = (1LL << 31) - 1;
  if (n_tiles > limit || prob.out.d * prob.out.h * prob.out.w > limit || d.c * d.d > limit || prob.out.k > limit) {
    return std::nullopt;
  }
  // Bound the tile before the pitch search: input tiles beyond the shared memory cannot fit.
  const Sm90Geometry rough = sm90_geom(prob, th, tw, bn, cc, 0, row, pl);
  const int split = d.precision == Precision::Fp32 ? 1 : 0;
  if (sm90_registers(bn, split, static_cast<int>(prob.c_per_group * d.kernel.d * d.kernel.h * d.kernel.w), pl) >
          std::min(255, 65536 / rough.threads / 8 * 8)) {
    return std::nullopt;
  }
  const long long tile_floats = cc * rough.in_d * rough.in_h * rough.in_w;
  if (4 * ((rough.chunks > 1 ? 2 : 1) * rough.weight_floats + 2 * tile_floats) > limits.max_smem_per_block_optin) {
    return std::nullopt;
  }
  const Sm90Pitches pitches = sm90_pitches(prob, cc, rough.in_h, rough.in_w, rough.in_d, pl);
  const Sm90Geometry g = sm90_geom(prob, th, tw, bn, cc, pitches.cp, row, pl);
  if (g.shared_bytes > limits.max_smem_per_block_optin) return std::nullopt;
  Sm90Choice choice{th, tw, bn, cc, row, pl,
                    Sm90Staging{0, pitches.rp, pitches.pp, pitches.cp, g, pitches.wavefronts}, std::nullopt};
  const int narrowest = sm90_tma_row(rough.in_w, sm90_tma_shift(static_cast<int>(prob.pad.before.w)));
  if (staging != 0 && sm90_tma_fits(prob, rough.in_h, narrowest, cc, rough.in_d)) {
    // A box is stored densely, so its row (a multiple of 4 floats) sets the plane and channel
    // pitches too: of the rows up to 28 floats wider than the narrowest that fit, the narrowest
    // with the fewest gather wavefronts. (A pointwise tile of 8 rows puts its channels 8 rows
    // apart, a multiple of 32 floats: one bank for all four k of a load at any row.)
    for (int box_row = narrowest; box_row <= std::min(256, narrowest + 28); box_row += 4) {
      const int plane = rough.in_h * box_row, channel = rough.in_d * plane;
      const Sm90Geometry boxed = sm90_geom(prob, th, tw, bn, cc, channel, row, pl);
      if (boxed.shared_bytes > limits.max_smem_per_block_optin) break;
      const double wavefronts = sm90_gather_wavefronts(prob, cc, box_row, plane, channel, pl);
      if (!choice.boxed || wavefronts < choice.boxed->wavefronts) {
        choice.boxed = Sm90Staging{1, box_row, plane, channel, boxed, wavefronts};
      }
      if (wavefronts <= 1.0) break;
    }
  }
  if (staging == 1 && !choice.boxed) return std::nullopt;
  return choice;
}

// Columns: K rounded up to 32, 64 or 128 (several channel blocks beyond). Channels per chunk: the
// whole group when its weights fit (converted once per block), else the chunk size that wastes
// the fewest reduction slots (ties: the larger, fewer items). Tile: the least padded of TW in
// {64, 32, 16, 8} x TH rows for 4, 3 or 2 warpgroups (earlier ones win ties: wide tiles load
// fewer halo columns; more warpgroups hide each other's gathers: on the reference problem 4 / 3 /
// 2 warpgroups took 1.86 / 2.08 / 2.42 ms with 3xTF32, 1.13 / 1.33 / 1.58 with TF32; one
// warpgroup took 2x as long again). Pointwise tf32 layers with K > 128 may also take 256 columns
// (2 warpgroups, for the registers): a product then needs half the input reads and gather
// loads, and these layers are bound by them (H200, TF32: pointwise_256 0.0447 ms against 0.0476
// with 3 warpgroups of 128 columns; pointwise_512 0.0813 against 0.0922 with 2 of 128: as fast
// as 0.91 of 4 warpgroups of 128). A pointwise gather's loads are conflict-free or 4-way (all k
// of a load on one bank: channel pitches that are multiples of 32), which costs a little:
// pointwise_512 in 8 x 16 tiles took 0.108 ms, in conflict-free 2 x 64 tiles 0.092. (Elsewhere
// the pitch search leaves few conflicts, and tile shape matters more: video_vae_512 took 0.342 ms
// in 12 x 16 tiles at 1.33 wavefronts a load, 0.359 in 6 x 32 at 1.0.)
// Row tiles (runs of TH x 64 positions of a plane whose whole input rows they load) join where
// OW <= 64 and the reduction is one chunk or in the fp32 class: no column wasted, and each
// channel's outputs are one contiguous run. H200, against the best TH x TW tile: the reference
// problem 1.418 -> 1.209 ms (3xTF32), 0.863 -> 0.675 (TF32); odd_extents 0.186 -> 0.144 and
// asymmetric_kernel 0.268 -> 0.213 (3xTF32, chunked). Chunked TF32 layers, whose items are short,
// pay more for the taller input tiles than they gain: dilated_tf32 0.131 -> 0.141 (and half the
// chunk), asymmetric_kernel_tf32 0.1030 -> 0.1040.
std::optional<Sm90Choice> choose_sm90(const Problem& prob, const DeviceLimits& limits) {
  // TF32 chunks streamed through 3 or more copy stages keep the tensor cores running from one
  // item into the next (igemm_sm90.cu: no drain between a tile's chunks), which smaller chunks
  // buy where the items are long, 128 or 256 columns (H200): c3d_conv3b_tf32 in 2-channel chunks
  // (4 stages) 0.670 ms against 0.726 in 4-channel ones (2 stages), video_vae_128_tf32 0.410
  // against 0.444, pointwise_512_tf32 in 32-channel chunks 0.078 against 0.082 in 64. With 64
  // columns the items' fixed costs win instead: unet3d_encoder_tf32 and _decoder, dilated_tf32
  // and odd_extents_tf32 in half-size chunks took 4-7 % longer.
  const double pipelined = prob.desc.precision == Precision::Tf32 ? 1.06 : 1.0;
  // A tile the planner can only stage with cp.async (its TMA box does not fit) against one staged by
  // TMA (H200, the reference problem's row tiles: 0.784 against 0.674 ms in the tf32 class, 1.335
  // against 1.208 with 3xTF32; asymmetric_kernel in 8-channel chunks by cp.async 0.292 against 0.211
  // in 6-channel ones by TMA). Where W % 4 != 0 a box reads a pitched copy of the input, which
  // pays nearly everywhere: of 14 such layers (H200, session 18, copied by cuMemcpy2DAsync then)
  // 12 ran faster by TMA boxes of the copy than by cp.async, one as fast, one 3 % slower (8 x 3 x
  // 16 x 112 x 110, 3 x 3 x 3, fp32 class); with the pitch_rows kernel: the tf32 reference with
  // W = 66 0.687 -> 0.541 ms, odd_extents 0.135 -> 0.094, tf32 0.088 -> 0.051, a 2 x 32 x 32 x 56
  // x 58 layer 0.375 -> 0.260, and the 3 % loss 0.665 -> 0.667.
  constexpr double kCopiesSpeed = 0.88;
  const long long k = prob.out.k;
  if (k < 16) return std::nullopt;  // most of each 32-column MMA would be padding
  const int cg = static_cast<int>(prob.c_per_group);
  const long long kvol = prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
  std::vector<int> widths = {k <= 32 ? 32 : k <= 64 ? 64 : 128};
  if (kvol == 1 && prob.desc.precision == Precision::Tf32 && k > 128) widths.push_back(256);
  std::vector<int> chunk_sizes = {cg};
  for (int cc : {64, 32, 24, 16, 12, 8, 6, 4, 3, 2, 1}) {
    if (cc < cg) chunk_sizes.push_back(cc);
  }
  // Two output planes a tile (tf32 row tiles of one chunk, 4 warpgroups of 64 columns, unit stride
  // and dilation along D): each gathered input plane feeds both planes' wgmmas. Against one plane,
  // it costs the padding of each kd's terms to whole slices and of an odd OD; the rest of its
  // gain, measured on the reference problem (H200, tf32: 0.658 -> 0.601 ms with 315 -> 336
  // terms), is this factor.
  constexpr double kPlanesGain = 1.15;
  // Row tiles of 128 or more columns against TH x TW tiles of about the same useful area: each
  // channel's outputs leave as one contiguous run. H200, planned both ways (session 19, a 3 %
  // bonus for every row tile): c3d_conv3b 2.048 -> 1.965 ms, r2plus1d_spatial 0.354 -> 0.337,
  // r2plus1d_temporal 0.157 -> 0.154, video_vae_512 1.194 -> 1.175; with 64 columns it lost on
  // unet3d_encoder and _decoder (3 %) and won on the fp32 reference problem with W = 66 (4 %),
  // and pointwise layers lost 6-11 %, so it stays with 128 columns and real kernels.
  constexpr double kWideRowsGain = 1.03;
  const Conv3dDesc& desc = prob.desc;
  const long long khw = desc.kernel.h * desc.kernel.w;
  const double planes_eff = double(cg * kvol) / double(desc.kernel.d * ceil_div(cg * khw, 8) * 8) *
                            double(prob.out.d) / double(ceil_div(prob.out.d, 2) * 2) * kPlanesGain;
  std::optional<Sm90Choice> best;
  double best_eff = 0;
  for (int cc : chunk_sizes) {
    const long long chunks = ceil_div(cg, cc);
    const double eff_r = double(cg * kvol) / double(chunks * ceil_div(cc * kvol, 8) * 8);
    const bool rows_pay = prob.out.w <= 64 && (cc == cg || prob.desc.precision == Precision::Fp32);
    for (int width : {64, 32, 16, 8, 0}) {  // 0: row tiles
      if (width == 0 && !rows_pay) continue;
      for (int wgs : {4, 3, 2}) {
        for (int bn : widths) {
          for (int pl : {1, 2}) {
            const bool rows = width == 0;
            if (pl > 1 && !(rows && wgs == 4 && bn == 64)) continue;  // (sm90_candidate checks the rest)
            const int tw = rows ? 64 : width, th = 64 * wgs / tw;
            // Useful fraction of the padded work, times the speed of this tile relative to 4
            // warpgroups of 128 columns (the times above).
            const double speed = bn == 256 ? 0.91 : wgs == 4 ? 1.0 : wgs == 3 ? 0.89 : 0.77;
            double eff = (rows && bn >= 128 && kvol > 1 ? kWideRowsGain : 1.0) *
                         sm90_area(prob, th, tw, rows ? static_cast<int>(prob.out.w) : 0) *
                         (pl > 1 ? planes_eff : eff_r) * double(k) / double(ceil_div(k, bn) * bn) * speed;
            if (eff * pipelined <= best_eff * 1.01) continue;  // conflicts only lower it
            auto c = sm90_candidate(prob, limits, th, tw, bn, cc, -1, rows, pl);
            if (!c) continue;
            if (kvol == 1) eff /= 1.0 + (c->staging().wavefronts - 1.0) / 16;
            if (!c->boxed) eff *= kCopiesSpeed;
            if (bn >= 128 && c->staging().g.chunks > 1 && c->staging().g.stages >= 3) eff *= pipelined;
            if (eff <= best_eff * 1.01) continue;
            best = c;
            best_eff = eff;
          }
        }
      }
    }
    if (best && cc == cg) break;  // resident weights
  }
  // A pointwise kernel has no halo to share, and below 90 % useful tile area the flat rows of
  // igemm_tf32 win (pointwise_512: 14 x 14 outputs in 16 x 8 tiles, 77 %: 0.58 ms against 0.38;
  // as a 7 x 112 plane in 8 x 16 tiles, 87.5 %: 0.49 against 0.38; pointwise_128 and _256 with
  // 87.5 % of their 4 x 32 tiles won, 0.33 against 0.45 and 0.18 against 0.20, and won more once
  // planned as flat planes that fill the tiles: 0.29 and 0.15).
  if (best && kvol == 1) {
    if (sm90_area(prob, best->th, best->tw, best->row) < 0.85) return std::nullopt;
  }
  if (best) best->score = best_eff;
  return best;
}

// A pointwise layer with unit strides and no padding treats every position alike, so any
// (D, H, W) with the same product addresses the same memory: it is also planned as one plane of
// W' = 256, 248, ..., 8 columns (W' dividing D x H x W), and the shape whose tiles waste the least
// wins (pointwise_256's 28 x 28 planes fill 4 x 32 tiles to 87.5 %; 98 rows of 64 fill them).
std::optional<std::pair<Problem, Sm90Choice>> choose_sm90_shape(const Problem& prob, const DeviceLimits& limits) {
  std::optional<std::pair<Problem, Sm90Choice>> best;
  if (auto c = choose_sm90(prob, limits)) best.emplace(prob, *c);
  const Conv3dDesc& d = prob.desc;
  const Dims3& lo = prob.pad.before;
  const Dims3& hi = prob.pad.after;
  const bool pointwise = d.kernel.d * d.kernel.h * d.kernel.w == 1 && d.stride.d * d.stride.h * d.stride.w == 1 &&
                         lo.d + lo.h + lo.w + hi.d + hi.h + hi.w == 0;
  if (!pointwise) return best;
  const int64_t positions = prob.out.d * prob.out.h * prob.out.w;
  for (int64_t w = 256; w >= 8; w -= 8) {  // the widest of equal tiles: longer store rows
    if (positions % w != 0) continue;
    Problem flat = prob;
    flat.desc.d = flat.out.d = 1;
    flat.desc.h = flat.out.h = positions / w;
    flat.desc.w = flat.out.w = w;
    auto c = choose_sm90(flat, limits);
    if (c && (!best || c->score > best->second.score * 1.01)) best.emplace(flat, *c);
  }
  return best;
}

Plan plan_sm90(const Problem& prob, const DeviceLimits& limits, const Sm90Choice& c, const Sm90Staging& s) {
  const Sm90Geometry& g = s.g;
  // Pair loads need the box shift's parity at compile time (0 where the kernel has none).
  const Conv3dDesc& d = prob.desc;
  const int parity = sm90_pair_loads(c.cc, static_cast<int>(d.kernel.h), static_cast<int>(d.kernel.w),
                                     static_cast<int>(d.stride.w), static_cast<int>(d.dilation.w), c.row, c.pl, s.tma)
                         ? sm90_tma_shift(static_cast<int>(prob.pad.before.w)) & 1
                         : 0;
  Plan plan = new_plan(prob, Algorithm::ImplicitGemmSm90,
                       {c.th, c.tw, c.bn, c.cc, s.rp, s.pp, s.cp, s.tma, c.row, c.pl, parity}, g.threads,
                       g.shared_bytes);
  // Persistent: each block keeps one channel block's weights (the grid is a multiple of the
  // channel blocks) and walks spatial tiles; as many blocks per SM as the kernel's launch bounds
  // guarantee room for.
  plan.store_channels = g.store_channels;
  const int per_sm = g.min_blocks;
  const long long k_blocks = ceil_div(prob.out.k, c.bn);
  const long long tiles = sm90_tiles(prob, c.th, c.tw, c.row, c.pl);
  const long long resident = 1LL * limits.sm_count * per_sm;
  const long long grid =
      tiles * k_blocks <= resident ? tiles * k_blocks : std::max(k_blocks, resident / k_blocks * k_blocks);
  if (grid > 0x7fffffffLL) {
    throw Error(ErrorCategory::Unsupported, fmt::format("igemm_sm90: {} blocks exceed the grid limit", grid));
  }
  plan.grid = static_cast<unsigned>(grid);
  if (g.chunks > 1) {
    // Every (channel block, chunk) of weights, prepared once per call for all blocks to copy.
    PrepPlan prep;
    prep.key = shape_key(prob, Algorithm::Sm90Weights);
    prep.key.sd = prep.key.sh = prep.key.sw = prep.key.dd = prep.key.dh = prep.key.dw = 0;  // not used
    prep.key.config[0] = c.bn;
    prep.key.config[1] = c.cc;
    prep.block = 256;
    const long long elems = k_blocks * g.chunks * g.weight_floats;
    prep.grid = stride_grid(elems / g.parts / 4, prep.block, limits, 8);  // a thread per 16-byte group
    prep.workspace_bytes = static_cast<uint64_t>(elems) * 4;
    plan.prep = prep;
  }
  return plan;
}

// The choice's plan. With TMA boxes it carries the input's copy (Plan::copies_input): always made
// where rows are not 16-byte multiples, and for an input that is not 16-byte aligned, where a
// cp.async twin of one plane a tile used to run instead: 21-24 % slower than two-plane primaries,
// and another kernel to compile, 0.5-0.9 s on the H200 machine, often at run time (session 16);
// the copy costs about 30 us for the reference problem's input (session 18).
Plan plan_sm90(const Problem& prob, const DeviceLimits& limits, const Sm90Choice& c) {
  Plan plan = plan_sm90(prob, limits, c, c.staging());
  if (c.boxed) plan.input_copy = input_copy_plan(plan.params, limits);
  return plan;
}

// Tensor cores or FFMA, from the H200 suite (bench/NOTES.md): the implicit GEMM wins once the
// reduction has many channels (C/groups >= 16: 1.1-2.9x the FFMA kernel) or is long
// (>= 1000 terms), and for the tf32 class; small C with a short reduction (stems, C3D conv1, the
// reference problem in the fp32 class) and K < 16 (whose columns would mostly be padding) stay
// on FFMA.
bool prefer_igemm(const Problem& prob) {
  const long long kred = prob.c_per_group * prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
  if (prob.desc.groups != 1 || prob.out.k < 16) return false;
  return prob.c_per_group >= 16 || kred >= 1000 || prob.desc.precision == Precision::Tf32;
}

Plan forced_plan(const Problem& prob, const DeviceLimits& limits, const std::string& forced) {
  int a = 0, b = 0, c = 0, d = 0, e = 0;
  char tail = 0;
  if (forced == "generic") return plan_generic(prob, limits, 4);
  if (std::sscanf(forced.c_str(), "generic:%d%c", &a, &tail) == 1 && (a == 1 || a == 2 || a == 4 || a == 8)) {
    return plan_generic(prob, limits, a);
  }
  static const std::regex tiled_form("tiled:[0-9]+(,[0-9]+){4,6}");
  if (std::regex_match(forced, tiled_form)) {
    int v = tiled_copy_width(prob), teams = 0;  // V and P, optional (P: as the planner would)
    std::sscanf(forced.c_str(), "tiled:%d,%d,%d,%d,%d,%d,%d", &a, &e, &b, &c, &d, &v, &teams);
    if (prob.desc.groups != 1) {
      throw Error(ErrorCategory::InvalidArgument, fmt::format("config = '{}': tiled needs groups == 1", forced));
    }
    c = static_cast<int>(std::min<long long>(c, prob.c_per_group));  // a chunk never exceeds the group
    const bool ok = a >= 1 && e >= 1 && a * e <= 16 && (b == 1 || b == 2 || b == 4 || b == 8 || b == 16 || b == 32) &&
                    c >= 1 && (d == 4 || d == 8) && (v == 1 || v == tiled_copy_width(prob)) && teams >= 0 &&
                    teams <= 2;
    TiledGeometry g{};
    if (ok) g = teams == 0 ? team_geometry(prob, limits, a, e, b, c, d) : geometry(prob, a, e, b, c, d, teams);
    // Refused: P = 2 for a chunked reduction (geometry() gives it one team), or for teams of 16 warps.
    const bool teams_ok = (teams != 2 || g.teams == 2) && (g.teams == 1 || g.block_threads <= kTiledMaxThreads);
    const int bpsm = ok && teams_ok && tiled_offsets_fit(prob, g) ? blocks_per_sm(g, limits) : 0;
    if (bpsm == 0) {
      throw Error(ErrorCategory::InvalidArgument,
                  fmt::format("config = '{}': WK x WS <= 16 warps, WR in 1..32 (powers of 2), CC >= 1, "
                              "TW 4 or 8, V 1 or (with W and padding[W] multiples of 4) 4, P 1 or (one chunk, "
                              "P x WK x WS <= 16 warps) 2, and the tile must fit in shared memory", forced));
    }
    return plan_tiled(prob, limits, TiledChoice{a, e, b, c, d, g, bpsm, v});
  }
  static const std::regex grouped_form("grouped:[0-9]+(,[0-9]+){4,6}");
  if (std::regex_match(forced, grouped_form)) {
    int f = 1, h = 2;  // KB and PF, optional
    std::sscanf(forced.c_str(), "grouped:%d,%d,%d,%d,%d,%d,%d", &a, &b, &c, &d, &e, &f, &h);
    const GroupedChoice choice{a, b, c, d, e, f, h};
    const bool ok = a >= 1 && b >= 1 && c >= 1 && d >= 1 && e >= 1 && f >= 1 && h >= 1 && a <= 256 && b <= 256 &&
                    e <= 1024;
    const GroupedGeometry g = ok ? grouped_geom(prob, choice) : GroupedGeometry{};
    if (!ok || prob.desc.groups == 1 || !grouped_fits(prob, choice, g, limits)) {
      throw Error(ErrorCategory::InvalidArgument,
                  fmt::format("config = '{}': grouped needs groups > 1, BH a multiple of TH, BW of TW, at most "
                              "1024 threads, KB dividing the channels per group with KB x TH x TW <= 32, PF in "
                              "1..8, and two blocks' rings of input planes per SM", forced));
    }
    return plan_grouped(prob, choice, g);
  }
  if (std::sscanf(forced.c_str(), "depthwise:%d,%d,%d,%d%c", &a, &b, &c, &d, &tail) == 4) {
    const DepthwiseChoice choice{a, b, c, d};
    const bool ok = a >= 1 && a <= 4 && b >= 1 && b <= 32 && c >= 1 && c <= 32 && d >= 1;
    const DepthwiseGeometry g = ok ? depthwise_geom(prob, choice) : DepthwiseGeometry{};
    if (!ok || !depthwise_fits(prob, choice, g)) {
      throw Error(ErrorCategory::InvalidArgument,
                  fmt::format("config = '{}': depthwise needs one input channel per group, stride 1 along D and "
                              "W, at most 32 taps, TH in 1..4, L lanes in 1..32 leaving a storing lane after the "
                              "halo, 1..32 warps, ODB >= 1, at most 48 accumulators and 8 input rows", forced));
    }
    return plan_depthwise(prob, choice, g);
  }
  if (std::sscanf(forced.c_str(), "igemm:%d,%d%c", &a, &b, &tail) == 2) {
    if (!igemm_fits(prob, limits, a, b)) {
      throw Error(ErrorCategory::InvalidArgument,
                  fmt::format("config = '{}': igemm needs groups == 1, sm_80 or newer, BM and BN multiples "
                              "of 32 with BN >= 32, BM * BN / 32 threads in [BM, 1024], and its tables must fit", forced));
    }
    return plan_igemm(prob, a, b);
  }
  int rows = 0, planes = 1;
  const int sm90_fields =
      std::sscanf(forced.c_str(), "sm90:%d,%d,%d,%d,%d,%d,%d%c", &a, &b, &c, &d, &e, &rows, &planes, &tail);
  if (sm90_fields == 4 || (sm90_fields == 5 && (e == 0 || e == 1)) ||
      (sm90_fields >= 6 && sm90_fields <= 7 && (e == 0 || e == 1) && (rows == 0 || rows == 1))) {
    const auto choice = sm90_candidate(prob, limits, a, b, c, std::min<int>(d, static_cast<int>(prob.c_per_group)),
                                       sm90_fields >= 5 ? e : -1, rows == 1, planes);
    if (!choice) {
      throw Error(ErrorCategory::InvalidArgument,
                  fmt::format("config = '{}': sm90 needs groups == 1, compute capability 9.0, BN 32, 64, 128 or 256 (256: tf32 class), "
                              "TW a multiple of 8, TH x TW a multiple of 64 up to 256 within the registers a thread "
                              "may have, CC >= 1, the weights and two input tiles must fit in shared memory, and "
                              "staging 1 (TMA) needs a dilation along D of at most 8 and boxes within 256 "
                              "(row tiles: whole input rows); PLANES 2 or 3 needs the tf32 class, BN 64, CC = C, unit "
                              "stride and dilation along D and KD >= PLANES",
                              forced));
    }
    return plan_sm90(prob, limits, *choice);
  }
  throw Error(ErrorCategory::InvalidArgument,
              fmt::format("config = '{}': expected {}", forced, kConfigForms));
}

}  // namespace

DeviceLimits limits_for_arch(const std::string& arch) {
  static const std::regex pattern("sm_([0-9]+)([0-9])(a|f)?");
  std::smatch m;
  if (!std::regex_match(arch, m, pattern)) {
    throw Error(ErrorCategory::InvalidArgument,
                fmt::format("arch = '{}': expected sm_XY (e.g. sm_90) or sm_XYa", arch));
  }
  DeviceLimits l;
  l.cc_major = std::stoi(m[1].str());
  l.cc_minor = std::stoi(m[2].str());
  // Shared memory per block (opt-in) and per SM, as the CUDA programming guide lists them, so
  // that a kernel precompiled for an arch is the one its devices would plan.
  const int cc = l.cc_major * 10 + l.cc_minor;
  if (cc == 80 || cc == 87) {
    l.max_smem_per_block_optin = 163 * 1024; l.max_smem_per_sm = 164 * 1024;
  } else if (cc >= 90 && cc < 100) {
    l.max_smem_per_block_optin = 227 * 1024; l.max_smem_per_sm = 228 * 1024;
  } else if (cc >= 100 && cc < 120) {
    l.max_smem_per_block_optin = 227 * 1024; l.max_smem_per_sm = 228 * 1024;
  } else {
    l.max_smem_per_block_optin = 99 * 1024; l.max_smem_per_sm = 100 * 1024;
  }
  return l;
}

Plan make_plan(const Problem& prob, const DeviceLimits& limits, const std::string& forced) {
  if (!forced.empty()) return forced_plan(prob, limits, forced);
  if (auto sm90 = choose_sm90_shape(prob, limits)) return plan_sm90(sm90->first, limits, sm90->second);
  if (prefer_igemm(prob)) {
    const int bn = prob.out.k <= 32 ? 32 : 64;
    if (igemm_fits(prob, limits, 128, bn)) return plan_igemm(prob, 128, bn);
  }
  if (auto tiled = choose_tiled(prob, limits)) return plan_tiled(prob, limits, *tiled);
  if (auto depthwise = choose_depthwise(prob)) return *depthwise;
  if (auto grouped = choose_grouped(prob, limits)) return *grouped;
  // Four outputs along W per thread reuse each weight four times; narrow outputs take one.
  return plan_generic(prob, limits, prob.out.w >= 4 ? 4 : 1);
}

Plan make_reference_plan(const Problem& prob, const DeviceLimits& limits) {
  Plan plan;
  plan.params = make_params(prob);
  plan.key.algorithm = Algorithm::ReferenceFp64;  // shape-generic: no shape fields in its key
  plan.block = 256;
  plan.grid = stride_grid(prob.output_elements, plan.block, limits, 16);
  return plan;
}

}  // namespace conv3djit::detail
