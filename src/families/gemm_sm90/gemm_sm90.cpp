// gemm_sm90: pointwise NCDHW layers (1 x 1 x 1, unit strides, no padding, one group) as GEMMs on
// Hopper's wgmma: bf16 / fp16 with the weight as A (K-major) and each image's input as B (N-major,
// read transposed), float32 in the tf32 class with the input as A (registers) and the weight as
// B; persistent blocks of a producer warpgroup (TMA boxes into a ring of full / empty mbarriers)
// and two consumer warpgroups that store their tiles from the accumulators
// (docs/kernels/gemm_sm90.md). NDHWC bf16 / fp16 layers of any window, stride, dilation and zero
// padding run the same GEMM with the input as im2col boxes (config field im2col), one tap's
// channels a chunk.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "conv3djit/error.hpp"
#include "families/channels_last/channels_last.hpp"
#include "driver/tensor_map.hpp"
#include "common/im2col.cuh"
#include "gemm_sm90/geometry.cuh"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {

const Family& igemm_sm90_half_family();
const Family& igemm_sm90_family();
const Family& direct_family();

namespace {

namespace geo = gemm_sm90_geometry;

struct GemmConfig {
  int bm, bn, stages, split = 0, im2col = 0, rowbox = 0, chunk = 0;
};

const ConfigTable<GemmConfig, 7> kTable{{{
    {{"bm", FieldRole::Chosen, "output channels a tile: 128 or 256 (64 or 128 a consumer warpgroup)"}, &GemmConfig::bm},
    {{"bn", FieldRole::Chosen, "positions a tile: 64, 96, 112, 128, 192 or 256 (tf32: 128)"}, &GemmConfig::bn},
    {{"stages", FieldRole::Optional, "stages of the shared-memory ring, 2 to 8 (default: as many as fit)"},
     &GemmConfig::stages},
    {{"split", FieldRole::Optional,
      "0: both consumer warpgroups share each tile's channels; 1: each takes every other tile whole (BM 128, "
      "BN at most 128), one storing while the other multiplies (default 0)"},
     &GemmConfig::split},
    {{"im2col", FieldRole::Optional,
      "1: the input as TMA im2col boxes, one tap's channels a chunk (NDHWC bf16 / fp16, any window, stride and "
      "dilation, zero padding); 0: tiled boxes of a GEMM (1 x 1 x 1, unit strides, no padding) (default: 0 where "
      "the layer is a GEMM)"},
     &GemmConfig::im2col},
    {{"rowbox", FieldRole::Optional,
      "1: one im2col box a kernel row, its KW taps reading it 0, DW, 2·DW ... rows further (unit stride along W, "
      "no residual; output rows counted OW + (KW - 1)·DW wide); 0: one box a tap (default 0)"},
     &GemmConfig::rowbox},
    {{"chunk", FieldRole::Optional,
      "input channels a chunk of the reduction: a 128-byte row (64 16-bit, 32 float32); with im2col boxes also 32 "
      "or 16 (64- or 32-byte rows), so that C = 32, 48, 96 ... is not padded to whole 64s (default: the 128-byte "
      "row)"},
     &GemmConfig::chunk},
}}};

bool is_tf32(const Problem& prob) { return prob.desc.dtype == DataType::Float32; }
bool is_ndhwc(const Problem& prob) { return prob.desc.layout == Layout::NDHWC; }
int element_bytes(const Problem& prob) { return is_tf32(prob) ? 4 : 2; }
// A chunk's channels (config field chunk; 0: the 128-byte row) and the bytes of its rows.
int chunk_of(int chunk, int element_bytes) { return chunk != 0 ? chunk : geo::row_elements(element_bytes); }
int chunk_of(const Problem& prob, const GemmConfig& c) { return chunk_of(c.chunk, element_bytes(prob)); }
int row_bytes(const Problem& prob, const GemmConfig& c) { return chunk_of(prob, c) * element_bytes(prob); }
// The chunk of im2col boxes that pads a tap's C channels least, the widest of those (C = 32: 32;
// 48 or 40: 16; a multiple of 64: 64).
int snug_chunk(const Problem& prob) {
  int best = geo::row_elements(element_bytes(prob));
  if (is_tf32(prob)) return best;
  const int64_t c = prob.desc.c;
  for (const int chunk : {32, 16}) {
    if (ceil_div(c, chunk) * chunk < ceil_div(c, best) * best) best = chunk;
  }
  return best;
}

long long positions_of(const Problem& prob) { return prob.desc.d * prob.desc.h * prob.desc.w; }
long long out_positions(const Problem& prob) { return prob.out.d * prob.out.h * prob.out.w; }

// A 1 x 1 x 1 window with unit strides and no padding: the layer is a GEMM of its tensors as they
// are (tiled boxes; NCDHW ones need an image's D·H·W positions on 16 bytes, a map's rows); any
// other needs the input's im2col boxes.
bool is_gemm(const Problem& prob) {
  const Conv3dDesc& d = prob.desc;
  const Dims3 &before = prob.pad.before, &after = prob.pad.after;
  return prob.taps() == 1 && d.stride.d == 1 && d.stride.h == 1 && d.stride.w == 1 && before.d == 0 &&
         before.h == 0 && before.w == 0 && after.d == 0 && after.h == 0 && after.w == 0;
}
bool tiled_possible(const Problem& prob) { return is_gemm(prob) && (is_ndhwc(prob) || positions_of(prob) % 8 == 0); }
// Whether the input can arrive as im2col boxes: 16-bit (NCDHW: from its channels-last copy),
// windows TMA's im2col mode can walk.
bool im2col_possible(const Problem& prob) { return !is_tf32(prob) && im2col::fits(make_params(prob)); }
// The input's boxes a layer takes by default: tiled for a GEMM, im2col otherwise.
int default_im2col(const Problem& prob) { return tiled_possible(prob) ? 0 : 1; }
// Whether the kernel's input map reads the caller's input (which then must lie on 16 bytes), not
// the channels-last copy an NCDHW layer's im2col boxes read.
bool reads_caller_input(const Problem& prob, const GemmConfig& c) { return is_ndhwc(prob) || c.im2col == 0; }

// Row boxes (config field rowbox): a chunk's weight boxes (KW), and the window origins its input box
// holds past the tile's (geo::row_reach), which each output row gains too.
int row_reach(const Problem& prob) {
  return geo::row_reach(static_cast<int>(prob.desc.kernel.w), static_cast<int>(prob.desc.dilation.w));
}
int row_taps(const Problem& prob, const GemmConfig& c) { return c.rowbox == 1 ? static_cast<int>(prob.desc.kernel.w) : 1; }
int halo(const Problem& prob, const GemmConfig& c) { return c.rowbox == 1 ? row_reach(prob) : 0; }
// Whether a layer can take row boxes: im2col boxes, a kernel row of two taps or more, unit stride
// along W (so that tap kw's origins are the box's rows kw·DW further), the wider rows' corner in
// range, and no residual (the stores drop each row's overhang; a residual's reads are not mapped).
bool rowbox_possible(const Problem& prob) {
  const ConvParams p = make_params(prob);
  const int extra = row_reach(prob);
  const long long rows = p.od * p.oh * (p.ow + extra) * (is_ndhwc(prob) ? p.n : 1);  // the kernel's (int) count
  return prob.desc.kernel.w > 1 && prob.desc.stride.w == 1 && !prob.desc.epilogue.residual &&
         im2col::corner_fits(im2col::upper(p.ow + extra, 1, p.pad_w, p.w)) && rows < (int64_t{1} << 31) - 256;
}
int shared_bytes(const Problem& prob, const GemmConfig& c, int stages) {
  return geo::shared_bytes(c.bm, c.bn, stages, element_bytes(prob), row_taps(prob, c), halo(prob, c),
                           row_bytes(prob, c));
}

// Windowed layers the planner gives to the im2col form rather than igemm_sm90_half: where its
// 128 x 256 tiles ran 1.05-1.32x it on an H100 (docs/kernels/gemm_sm90.md, "Windows through im2col
// boxes"). NDHWC: output channels whole 128-channel tiles (up to 512, as measured) and at least 4
// rounds of tiles an SM (fewer left SMs idle in the last round: 0.79-0.95x); NCDHW (tiles of an
// image's positions, output channels as M): few input channels (C <= 64) into 128 or more output
// channels, from the 3 rounds of tiles measured (wider layers ran 0.83-1.07x).
// NCDHW layers of 64 output channels from whole 64-channel chunks (64 or 128 input channels) with
// 3-tap kernel rows: 64-channel split tiles of row boxes (bm=64,bn=192,split=1,rowbox=1) ran
// 1.23-1.25x igemm_sm90_half (H100: unet3d_decoder, dilated; 32 input channels ran 0.74x).
bool rowbox_k64_wins(const Problem& prob) {
  const int64_t c = prob.desc.c;
  return !is_ndhwc(prob) && !is_gemm(prob) && prob.desc.k == 64 && c % 64 == 0 && c <= 128 &&
         prob.desc.kernel.w == 3 && im2col_possible(prob) && rowbox_possible(prob);
}

// NDHWC layers whose input channels are no multiple of 64 (32 to 160, whole 16s) into 96 to 192
// output channels, with kernel rows of two taps or more and at least 4 rounds of 128 x 256 tiles:
// 128 x 256 tiles of row boxes in 32-channel chunks (bm=128,bn=256,rowbox=1,chunk=32) ran
// 1.21-1.96x the planner's kernels then (H100: LTX-Video conv_in, Wan 2.1's 96-channel decoder
// layer, 5 layers outside the suites; bench/narrow_channels.jsonl), 32-channel chunks at least as
// fast as 16-channel ones for C = 48. NCDHW ran 0.89-1.32x (not taken); channels in whole 64s
// 0.81-0.87x (their 64-channel chunks pad nothing).
bool rowbox_narrow_wins(const Problem& prob) {
  const int64_t c = prob.desc.c, k = prob.desc.k;
  if (!is_ndhwc(prob) || is_gemm(prob) || c % 64 == 0 || c % 16 != 0 || c < 32 || c > 160 || k < 96 || k > 192 ||
      !im2col_possible(prob) || !rowbox_possible(prob)) {
    return false;
  }
  const long long rows = out_positions(prob) / prob.out.w * (prob.out.w + row_reach(prob)) * prob.desc.n;
  return ceil_div(k, 128) * ceil_div(rows, 256) >= 4 * kWaveBlocks;
}

bool im2col_wins(const Problem& prob) {
  const int64_t k = prob.desc.k;
  if (is_gemm(prob)) return false;  // (NCDHW GEMMs of D·H·W off 8: not measured)
  if (rowbox_k64_wins(prob) || rowbox_narrow_wins(prob)) return true;
  const long long rows = is_ndhwc(prob) ? out_positions(prob) * prob.desc.n : out_positions(prob);
  const long long tiles = ceil_div(k, 128) * ceil_div(rows, 256) * (is_ndhwc(prob) ? 1 : prob.desc.n);
  if (!is_ndhwc(prob)) return prob.desc.c <= 64 && k >= 128 && tiles >= 3 * kWaveBlocks;
  return k % 128 == 0 && k <= 512 && tiles >= 4 * kWaveBlocks;
}

// The tile widths, the planner's first. NDHWC: each consumer warpgroup one or two m64 blocks of
// rows; NCDHW tf32: one (two, with their two sets of A registers, spilled 128 bytes at 128
// accumulators).
const std::vector<int>& widths(const Problem& prob) {
  static const std::vector<int> half{128, 112, 96, 192, 256, 64}, tf32{128}, rows{128, 256}, boxes{128, 192, 256, 64};
  return is_ndhwc(prob) ? rows : is_tf32(prob) ? tf32 : tiled_possible(prob) ? half : boxes;
}

// A tile's fixed cost (its epilogue, its first chunk's wait) in positions' worth of products,
// for choosing its width.
constexpr long long kTileOverhead = 16;

// NDHWC: the batch's output positions are one run of rows. Row boxes count OW + (KW - 1)·DW a row.
long long tiles(const Problem& prob, const GemmConfig& c) {
  const long long positions = out_positions(prob) / prob.out.w * (prob.out.w + halo(prob, c));
  if (is_ndhwc(prob)) return ceil_div(prob.desc.k, c.bm) * ceil_div(positions * prob.desc.n, c.bn);
  return ceil_div(prob.desc.k, c.bm) * ceil_div(positions, c.bn) * prob.desc.n;
}

// Split rings are two halves of at least two stages: an even count.
int most_stages(const Problem& prob, const DeviceLimits& limits, const GemmConfig& c) {
  int stages = geo::kMaxStages;
  while (stages > 2 && (shared_bytes(prob, c, stages) > limits.max_smem_per_block_optin ||
                        (c.split == 1 && stages % 2 != 0))) {
    --stages;
  }
  return stages;
}

// At most 128 accumulators a consumer thread (its rows / 64 blocks of BN / 2): 256 x 256 tiles
// serialise the wgmmas for want of registers (ptxas C7511). And no single set of 128 (BM 128, BN
// 256, shared tiles) where 16-bit outputs take the erf GELU without a residual: those 32
// unrolled steps of the epilogue spilled 16 bytes (two sets of 64, 96 in one, a residual's
// schedule or float32 outputs do not).
// NDHWC: a warpgroup's BN / 128 blocks of 64 rows by BM channels, BM / 2 accumulators each; NCDHW
// tf32: one block.
// NDHWC 16-bit outputs with a residual: no single set of 128 (BM 256), which spilled 8-40 bytes
// with an activation.
bool registers_fit(const Problem& prob, const GemmConfig& c) {
  if (is_ndhwc(prob)) {
    if (prob.out_dtype != DataType::Float32 && prob.desc.epilogue.residual && c.bm == 256) return false;
    return c.bn / 128 * c.bm / 2 <= 128;
  }
  if (is_tf32(prob)) return c.bn == 128;
  const int rows = c.split == 1 ? c.bm : c.bm / 2;  // a consumer warpgroup's
  const Epilogue& e = prob.desc.epilogue;
  if (e.activation == Activation::Gelu && !e.residual && prob.out_dtype != DataType::Float32 && rows == 64 &&
      c.bn > 192) {
    return false;
  }
  return rows / 64 * c.bn <= 256;
}

bool fits(const Problem& prob, const DeviceLimits& limits, const GemmConfig& c) {
  const std::vector<int>& list = widths(prob);
  const bool width =
      std::find(list.begin(), list.end(), c.bn) != list.end() && (c.split == 0 || !(is_tf32(prob) || is_ndhwc(prob)));
  // im2col 1 wherever its boxes can serve (whole boxes of 64 rows), 0 only for a GEMM.
  const bool boxes = c.im2col == 1 ? im2col_possible(prob) && c.bn % 64 == 0 : c.im2col == 0 && tiled_possible(prob);
  const bool rowbox = c.rowbox == 0 || (c.rowbox == 1 && c.im2col == 1 && rowbox_possible(prob));
  // Narrower chunks only of im2col boxes (one tap's channels): 32 or 16 16-bit channels.
  const int chunk = chunk_of(prob, c);
  const bool chunked = chunk == geo::row_elements(element_bytes(prob)) ||
                       (c.im2col == 1 && !is_tf32(prob) && (chunk == 32 || chunk == 16));
  // BM 64: a split warpgroup's whole tile of one m64 block, NCDHW 16-bit im2col layers.
  const bool one_block = c.bm == 64 && c.split == 1 && c.im2col == 1;
  return boxes && rowbox && chunked && (c.bm == 128 || c.bm == 256 || one_block) &&
         (c.split == 0 || (c.split == 1 && (c.bm == 128 || one_block))) && width &&
         registers_fit(prob, c) && c.stages >= (c.split == 1 ? 4 : 2) && (c.split == 0 || c.stages % 2 == 0) &&
         c.stages <= geo::kMaxStages && shared_bytes(prob, c, c.stages) <= limits.max_smem_per_block_optin;
}

class GemmSm90Family final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  const char* arch() const override { return "sm_90 exactly (built for sm_90a)"; }

  Refusal serves_types(const Problem& prob) const override { return serves_half_or_tf32(prob); }

  Refusal can_implement(const Problem& prob, const DeviceLimits& limits) const override {
    const Conv3dDesc& d = prob.desc;
    if (limits.cc_major != 9 || limits.cc_minor != 0) return "compute capability 9.0";
    if (d.groups != 1) return "groups == 1";
    if (!tiled_possible(prob) && !im2col_possible(prob)) {
      return "a 1 x 1 x 1 window, unit strides and no padding (a GEMM; NCDHW: D·H·W a multiple of 8), or a bf16 / "
             "fp16 layer whose windows TMA's im2col boxes walk (zero padding within 16 of the extents, strides up "
             "to 8)";
    }
    // A map's rows: the weight's C channels a tap on 16 bytes.
    if (d.c % 8 != 0) return "C a multiple of 8 (rows on 16 bytes)";
    // 32-bit box coordinates: NCDHW boxes of an image's (D·H·W) x C; NDHWC's output positions
    // are the rows of one GEMM. (NDHWC images of any size: each box coordinate is one axis.)
    if ((!is_ndhwc(prob) && d.c * positions_of(prob) >= (int64_t{1} << 31)) ||
        d.k > std::numeric_limits<int32_t>::max() || d.c * prob.taps() > std::numeric_limits<int32_t>::max() ||
        (is_ndhwc(prob) && d.n * out_positions(prob) > (int64_t{1} << 31) - 256)) {  // (rows of the last tile)
      return "fewer than 2^31 output channels and NDHWC output positions in all, an NCDHW image of fewer than 2^31 "
             "elements";
    }
    // Float32 outputs of long 16-bit reductions keep partial sums apart (igemm_sm90_half's blocked
    // sums); this kernel's accumulators run the whole reduction.
    if (!is_tf32(prob) && prob.out_dtype == DataType::Float32 && d.c * prob.taps() > 1024) {
      return "a reduction of at most 1024 terms (C·KD·KH·KW) for float32 outputs of 16-bit inputs";
    }
    return std::nullopt;
  }

  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    if (serves_types(prob) || can_implement(prob, limits) || declines(prob, limits)) return std::nullopt;
    return plan(prob, limits, heuristic_config(prob));
  }

  Refusal declines(const Problem& prob, const DeviceLimits& limits) const override {
    // The tf32 form ran 0.86-1.01x igemm_sm90 (NCDHW) and 1.00x igemm_sm90_half (NDHWC)
    // (docs/kernels/gemm_sm90.md): those keep the class.
    if (is_tf32(prob)) {
      return is_ndhwc(prob) ? "the tf32 class in NDHWC: igemm_sm90_half plans these layers; this kernel by --config or tuning"
                            : "the tf32 class: igemm_sm90 plans these layers; this kernel by --config or tuning";
    }
    // NDHWC images igemm_sm90_half refuses (2^31 elements or more): this kernel's boxes, or the
    // direct kernel's CUDA cores.
    if (is_ndhwc(prob) && !tiled_possible(prob) && igemm_sm90_half_family().can_implement(prob, limits)) {
      return std::nullopt;
    }
    if (!tiled_possible(prob) && !im2col_wins(prob)) {
      return is_ndhwc(prob)
                 ? "a window, stride or padding in NDHWC with output channels not 128, 256, 384 or 512, or fewer than "
                   "4 rounds of 128 x 256 tiles an SM: igemm_sm90_half plans these layers; this kernel's im2col boxes "
                   "by --config or tuning"
                 : "a window, stride or padding (or D·H·W off 8) in NCDHW with more than 64 input or fewer than 128 "
                   "output channels: igemm_sm90_half plans these layers; this kernel's im2col boxes by --config or "
                   "tuning";
    }
    if (prob.desc.c < 32) return "fewer than 32 input channels: a chunk of 64 would be mostly zeros";
    if (prob.desc.k <= 64 && !rowbox_k64_wins(prob)) {
      return "at most 64 output channels: half of a 128-channel tile or more would be padding";
    }
    // NDHWC 192 -> 96 ran 0.96x igemm_sm90_half; 128 output channels and more ran 1.41-1.58x.
    if (is_ndhwc(prob) && prob.desc.k <= 96 && !rowbox_narrow_wins(prob)) {
      return "NDHWC with at most 96 output channels: a quarter of a 128-channel tile or more would be padding";
    }
    // Its epilogue runs after the tile's products with nothing else to overlap it in the block;
    // igemm_sm90_half ran such layers 1.1-1.3x faster, the residual prefetched to L2 or not
    // (docs/kernels/gemm_sm90.md).
    if (prob.desc.epilogue.residual) {
      return "a residual: igemm_sm90_half's two blocks an SM overlap one's epilogue with the other's products";
    }
    return std::nullopt;
  }

  std::vector<Plan> candidates(const Problem& prob, const DeviceLimits& limits, int count) const override {
    std::vector<Plan> plans;
    if (serves_types(prob) || can_implement(prob, limits)) return plans;
    // The heuristic's choice, each shape's best width, then the other widths; where a kernel row's
    // taps can share one input box, each of the first ones with row boxes after it, and where
    // narrower chunks pad the channels less, each of those with them too (row boxes of 32-channel
    // chunks where a row's weight boxes of 64 leave too few stages: 7-tap rows).
    const GemmConfig first = heuristic_config(prob);
    const int bm = first.bm, im2col = first.im2col;
    auto sized = [&](const GemmConfig& c, int rowbox, int chunk) {
      GemmConfig s{c.bm, c.bn, 0, c.split, im2col, rowbox, chunk};
      s.stages = most_stages(prob, limits, s);
      return s;
    };
    auto add = [&](const GemmConfig& c, int rowbox = 0, int chunk = 0) {
      if (fits(prob, limits, sized(c, rowbox, chunk))) {
        plans.push_back(plan(prob, limits, {c.bm, c.bn, 0, c.split, im2col, rowbox, chunk}));
      }
    };
    const bool rows = im2col == 1 && rowbox_possible(prob);
    const int snug = im2col == 1 && !is_tf32(prob) ? snug_chunk(prob) : 0;  // (the 128-byte row: 64)
    // Narrower chunks where 64-channel ones pad the channels: 32 (which ran at least as fast as 16
    // for C = 48), and 16 where that pads less.
    std::vector<int> narrower;
    if (snug == 32) narrower = {32};
    if (snug == 16) narrower = {32, 16};
    auto add_both = [&](const GemmConfig& c) {
      add(c);
      for (const int chunk : narrower) add(c, 0, chunk);
      if (!rows) return;
      add(c, 1);
      for (const int chunk : narrower) add(c, 1, chunk);
      if (narrower.empty() && !fits(prob, limits, sized(c, 1, 0))) add(c, 1, 32);
    };
    add(first, first.rowbox, first.chunk);  // the heuristic's choice as it is, then its twins
    add_both(first);
    for (const GemmConfig& c : {GemmConfig{bm, 0, 0, 0}, GemmConfig{384 - bm, 0, 0, 0}, GemmConfig{128, 0, 0, 1},
                                GemmConfig{64, 0, 0, 1}}) {
      add_both({c.bm, best_width(prob, c.bm, c.split), 0, c.split});
    }
    for (const int split : {0, 1}) {
      for (const int bm : {128, 256, 64}) {
        for (const int bn : widths(prob)) add({bm, bn, 0, split});
      }
    }
    return distinct_plans(std::move(plans), count);
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    if (const Refusal r = serves_types(prob) ? serves_types(prob) : can_implement(prob, limits)) {
      refuse_config(forced, *r);
    }
    // The family alone: the planner's configuration. Otherwise the fields left out take the
    // planner's BM and width where the forced tile shape is the planner's (else split 0, BM 128 for
    // a split, and the best width there), the layer's boxes, and the optional fields' defaults.
    const GemmConfig h = heuristic_config(prob);
    const bool any = std::any_of(forced.values.begin(), forced.values.end(), [](const auto& v) { return v.has_value(); });
    const int split = forced.get("split").value_or(any ? 0 : h.split);
    const int bm = forced.get("bm").value_or(split == h.split ? h.bm : split == 1 ? 128 : heuristic_bm(prob));
    const GemmConfig base = !any ? h
                                 : GemmConfig{bm, bm == h.bm && split == h.split ? h.bn : best_width(prob, bm, split), 0,
                                              split, default_im2col(prob)};
    GemmConfig c = kTable.apply(base, forced);
    if (!forced.get("stages")) c.stages = 0;
    GemmConfig sized = c;
    if (sized.stages == 0) sized.stages = most_stages(prob, limits, c);
    if (!fits(prob, limits, sized)) {
      refuse_config(forced,
                    "BM of 128 or 256 output channels, BN of 64, 96, 112, 128, 192 or 256 positions (at most 128 with "
                    "BM 256 or split 1, 192 with BM 128 for 16-bit outputs of the erf GELU without a residual; NCDHW tf32: "
                    "128; NDHWC: 128 or 256, 128 with BM 256, BM 128 for 16-bit outputs with a residual; neither "
                    "splits), 2 to 8 stages within the block's shared memory (an even "
                    "number from 4 with split 1), split 0 or 1 (1 with BM 128, or BM 64 with im2col boxes in "
                    "NCDHW), im2col 0 for a GEMM or 1 for a bf16 / fp16 layer, rowbox 1 with im2col boxes for a "
                    "kernel row of two taps or more, unit stride along W and no residual, chunk 64 (tf32: 32) or "
                    "with im2col boxes 32 or 16");
    }
    return plan(prob, limits, c);
  }

  // The weight's map (the first): K rows of C channels in boxes of BM rows x a chunk's row of
  // channels; the input's (the second): NCDHW (D·H·W, C, N) in boxes of a 128-byte row of
  // positions x as many channels, NDHWC N·D·H·W rows of C channels in boxes of BN rows x a
  // 128-byte row, im2col boxes of window origins x a chunk's channels; all swizzled by their rows'
  // bytes, as wgmma reads them (float32 rounded to tf32 by the copy).
  void tensor_maps(const Plan& plan, const void* input, const void* weight, void*, CUtensorMap* weight_map,
                   CUtensorMap* input_map, CUtensorMap*) const override {
    const ConvParams& p = plan.params;
    const CUtensorMapDataType type = operand_map_type(plan.key.dtype, plan.key.precision);
    const GemmConfig c = kTable.load(plan.key.config);
    // A chunk's channels, and the swizzle of its rows (128, or with im2col boxes 64 or 32 bytes).
    const int element = plan.key.dtype == DataType::Float32 ? 4 : 2;
    const auto row = static_cast<unsigned>(chunk_of(c.chunk, element));
    const int bytes = static_cast<int>(row) * element;
    const CUtensorMapSwizzle swizzle = bytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                       : bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                     : CU_TENSOR_MAP_SWIZZLE_32B;
    const long long terms = p.c * p.kd * p.kh * p.kw;  // a weight row: (kd, kh, kw, c) in NDHWC layers
    thread_local LastTensorMap last_weight, last_input;
    *weight_map = last_weight.get(plan.key, weight, {p.k, terms}, [&] {
      return encode_matrix_rows(type, weight, p.k, terms, static_cast<unsigned>(c.bm), row, swizzle);
    });
    // (The output's extents too: an im2col box's bounding box ends at the last window origin, which
    // the padding after each axis moves.)
    *input_map = last_input.get(plan.key, input, {p.n, p.c, p.d, p.h, p.w, p.pad_d, p.pad_h, p.pad_w, p.od, p.oh, p.ow},
                                [&] {
      if (c.im2col == 1) {  // BN window origins a box (and a kernel row's reach more), a chunk's channels each
        const int extra = c.rowbox == 1 ? geo::row_reach(p.kw, p.dw) : 0;
        return encode_input_im2col(type, input, p, row, static_cast<unsigned>(c.bn + extra), swizzle, extra);
      }
      if (plan.key.layout == Layout::NDHWC) {  // rows of C channels, BN rows a box
        return encode_matrix_rows(type, input, p.n * p.d * p.h * p.w, p.c,
                                  static_cast<unsigned>(c.bn), row,
                                  CU_TENSOR_MAP_SWIZZLE_128B);
      }
      return encode_channel_runs(type, input, p.n, p.c, p.d * p.h * p.w, row, row);
    });
  }

 private:
  // Tiles of 256 output channels where 128 would read each input box 8 times or more: layers of
  // many output channels (1024 and up) are bound by L2's reads, which BM 256 halves for the
  // input (2048-channel layers 1.16-1.26x faster; a 512-channel one 0.83x).
  // (Where some width's accumulators fit at 256.)
  static int heuristic_bm(const Problem& prob) {
    const std::vector<int>& list = widths(prob);
    const bool fits_256 =
        std::any_of(list.begin(), list.end(), [&](int bn) { return registers_fit(prob, {256, bn, 0, 0}); });
    return prob.desc.k >= 1024 && fits_256 ? 256 : 128;
  }

  // The planner's tile: im2col layers' 128 x 256 where its accumulators fit (the tile measured
  // against igemm_sm90_half: im2col_wins), else the heuristic's BM and its best width.
  static GemmConfig heuristic_config(const Problem& prob) {
    if (rowbox_k64_wins(prob)) return {64, 192, 0, 1, 1, 1};
    if (rowbox_narrow_wins(prob)) return {128, 256, 0, 0, 1, 1, 32};
    const int bm = heuristic_bm(prob), im2col = default_im2col(prob);
    const int bn = im2col == 1 && registers_fit(prob, {bm, 256, 0, 0}) ? 256 : best_width(prob, bm, 0);
    return {bm, bn, 0, 0, im2col};
  }

  // The width whose rounds of one tile an SM (kWaveBlocks) cost least, a round the tile's
  // positions and its fixed cost: pointwise_512's 784 positions an image take 7 tiles of 112
  // (no partial tile) where 128 leaves the 7th mostly empty.
  // Of the widths whose accumulators fit the tile's warpgroups (BM, split).
  static int best_width(const Problem& prob, int bm, int split) {
    int best = widths(prob).front();
    auto cost = [&](int bn) { return ceil_div(tiles(prob, {bm, bn, 0}), kWaveBlocks) * (bn + kTileOverhead); };
    for (const int bn : widths(prob)) {
      if (registers_fit(prob, {bm, bn, 0, split}) && cost(bn) < cost(best)) best = bn;
    }
    return best;
  }

  Plan plan(const Problem& prob, const DeviceLimits& limits, GemmConfig c) const {
    c.chunk = chunk_of(prob, c);  // (the key names it)
    if (c.stages == 0) c.stages = most_stages(prob, limits, c);
    Plan plan = new_plan(prob, *this, kTable, c, geo::kThreads, shared_bytes(prob, c, c.stages));
    plan.grid = checked_grid(std::min<long long>(tiles(prob, c), limits.sm_count), *this);
    plan.weight_map = true;
    // NCDHW layers through im2col boxes read channels-last copies: of the input every call, and of
    // a weight of several taps ((kd, kh, kw, c) rows), once (prepare_weights).
    if (!reads_caller_input(prob, c)) {
      plan.input_copy = channels_last_plan(plan.params, prob.desc.dtype, ChannelsLastTensor::Input, limits);
      if (prob.taps() > 1) plan.prep = channels_last_plan(plan.params, prob.desc.dtype, ChannelsLastTensor::Weight, limits);
      return plan;
    }
    // An input off 16 bytes has no map: igemm_sm90_half's plan for such an input runs it (its
    // first candidate: its choice, also where its heuristic would decline the layer); igemm_sm90's
    // for NCDHW in the tf32 class; direct's for NDHWC images igemm_sm90_half refuses (2^31
    // elements or more).
    const Family& twin = is_tf32(prob) && !is_ndhwc(prob) ? igemm_sm90_family() : igemm_sm90_half_family();
    std::vector<Plan> other = twin.candidates(prob, limits, 1);
    if (other.empty() && is_ndhwc(prob)) other = direct_family().candidates(prob, limits, 1);
    if (other.empty()) {
      throw Error(ErrorCategory::Unsupported, "gemm_sm90: no plan for an input off 16 bytes");
    }
    plan.unaligned = other.front().unaligned ? other.front().unaligned : std::make_shared<const Plan>(other.front());
    return plan;
  }

  const KernelDef def_{"gemm_sm90", "gemm_sm90/gemm_sm90.cu", kUsesConvolution, true, kTable.infos()};
};

}  // namespace

const Family& gemm_sm90_family() {
  static const GemmSm90Family family;
  return family;
}

}  // namespace conv3djit::detail
