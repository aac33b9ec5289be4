// igemm_sm90: implicit GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a), groups == 1; the
// input staged by TMA boxes or cp.async, weights resident or streamed in chunks that
// igemm_sm90_weights prepares (docs/kernels/igemm_sm90.md).
#include <algorithm>

#include "families/igemm_sm90/tensor_map.hpp"
#include "families/pitch_rows/pitch_rows.hpp"
#include "families/igemm_sm90/config.hpp"
#include "families/igemm_sm90/search.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {

const Family& igemm_sm90_half_family();  // plan/registry.cpp's order: after this family

namespace {

struct WeightsConfig {
  int bn, cc;
};
const ConfigTable<WeightsConfig, 2> kWeightsTable{{{
    {{"bn", FieldRole::Chosen, "output channels a block of the convolution"}, &WeightsConfig::bn},
    {{"cc", FieldRole::Chosen, "input channels a chunk"}, &WeightsConfig::cc},
}}};
// Every (channel block, chunk) of weights, prepared once per call for all blocks to copy.
const KernelDef kWeightsDef{"igemm_sm90_weights", "igemm_sm90/igemm_sm90.cu", kUsesKernelExtents | kUsesClass, true,
                            kWeightsTable.infos()};

// Half NCDHW layers with at most this many input channels a group: with fewer than 32
// igemm_sm90_half's chunks would be mostly padding, and at 32 its chunks of 32 channels ran the
// unet3d encoder (32 -> 64, 3^3, through the channels-last copy) 0.97x as fast as this gather on
// an H100 with 128 x 64 tiles, 1.16x with the output channels as M (half_channels_as_m below;
// docs/kernels/igemm_sm90_half.md).
constexpr int64_t kHalfChannels = 32;
// Half NDHWC layers with fewer than this many: below 8 igemm_sm80 cannot load a position's
// channels as 16-byte groups. H200, against igemm_sm80 (`compare_builds.sh -r 2`): C = 3 the
// reference problem 2.199 -> 0.661 ms, c3d_conv1 0.490 -> 0.291, slowfast_slow_stem 0.318 ->
// 0.246, the I3D stem 1.370 -> 1.384; C = 8, 16, 24 lost 0.84x, 0.85x, 0.98x (the copy's pass).
constexpr int64_t kHalfNdhwcChannels = 8;
// ... and at most this many input elements: the float32 copy, twice the input's size, stays within
// 1 GiB of scratch memory (larger inputs stay in place, read by igemm_sm80).
constexpr int64_t kHalfCopyElements = int64_t{1} << 28;
// Half NDHWC layers of one group with 32 channels or more that igemm_sm90 keeps although
// igemm_sm90_half would take them: at most 32 output channels leave its 64-column blocks half
// empty, against igemm_sm90's 32 columns from the float32 copy, but only a long reduction pays
// for that copy. H100, `compare_builds.sh -r 3` against igemm_sm90_half, C x taps: 384 -> 32, 5^3
// (48000) 1.48x, 384 -> 16, 4 x 7 x 5 (53760) 1.30x; 128 -> 16, 3 x 5 x 7 (13440) 1.03x, 96 -> 32
// (10080) 1.00x; 5120 and fewer 0.12-0.71x (pl_s009 ... pl_e398 in docs/kernels/igemm_sm90.md).
constexpr int64_t kHalfNarrowReduction = 24576;
bool half_narrow_ndhwc(const Problem& prob) {
  return prob.desc.dtype != DataType::Float32 && prob.desc.layout == Layout::NDHWC && prob.desc.groups == 1 &&
         prob.c_per_group >= 32 && prob.out.k <= 32 && prob.c_per_group * prob.taps() >= kHalfNarrowReduction;
}

// Whether igemm_sm90_half's pick for prob has the output channels as its products' M (config
// field pn): the unet3d encoder's NCDHW layer (32 -> 64, 3^3) 0.2639 ms on this gather, 0.2272 there
// (H100, docs/kernels/igemm_sm90_half.md).
bool half_channels_as_m(const Problem& prob, const DeviceLimits& limits) {
  const auto plan = igemm_sm90_half_family().choose(prob, limits);
  return plan && plan->key.field("pn") != 0;
}

class Sm90Family final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  std::vector<std::string> aliases() const override { return {"sm90"}; }
  const char* arch() const override { return "sm_90 exactly (built for sm_90a)"; }

  // Every element type and layout: float32 NCDHW as it lies; bf16 and fp16 through a float32 copy
  // of the input (pitch_rows, on every call) and one TF32 product, exact for them; NDHWC through
  // an NCDHW copy (pitch_rows transposes it on every call), the weights read in their own order
  // and the outputs stored channels innermost.
  Refusal serves_types(const Problem&) const override { return std::nullopt; }

  Refusal can_implement(const Problem& prob, const DeviceLimits& limits) const override {
    if (prob.desc.groups != 1) return "groups == 1";
    if (limits.cc_major != 9 || limits.cc_minor != 0) return "compute capability 9.0";
    return std::nullopt;
  }

  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    if (can_implement(prob, limits) || declines(prob, limits)) return std::nullopt;
    auto best = choose_sm90_shape(prob, limits);
    if (!best) return std::nullopt;
    return plan(best->first, limits, best->second);
  }

  Refusal declines(const Problem& prob, const DeviceLimits& limits) const override {
    const Conv3dDesc& d = prob.desc;
    if (d.dtype == DataType::Float32 && d.precision == Precision::Tf32 && igemm_sm90_half_family().choose(prob, limits)) {
      return d.layout == Layout::NDHWC
                 ? "tf32 NDHWC layers that igemm_sm90_half takes (32 channels a group or more): it reads them "
                   "channels-last as they are, where igemm_sm90 transposes a copy first"
                 : "tf32 NCDHW layers of 256 channels or more in and out, several taps and 16384 output "
                   "positions or more: igemm_sm90_half's wider tiles outrun the gather, channels-last "
                   "copies and all";
    }
    if (prob.desc.dtype != DataType::Float32) {
      if (prob.desc.layout == Layout::NCDHW && prob.c_per_group > kHalfChannels) {
        return "half NCDHW inputs of more than 32 channels a group: igemm_sm90_half's chunks are full there";
      }
      if (prob.desc.layout == Layout::NCDHW && prob.c_per_group == kHalfChannels && half_channels_as_m(prob, limits)) {
        return "half NCDHW inputs of 32 channels that igemm_sm90_half takes with the output channels as its "
               "products' M (at most 64 of them): faster through the channels-last copy than this gather";
      }
      if (prob.desc.layout == Layout::NDHWC && prob.c_per_group >= kHalfNdhwcChannels &&
          !(half_narrow_ndhwc(prob) && igemm_sm90_half_family().choose(prob, limits))) {
        return "half NDHWC inputs of 8 channels or more: igemm_sm80 loads them without a copy (igemm_sm90 keeps "
               "those igemm_sm90_half would take with at most 32 output channels and C x taps >= 24576: 32 "
               "columns, not half of 64)";
      }
      if (prob.input_elements > kHalfCopyElements) return "half inputs past 2^28 elements: their float32 copy";
    }
    if (sm90_too_narrow(prob)) {
      return "fewer than 16 output channels (NCDHW; 8 in the tf32 class): a 32-column product would be mostly "
             "padding";
    }
    return std::nullopt;
  }

  // The planner's choice (or, where it leaves the layer to igemm_sm80 or the FFMA kernels, the
  // search's best regardless); then, best first by their score, the search's best with another
  // column width, the other tile form, another count of planes, cp.async staging, or half or twice
  // the chunk (where it has none, the first's tile with that one change). Each is what force()
  // plans for its fields.
  std::vector<Plan> candidates(const Problem& prob, const DeviceLimits& limits, int count) const override {
    if (can_implement(prob, limits)) return {};
    Sm90Filter any;
    any.forced = true;
    auto first = choose_sm90_shape(prob, limits);
    if (!first) first = choose_sm90_shape(prob, limits, any);
    if (!first) return {};
    const Sm90Choice& c = first->second;
    Sm90Filter tile = any;
    tile.th = c.th, tile.tw = c.tw, tile.bn = c.bn, tile.cc = c.cc, tile.rows = c.row;
    std::vector<std::pair<Problem, Sm90Choice>> others;
    const auto vary = [&](std::optional<int> Sm90Filter::*field, int value) {
      Sm90Filter best = any, near = tile;
      best.*field = near.*field = value;
      auto other = forced_choice(prob, limits, best);
      if (!other) other = forced_choice(prob, limits, near);
      if (other) others.push_back(std::move(*other));
    };
    for (int bn : {32, 64, 128, 256}) {
      if (bn != c.bn && useful_width(prob.out.k, bn, 32)) vary(&Sm90Filter::bn, bn);
    }
    vary(&Sm90Filter::rows, c.row > 0 ? 0 : 1);
    vary(&Sm90Filter::planes, c.pl > 1 ? 1 : 2);
    vary(&Sm90Filter::across, c.across ? 0 : 1);
    if (c.boxed) vary(&Sm90Filter::tma, 0);
    for (int cc : {c.cc / 2, std::min(2 * c.cc, static_cast<int>(prob.c_per_group))}) {
      if (cc >= 1 && cc != c.cc) vary(&Sm90Filter::cc, cc);
    }
    std::stable_sort(others.begin(), others.end(),
                     [](const auto& a, const auto& b) { return a.second.score > b.second.score; });
    std::vector<Plan> plans = {plan(first->first, limits, c)};
    for (const auto& [shape, choice] : others) plans.push_back(plan(shape, limits, choice));
    return distinct_plans(std::move(plans), count);
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    Sm90Filter f;
    f.forced = true;
    f.th = forced.get("th"), f.tw = forced.get("tw"), f.bn = forced.get("bn");
    f.cc = std::min<int>(*forced.get("cc"), static_cast<int>(prob.c_per_group));
    f.tma = forced.get("tma"), f.rows = forced.get("rows"), f.planes = forced.get("planes");
    f.across = forced.get("across");
    if (auto c = forced_choice(prob, limits, f)) return plan(c->first, limits, c->second);
    refuse_config(forced,
                  "groups == 1, compute capability 9.0, BN 32, 64, 128 or 256 (256: one TF32 product, the tf32 "
                  "class or half types), TW a multiple of 8, TH x TW a multiple of 64 up to 256 within the "
                  "registers a thread may have, CC >= 1, the weights and two input tiles must fit in shared "
                  "memory, and TMA 1 needs a dilation along D of at most 8 and boxes within 256 (row tiles: whole "
                  "input rows; padding modes other than zeros: W % 4 == 0, half types or NDHWC); PLANES 2 or 3 needs "
                  "one TF32 product, BN 64, CC = C, unit stride and dilation along D and KD >= PLANES (NDHWC: no "
                  "residual); ACROSS 1 needs an NCDHW 1 x 1 x 1 layer with unit strides and no padding, TW 8, "
                  "CC a multiple of 8 and TMA");
  }

  // The input's map, then the output's, then the weight's (raw weights); tiles across images,
  // whose outputs leave from registers, take the input's one-row map in the output's place
  // (tensor_map.hpp).
  void tensor_maps(const Plan& plan, const void* input, const void* weight, void* output, CUtensorMap* in_map,
                   CUtensorMap* out_map, CUtensorMap* weight_map) const override {
    if (uses_tensor_map(plan)) *in_map = input_tensor_map(plan, input);
    if (uses_output_map(plan, output)) *out_map = output_tensor_map(plan, output);
    if (kSm90Table.load(plan.key.config).across) *out_map = input_row_map(plan, input);
    if (plan.weight_map) *weight_map = weight_tensor_map(plan, weight);
  }

 private:
  // The choice of the fields `f` forces and the problem it plans, or nothing where force() refuses
  // them: the planner's search kept to them (so that a pointwise layer is planned as the same flat
  // plane the planner would take); else, with the whole tile given, that one configuration on the
  // layer as given.
  std::optional<std::pair<Problem, Sm90Choice>> forced_choice(const Problem& prob, const DeviceLimits& limits,
                                                               const Sm90Filter& f) const {
    if (can_implement(prob, limits) || (f.tma && *f.tma > 1)) return std::nullopt;
    if (auto best = choose_sm90_shape(prob, limits, f)) return best;
    const bool rows = f.rows.value_or(0) > 0;
    if (!f.th || !f.tw || !f.bn || !f.cc || !f.admits_row(rows ? static_cast<int>(prob.out.w) : 0)) {
      return std::nullopt;
    }
    // (Tiles across images: on the layer planned as planes 8 wide.)
    const bool across = f.across.value_or(0) != 0;
    const std::optional<Problem> shape = across ? sm90_flat_plane(prob, 8) : prob;
    if (!shape) return std::nullopt;
    auto c = sm90_candidate(*shape, limits, *f.th, *f.tw, *f.bn, *f.cc, f.tma.value_or(-1), rows, f.planes.value_or(1),
                            across);
    if (!c) return std::nullopt;
    return std::make_pair(*shape, *c);
  }

  Plan plan(const Problem& prob, const DeviceLimits& limits, const Sm90Choice& c, const Sm90Staging& s) const {
    const Sm90Geometry& g = s.g;
    // Pair loads need the box shift's parity at compile time (0 where the kernel has none).
    const Conv3dDesc& d = prob.desc;
    const int parity = sm90_pair_loads(c.cc, static_cast<int>(d.kernel.h), static_cast<int>(d.kernel.w),
                                       static_cast<int>(d.stride.w), static_cast<int>(d.dilation.w), c.row, c.pl, s.tma)
                           ? sm90_tma_shift(static_cast<int>(prob.pad.before.w)) & 1
                           : 0;
    Plan plan = new_plan(prob, *this, kSm90Table, Sm90Config{c.th, c.tw, c.bn, c.cc, s.rp, s.pp, s.cp, s.tma, c.row,
                                                            c.pl, parity, c.across},
                         g.threads, g.shared_bytes);
    // Persistent: as many blocks per SM as the kernel's launch bounds guarantee room for, each
    // walking items (tile, channel block). With the weights resident each block keeps one
    // channel block (the grid a multiple of them); streamed in chunks, its items may change
    // channel block, and every resident block takes a share.
    plan.store_channels = g.store_channels;
    const int per_sm = g.min_blocks;
    const long long k_blocks = ceil_div(prob.out.k, c.bn);
    const long long items = sm90_tiles(prob, c.th, c.tw, c.row, c.pl, c.across != 0) * k_blocks;
    const long long resident = 1LL * limits.sm_count * per_sm;
    plan.grid = checked_grid(items <= resident ? items
                             : g.chunks > 1 ? resident
                                            : std::max(k_blocks, resident / k_blocks * k_blocks),
                             *this);
    // Chunks read raw from the weight (sm90_raw) need no step before; the others are prepared.
    plan.weight_map = sm90_raw(prob, c.cc, s.tma == 1);
    if (g.chunks > 1 && !plan.weight_map) {
      PrepPlan prep;
      prep.key = shape_key(prob, kWeightsDef);
      kWeightsTable.store(WeightsConfig{c.bn, c.cc}, prep.key.config);
      prep.block = 256;
      const long long elems = k_blocks * g.chunks * g.weight_floats;
      prep.grid = stride_grid(elems / g.parts / 4, prep.block, limits, 8);  // a thread per 16-byte group
      prep.workspace_bytes = static_cast<uint64_t>(elems) * sizeof(float);  // TF32 pairs, whatever the input
      plan.prep = prep;
    }
    return plan;
  }

  // The choice's plan. With TMA boxes it carries the input's copy (Plan::copies_input): always
  // made where rows are not 16-byte multiples, and for an input that is not 16-byte aligned
  // (a cp.async twin ran 21-24 % slower and was another kernel to compile; the copy costs about
  // 30 us for the reference problem's input: docs/kernels/igemm_sm90.md). Half and NDHWC inputs
  // are read from the float32 NCDHW copy on every call, whatever the staging.
  Plan plan(const Problem& prob, const DeviceLimits& limits, const Sm90Choice& c) const {
    Plan p = plan(prob, limits, c, c.staging());
    if (c.boxed || pitch_rows_every_call(prob.desc.dtype, prob.desc.layout)) {
      p.input_copy = pitch_rows_plan(p.params, prob.desc.dtype, prob.desc.layout, limits);
    }
    return p;
  }

  const KernelDef def_{"igemm_sm90", "igemm_sm90/igemm_sm90.cu", kUsesConvolution, true, kSm90Table.infos()};
};

}  // namespace

const Family& igemm_sm90_family() {
  static const Sm90Family family;
  return family;
}

}  // namespace conv3djit::detail
