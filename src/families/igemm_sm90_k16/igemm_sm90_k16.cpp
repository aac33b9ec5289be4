// igemm_sm90_k16: bf16 / fp16 NCDHW layers of few input channels on Hopper's wgmma k16, A gathered
// into registers from a 16-bit TMA box, two adjacent kw a 32-bit load (docs/kernels/igemm_sm90_k16.md).
#include <algorithm>
#include <memory>

#include "driver/tensor_map.hpp"
#include "igemm_sm90/geometry.cuh"
#include "igemm_sm90_k16/geometry.cuh"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {

const Family& igemm_sm90_family();

namespace {

namespace geo = igemm_sm90_k16_geometry;

struct K16Config {
  int wgs, bn;  // warpgroups a block (64 positions each), output channels a block
  int planes;  // output planes a block walks (1: a tile of one plane and its KD input planes)
  int rw, rows;  // the input box: halves a row, rows
};

const ConfigTable<K16Config, 5> kTable{{{
    {{"wgs", FieldRole::Chosen, "warpgroups a block, 64 consecutive positions of a plane each: 2, 3 or 4"},
     &K16Config::wgs},
    {{"bn", FieldRole::Chosen, "output channels a block: 64 or 128"}, &K16Config::bn},
    {{"planes", FieldRole::Optional,
      "consecutive output planes a block walks, each input plane's A serving its KD output planes (KD "
      "accumulator sets; unit stride and dilation along D, KD >= 2), or 1: one plane a tile (default: the "
      "planner's choice for these wgs and bn)"},
     &K16Config::planes},
    {{"rw", FieldRole::Derived, "halves a row of the input box"}, &K16Config::rw},
    {{"rows", FieldRole::Derived, "input rows of the box"}, &K16Config::rows},
}}};

// Layers of at most this many input channels: past 32, igemm_sm90_half's 64-channel chunks win.
constexpr int64_t kMaxChannels = 32;
// Warpgroups of a walking block: 168 registers a thread hold three sets of 64 columns' sums (two
// warpgroups ran the reference 7 % slower, four serialize the wgmmas).
constexpr int kWalkWarpgroups = 3;
// A slice's gather (4 loads, their masks and addresses) against one wgmma, in a step's time: fit to
// the reference, whose one-plane tile (23 slices) took 1.19 times a walking step (8 slices, 3
// wgmmas each) a position (H100: 0.390 ms for 106 tiles of 256 positions a block, 0.3725 for 7
// runs of 23 steps of 192).
constexpr double kGatherCost = 0.41;

class K16Family final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  const char* arch() const override { return "sm_90 exactly (built for sm_90a)"; }

  Refusal serves_types(const Problem& prob) const override { return serves_half_ncdhw(prob); }

  Refusal can_implement(const Problem& prob, const DeviceLimits& limits) const override {
    const Conv3dDesc& d = prob.desc;
    if (d.groups != 1) return "groups == 1";
    if (limits.cc_major != 9 || limits.cc_minor != 0) return "compute capability 9.0";
    if (d.kernel.w < 5 || d.kernel.w > 8 || d.dilation.w != 1) return "KW from 5 to 8 and dilation[W] = 1";
    if (d.padding_mode != PaddingMode::Zeros) return "zero padding (the box's out-of-bounds zeros)";
    if (d.w % 8 != 0) return "W a multiple of 8 (input rows of 16-byte multiples, as a tensor map needs)";
    if (d.dilation.d > 8 || d.c > 256 || d.kernel.d * d.dilation.d > 256) return "a box of at most 256 planes and channels, dilation[D] <= 8";
    const long long limit = (1LL << 31) - 1;
    if (prob.out.h * prob.out.w > limit || prob.out.n * prob.out.d * prob.out.h * prob.out.w > limit || d.k > limit) {
      return "fewer than 2^31 output positions";
    }
    return std::nullopt;
  }

  // Layers of C <= 32 with K >= 16: K's channels in blocks of 64 (or 128 where K > 64) where the
  // box and the weights fit; else nothing (igemm_sm90 then serves them).
  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    if (serves_types(prob) || can_implement(prob, limits) || declines(prob, limits)) return std::nullopt;
    const int bn = default_bn(prob);
    if (walks(prob, limits, kWalkWarpgroups, bn)) {
      // Walking's weights (KD slices more at most) may not fit where one-plane tiles' do.
      if (auto p = plan_of(prob, limits, kWalkWarpgroups, bn, walk_planes(prob, limits, kWalkWarpgroups, bn))) return p;
    }
    return plan_of(prob, limits, default_wgs(bn), bn, 1);
  }

  Refusal declines(const Problem& prob, const DeviceLimits&) const override {
    if (prob.c_per_group > kMaxChannels) return "more than 32 input channels: igemm_sm90_half's 64-channel chunks win there";
    if (prob.out.k < 16) return "fewer than 16 output channels: most of a 64-column product would be padding";
    return std::nullopt;
  }

  std::vector<Plan> candidates(const Problem& prob, const DeviceLimits& limits, int count) const override {
    std::vector<Plan> plans;
    if (serves_types(prob) || can_implement(prob, limits)) return plans;
    for (const int wgs : {4, 2}) {
      for (const int bn : {64, 128}) {
        if (!useful_width(prob.out.k, bn, 64)) continue;
        for (const int planes : {1, walk_fits(prob, wgs, bn) ? walk_planes(prob, limits, wgs, bn) : 1}) {
          if (auto p = plan_of(prob, limits, wgs, bn, planes)) plans.push_back(std::move(*p));
        }
      }
    }
    return distinct_plans(std::move(plans), count);
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    // Fields left out: the planner's (its walk where its warpgroups and columns stay), else the
    // defaults for the columns.
    const std::optional<Plan> chosen = choose(prob, limits);
    const K16Config base = chosen ? kTable.load(chosen->key.config) : K16Config{0, 0, 0, 0, 0};
    const int bn = forced.get("bn").value_or(chosen ? base.bn : default_bn(prob));
    const int wgs = forced.get("wgs").value_or(base.bn == bn ? base.wgs : default_wgs(bn));
    const int planes = forced.get("planes").value_or(
        base.bn == bn && base.wgs == wgs ? base.planes : walks(prob, limits, wgs, bn) ? walk_planes(prob, limits, wgs, bn) : 1);
    if (auto p = plan_of(prob, limits, wgs, bn, planes)) return std::move(*p);
    refuse_config(forced,
                  "bf16 / fp16 NCDHW, groups == 1, compute capability 9.0, KW from 5 to 8 with dilation[W] = 1, "
                  "zero padding, W % 8 == 0, WGS 2 to 4, BN 64 or 128, a box of at most 256 in each dimension, "
                  "the weights and two stages of the box in shared memory, and planes from 1 to 256 (past 1: "
                  "stride[D] = dilation[D] = 1, KD >= 2, KD x BN / 2 accumulators a thread at most 192 with 2 "
                  "warpgroups, 96 with 3, 64 with 4)");
  }

  // The input's map: (W, H, D, C, N) in boxes of the plan's rows, KD planes (every DD-th) and C.
  // A 16-bit output's, where the kernel stores boxes (sm90_stores_boxed): (OH·OW, OD, K, N) in boxes
  // of a warpgroup's 64 positions x BN channels, 128-byte swizzled.
  void tensor_maps(const Plan& plan, const void* input, const void*, void* output, CUtensorMap* in_map,
                   CUtensorMap* out_map, CUtensorMap*) const override {
    thread_local LastTensorMap last, last_out;
    const ConvParams& p = plan.params;
    const int out_bytes = element_bytes(plan.key.out_dtype);
    if (out_bytes == 2 && sm90_stores_boxed(p.oh * p.ow, reinterpret_cast<unsigned long long>(output), out_bytes)) {
      *out_map = last_out.get(plan.key, output, {p.n, p.k, p.od, p.oh, p.ow}, [&] {
        const cuuint32_t box[4] = {64, 1, static_cast<cuuint32_t>(kTable.load(plan.key.config).bn), 1};
        return encode_output_planes(plan.key.out_dtype, output, p.n, p.k, p.od, p.oh * p.ow, box,
                                    CU_TENSOR_MAP_SWIZZLE_128B);
      });
    }
    *in_map = last.get(plan.key, input, {p.n, p.c, p.d, p.h, p.w}, [&] {
      const K16Config c = kTable.load(plan.key.config);
      const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.w), static_cast<cuuint64_t>(p.h),
                                  static_cast<cuuint64_t>(p.d), static_cast<cuuint64_t>(p.c),
                                  static_cast<cuuint64_t>(p.n)};
      cuuint64_t strides[4];
      strides[0] = dims[0] * 2;
      for (int i = 1; i < 4; ++i) strides[i] = strides[i - 1] * dims[i];
      const bool walk = c.planes > 1;  // a box of one input plane
      const cuuint32_t box[5] = {static_cast<cuuint32_t>(c.rw), static_cast<cuuint32_t>(c.rows),
                                 static_cast<cuuint32_t>(walk ? 1 : p.kd * p.dd), static_cast<cuuint32_t>(p.c), 1};
      const cuuint32_t element_strides[5] = {1, 1, static_cast<cuuint32_t>(walk ? 1 : p.dd), 1, 1};
      return encode_tiled_map(tensor_map_type(plan.key.dtype), 5, input, dims, strides, box, element_strides,
                              CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
    });
  }

 private:
  static int default_bn(const Problem& prob) { return prob.out.k <= 64 ? 64 : 128; }
  // 128 columns hold 64 accumulators a thread: two warpgroups, for the registers (with four, 128
  // registers a thread, float32 outputs spilled 56 bytes).
  static int default_wgs(int bn) { return bn == 128 ? 2 : 4; }
  // Whether a block may walk output planes with these warpgroups and columns: KD accumulator sets
  // of BN / 2 registers a thread, with room for the rest in the register budget (65536 / (128 WGS);
  // at 4 warpgroups ptxas serializes the wgmmas of three 32-register sets).
  static bool walk_fits(const Problem& prob, int wgs, int bn) {
    const Conv3dDesc& d = prob.desc;
    const int most = wgs == 2 ? 192 : wgs == 3 ? 96 : 64;
    return d.stride.d == 1 && d.dilation.d == 1 && d.kernel.d >= 2 && d.kernel.d * bn / 2 <= most;
  }

  // The longest block's work (plan_of's grid: blocks walk their column block's items round-robin):
  // its items times the steps of each (a tile one, a run of `planes` KD - 1 more, which finish no
  // plane) times a step's positions and slices, each slice a gather and its wgmmas (KD walking).
  static double block_cost(const Problem& prob, const DeviceLimits& limits, int wgs, int bn, int planes) {
    const Conv3dDesc& d = prob.desc;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    const long long positions = 64 * wgs, k_blocks = ceil_div(prob.out.k, bn);
    const long long items = prob.out.n * ceil_div(prob.out.d, planes) * ceil_div(prob.out.h * prob.out.w, positions);
    const long long workers =
        items * k_blocks <= limits.sm_count ? items : std::max(1LL, static_cast<long long>(limits.sm_count) / k_blocks);
    const long long steps = planes > 1 ? planes + d.kernel.d - 1 : 1;
    const int box_planes = geo::box_planes(i(d.kernel.d), planes), sets = planes > 1 ? i(d.kernel.d) : 1;
    const double slice = geo::slices(i(d.c), box_planes, i(d.kernel.h), i(d.kernel.w)) * (sets + kGatherCost);
    return static_cast<double>(ceil_div(items, workers) * steps * positions) * slice;
  }
  // The run of output planes (at least 2) whose longest block is the shortest: runs of OD / r
  // planes for r = 1, 2, ..., the longer run on a tie (fewer steps finishing nothing).
  static int walk_planes(const Problem& prob, const DeviceLimits& limits, int wgs, int bn) {
    const int od = static_cast<int>(std::min<int64_t>(prob.out.d, 256));
    int best = std::max(2, od);
    for (int runs = 2; runs <= od; ++runs) {
      const int planes = (od + runs - 1) / runs;
      if (planes < 2) break;
      if (block_cost(prob, limits, wgs, bn, planes) < block_cost(prob, limits, wgs, bn, best)) best = planes;
    }
    return best;
  }
  // Whether the planner walks planes with these warpgroups and columns: where the layer allows it
  // and its longest block is shorter than with one-plane tiles of the default warpgroups. Not with
  // a residual: the reference + SiLU + residual ran 0.620 ms walking, 0.572 in one-plane tiles
  // (H100).
  static bool walks(const Problem& prob, const DeviceLimits& limits, int wgs, int bn) {
    return walk_fits(prob, wgs, bn) && prob.out.d >= 2 && !prob.desc.epilogue.residual &&
           block_cost(prob, limits, wgs, bn, walk_planes(prob, limits, wgs, bn)) <
               block_cost(prob, limits, default_wgs(bn), bn, 1);
  }

  std::optional<Plan> plan_of(const Problem& prob, const DeviceLimits& limits, int wgs, int bn, int planes) const {
    if (serves_types(prob) || can_implement(prob, limits) || (wgs < 2 || wgs > 4) || (bn != 64 && bn != 128) ||
        planes < 1 || planes > 256 || (planes > 1 && !walk_fits(prob, wgs, bn))) {
      return std::nullopt;
    }
    const Conv3dDesc& d = prob.desc;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    const int positions = 64 * wgs;
    K16Config c{wgs, bn, planes, geo::box_row(i(prob.out.w), i(d.stride.w), i(d.kernel.w)),
                geo::box_rows(positions, i(prob.out.w), i(d.stride.h), i(d.kernel.h), i(d.dilation.h))};
    if (c.rw > 256 || c.rows > 256) return std::nullopt;
    const geo::Layout l = geo::layout(i(d.c), i(d.kernel.d), i(d.kernel.h), i(d.kernel.w), bn, wgs, c.rows, c.rw,
                                      element_bytes(prob.out_dtype), planes);
    if (l.shared_bytes > limits.max_smem_per_block_optin) return std::nullopt;
    // An input off 16 bytes cannot have a tensor map: igemm_sm90's plan (a float32 copy) runs it.
    std::optional<Plan> twin = igemm_sm90_family().choose(prob, limits);
    if (!twin) return std::nullopt;
    Plan plan = new_plan(prob, *this, kTable, c, 128 * wgs, l.shared_bytes);
    const long long k_blocks = ceil_div(prob.out.k, bn);
    const long long tiles = prob.out.n * ceil_div(prob.out.d, planes) * ceil_div(prob.out.h * prob.out.w, positions);
    const long long resident = limits.sm_count;  // one block an SM
    plan.grid = checked_grid(
        tiles * k_blocks <= resident ? tiles * k_blocks : std::max(k_blocks, resident / k_blocks * k_blocks), *this);
    plan.unaligned = std::make_shared<const Plan>(std::move(*twin));
    return plan;
  }

  const KernelDef def_{"igemm_sm90_k16", "igemm_sm90_k16/igemm_sm90_k16.cu", kUsesConvolution, true,
                       kTable.infos()};
};

}  // namespace

const Family& igemm_sm90_k16_family() {
  static const K16Family family;
  return family;
}

}  // namespace conv3djit::detail
