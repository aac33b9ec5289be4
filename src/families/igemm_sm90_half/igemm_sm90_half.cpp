// igemm_sm90_half: implicit GEMM of bf16 / fp16 tensors, and of float32 ones in the tf32 class,
// on Hopper's warpgroup tensor cores (wgmma, sm_90a), whole 16-byte pieces of channels a
// group: BM output positions x BN output channels of one group a block, chunks of one tap's
// channels (128 bytes: 64 halves, 32 floats; 64 bytes, 32 halves, for 16-bit layers of 32 channels a
// group) staged into a ring of stages swizzled as wide as their rows, each
// operand's as one TMA box where a map can serve it (the input's in im2col mode), else by the
// threads' copies (docs/kernels/igemm_sm90_half.md). NCDHW layers of KD x 1 x 1 windows read their
// input in M-major boxes (and a weight of several taps rewritten channels-last); other NCDHW layers
// read channels_last copies of their input and weight, made on every call; both store NCDHW.
// Float32 operands are rounded to TF32 as they arrive: by the TMA (maps of the TFLOAT32 type), by
// NCDHW's channels_last copies, or by the threads that stage them.
// The planner leaves ungrouped float32 NCDHW layers to igemm_sm90 but for wide ones
// (copies_pay_off); tuning offers this family's tiles there.
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <memory>

#include "driver/tensor_map.hpp"
#include "families/channels_last/channels_last.hpp"
#include "igemm_sm90_half/geometry.cuh"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {
namespace {

namespace geo = igemm_sm90_half_geometry;

struct HalfSm90Config {
  int bm, bn, stages, im2col = 0, mmajor = 0, chunk = 0, pn = 0, groups = 1;
};

const ConfigTable<HalfSm90Config, 8> kTable{{{
    {{"bm", FieldRole::Chosen,
      "output positions a block: 64 or 128 (one warpgroup per 64), or with pn 128 or 256 (one warpgroup per pn)"},
     &HalfSm90Config::bm},
    {{"bn", FieldRole::Chosen, "output channels a block: 64, 96, 128, 192 or 256"}, &HalfSm90Config::bn},
    {{"stages", FieldRole::Optional, "stages of the shared-memory ring, 3 to 8 (default 3)"}, &HalfSm90Config::stages},
    {{"im2col", FieldRole::Optional,
      "1: the input as TMA im2col boxes (zero padding, strides up to 8, padding within 16 of the extents), "
      "0: by the threads' copies (default: 1 where the layer allows it and mmajor is 0)"},
     &HalfSm90Config::im2col},
    {{"mmajor", FieldRole::Optional,
      "1: A in M-major boxes straight from an NCDHW input (KDx1x1, unit strides along H and W, zero "
      "padding along D only, H*W % 8 == 0 (% 64 with a stride along D), or D*H*W % 8 == 0 for a pointwise "
      "layer without padding), "
      "0: NCDHW inputs through the channels-last copy (default: 1 where the layer allows it)"},
     &HalfSm90Config::mmajor},
    {{"chunk", FieldRole::Optional,
      "channels a chunk of the reduction: 64 (bf16 / fp16, 128-byte rows) or 32 (bf16 / fp16, 64-byte rows, "
      "mmajor 0), 32 for float32 (default: 32 for 16-bit layers of 32 channels a group, else 128 bytes' worth)"},
     &HalfSm90Config::chunk},
    {{"pn", FieldRole::Optional,
      "0: output positions are the products' M (64 a warpgroup); 128 or 256: the block's 64 output "
      "channels (bn 64) are M and each warpgroup's pn positions N (bf16 / fp16, mmajor 0) (default: the "
      "planner's, 128 for layers of at most 64 output channels and not 64 input channels a group, else 0)"},
     &HalfSm90Config::pn},
    {{"groups", FieldRole::Derived, "the layer's groups: a block's columns lie in one"}, &HalfSm90Config::groups},
}}};

// The kernel's blocks an SM (its register budget), as its __launch_bounds__ compute them.
int blocks_an_sm(const SpecKey& key) {
  const HalfSm90Config c = kTable.load(key.config);
  return geo::blocks_an_sm(c.bn, key.c_per_group, key.kd * key.kh * key.kw, key.out_dtype == DataType::Float32,
                           element_bytes(key.dtype), c.im2col != 0 || c.mmajor != 0);
}

// Float32 NCDHW layers of one group that this family takes through channels-last copies: wide
// ones with several taps and many output positions, where igemm_sm90's tiles run slowest. Measured
// (H200, against igemm_sm90's gather): C3D conv3b (256 -> 256, 3^3, 50 176 positions) 1.27x, with
// ReLU and a residual 1.28x; at 4 608-6 272 positions 0.94-1.03x (512 -> 512 and 256 -> 256,
// 3^3), and pointwise 512 -> 2048 0.42x (the copies cost more than the products there).
bool copies_pay_off(const Problem& prob) {
  const int64_t positions = prob.output_elements / prob.desc.k;
  return prob.desc.c >= 256 && prob.desc.k >= 256 && prob.taps() > 1 && prob.desc.k * prob.taps() >= 2048 &&
         positions >= 16384;
}

// Channels of a full chunk (a 128-byte row) of prob's element type.
int full_chunk(const Problem& prob) { return geo::chunk_channels(element_bytes(prob.desc.dtype)); }

// The chunk the planner takes: 32 channels (64-byte rows) for 16-bit layers of 32 channels a
// group, whose 64-channel chunks would multiply as many zeros as terms; else a full row.
int default_chunk(const Problem& prob) {
  const int full = full_chunk(prob);
  return full == 64 && prob.c_per_group == 32 ? 32 : full;
}

// Whether a box of `chunk` channels stays within one group's channels.
bool group_boxes(const Problem& prob, int chunk) { return prob.desc.groups == 1 || prob.c_per_group % chunk == 0; }

// Whether prob's input can arrive as im2col boxes of `chunk` channels (geometry.cuh).
bool im2col_fits(const Problem& prob, int chunk) {
  return group_boxes(prob, chunk) && im2col::fits(make_params(prob));
}

// Bytes of a staged row of configuration c.
int row_bytes(const Problem& prob, const HalfSm90Config& c) { return c.chunk * element_bytes(prob.desc.dtype); }

// Whether prob's A can be read in M-major boxes straight from its NCDHW input: a 16-bit layer (TF32
// operands are K-major only) whose window is a column along D (1x1x1 or KDx1x1: the (2+1)-D
// networks' temporal convolutions) with unit strides along H and W and zero padding along D only. A tap then
// reads the output's positions of an image shifted by whole input planes, (kd * DD - pad_d) * H * W
// positions, a run that TMA zero-fills where it leaves the image's planes, which is the padding.
// A map's strides need the planes on 16 bytes, and a box's first position along the innermost
// dimension too (other origins fault: docs/kernels/grouped.md), so shifted layers need H * W a
// multiple of 8. A stride along D maps output plane od to input plane od * SD (+ the tap's
// shift), so each box of 64 positions must lie in one plane: H * W a multiple of 64 there. A
// box's coordinates are 32-bit: the first tap's shift back, and the last output plane's input
// plane at the last tap, stay within them.
bool mmajor_fits(const Problem& prob) {
  const Conv3dDesc& d = prob.desc;
  const Dims3 &before = prob.pad.before, &after = prob.pad.after;
  const bool padded_d = before.d != 0 || after.d != 0;
  const bool shifted = d.kernel.d > 1 || before.d != 0 || d.stride.d > 1;
  const int64_t plane = d.h * d.w, limit = std::numeric_limits<int32_t>::max();
  const int64_t last_plane = (prob.out.d - 1) * d.stride.d + (d.kernel.d - 1) * d.dilation.d - before.d;
  const bool coordinates_fit = before.d * plane <= limit && (last_plane + 1) * plane <= limit;
  return group_boxes(prob, full_chunk(prob)) && d.dtype != DataType::Float32 && d.layout == Layout::NCDHW &&
         d.kernel.h == 1 && d.kernel.w == 1 && d.stride.h == 1 && d.stride.w == 1 &&
         (d.stride.d == 1 || plane % 64 == 0) && before.h == 0 && before.w == 0 && after.h == 0 && after.w == 0 &&
         (!padded_d || d.padding_mode == PaddingMode::Zeros) && (shifted ? plane : d.d * plane) % 8 == 0 &&
         coordinates_fit;
}

// The input's staging the planner takes for prob: M-major boxes straight from a pointwise NCDHW
// input (full rows), else im2col boxes where TMA can walk the windows, else the threads' copies;
// chunks of 32 channels where default_chunk() says so (with as many stages: 4, 6 and 8 ran as 3 on
// a 32 -> 64 layer, docs/kernels/igemm_sm90_half.md).
HalfSm90Config staged(HalfSm90Config c, const Problem& prob) {
  c.groups = static_cast<int>(prob.desc.groups);
  c.mmajor = mmajor_fits(prob) ? 1 : 0;
  c.chunk = c.mmajor == 1 ? full_chunk(prob) : default_chunk(prob);
  c.im2col = c.mmajor == 0 && im2col_fits(prob, c.chunk) ? 1 : 0;
  return c;
}

bool fits(const Problem& prob, const DeviceLimits& limits, const HalfSm90Config& c) {
  if (c.groups != prob.desc.groups) return false;
  const int full = full_chunk(prob);
  if (c.chunk != full && !(full == 64 && c.chunk == 32)) return false;
  if (c.im2col != 0 && (c.im2col != 1 || !im2col_fits(prob, c.chunk))) return false;
  if (c.mmajor != 0 && (c.mmajor != 1 || c.im2col != 0 || c.chunk != full || !mmajor_fits(prob))) return false;
  if (c.pn == 0 ? c.bm != 64 && c.bm != 128
                : (c.pn != 128 && c.pn != 256) || (c.bm != 128 && c.bm != 256) || c.bm % c.pn != 0 || c.bn != 64 ||
                      c.mmajor != 0 || full != 64) {
    return false;
  }
  if (c.bn != 64 && c.bn != 96 && c.bn != 128 && c.bn != 192 && c.bn != 256) return false;
  if (c.stages < 3 || c.stages > geo::kMaxStages) return false;
  if (geo::blocked(static_cast<int>(prob.c_per_group), static_cast<int>(prob.taps()), prob.out_dtype == DataType::Float32,
                   element_bytes(prob.desc.dtype)) &&
      (c.bn > 128 || c.pn > 128)) {
    return false;
  }
  return geo::shared_bytes(c.bm, c.bn, c.stages, row_bytes(prob, c)) <= limits.max_smem_per_block_optin;
}

class HalfSm90Family final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  const char* arch() const override { return "sm_90 exactly (built for sm_90a)"; }

  Refusal serves_types(const Problem& prob) const override { return serves_half_or_tf32(prob); }

  Refusal can_implement(const Problem& prob, const DeviceLimits& limits) const override {
    const Conv3dDesc& d = prob.desc;
    if (limits.cc_major != 9 || limits.cc_minor != 0) return "compute capability 9.0";
    if (const int piece = 16 / element_bytes(d.dtype); prob.c_per_group % piece != 0) {
      return fmt::format("input channels a group a multiple of {} (16-byte pieces of a tap)", piece);
    }
    // Offsets inside one image are 32-bit.
    if (d.c * d.d * d.h * d.w >= (int64_t{1} << 31)) return "an image of fewer than 2^31 elements";
    return std::nullopt;
  }

  // Where a tap has at least 32 channels and a group 16 output channels: choose_tile's.
  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    if (declines(prob, limits)) return std::nullopt;
    return choose_tile(prob, limits);
  }

  Refusal declines(const Problem& prob, const DeviceLimits&) const override {
    // Grouped ones have no other tensor-core kernel: they come here, copies and all. Of one group,
    // igemm_sm90's gather reads NCDHW in place; the copies pay off where its tiles run slowest
    // (c3d_conv3b tf32: igemm_sm90 0.60 ms, this kernel with its copies 0.48).
    if (prob.desc.dtype == DataType::Float32 && prob.desc.layout == Layout::NCDHW && prob.desc.groups == 1 &&
        !copies_pay_off(prob)) {
      return "float32 NCDHW layers of one group, unless of 256 channels or more in and out, several taps, K x "
             "taps >= 2048 and 16384 output positions or more: igemm_sm90 gathers them in place, where this "
             "family reads channels-last copies of input and weight made on every call (`conv3djit tune` "
             "times both)";
    }
    if (prob.c_per_group < 32) {
      return "fewer than 32 input channels a group: a chunk is 32 or 64 halves or 32 floats, much of each "
             "wgmma's terms would be zero (igemm_sm80 and igemm_sm90 pack small C densely)";
    }
    // Measured on H200 against igemm_sm90's 32-column tiles: 0.39x at 32 output channels, 0.50x at
    // 16, 1.00x at 64 (docs/kernels/igemm_sm90_half.md).
    if (prob.desc.dtype == DataType::Float32 && prob.desc.groups == 1 && prob.k_per_group < 64) {
      return "float32 layers of one group with fewer than 64 output channels: igemm_sm90's 32-column tiles "
             "waste less of each product";
    }
    // A quarter of the narrowest column block; the grouped kernel's FFMA serves narrower groups.
    if (prob.k_per_group < 16) {
      return "fewer than 16 output channels a group: most of a 64-column block would be padding";
    }
    return std::nullopt;
  }

  // choose()'s pick, also for fewer than 32 channels; then the other tiles and rings that fit, of
  // column blocks that are not mostly padding.
  std::vector<Plan> candidates(const Problem& prob, const DeviceLimits& limits, int count) const override {
    std::vector<Plan> plans;
    auto first = choose_tile(prob, limits);
    if (!first) return plans;
    HalfSm90Config copied = kTable.load(first->key.config);
    plans.push_back(std::move(*first));
    if (copied.im2col == 1 || copied.mmajor == 1) {  // the choice with the threads' copies too
      copied.im2col = copied.mmajor = 0;
      plans.push_back(plan(prob, limits, copied));
    }
    // The other chunk width of 16-bit layers whose channels fill chunks of 32 but not of 64.
    if (const HalfSm90Config first_c = kTable.load(plans.front().key.config);
        full_chunk(prob) == 64 && first_c.mmajor == 0 && prob.c_per_group % 64 == 32) {
      HalfSm90Config other = first_c;
      other.chunk = first_c.chunk == 32 ? 64 : 32;
      other.im2col = im2col_fits(prob, other.chunk) ? 1 : 0;
      if (fits(prob, limits, other)) plans.push_back(plan(prob, limits, other));
    }
    const HalfSm90Config others[] = {{128, 256, 4}, {128, 192, 4}, {128, 128, 3}, {128, 96, 3}, {128, 64, 3},
                                     {64, 128, 3},  {64, 64, 3},   {128, 256, 3}, {128, 128, 4}, {64, 128, 4},
                                     {256, 64, 4, 0, 0, 0, 128}, {256, 64, 4, 0, 0, 0, 256}};
    for (const HalfSm90Config& other : others) {
      const HalfSm90Config c = staged(other, prob);
      if (useful_width(prob.k_per_group, c.bn, 64) && fits(prob, limits, c)) plans.push_back(plan(prob, limits, c));
    }
    return distinct_plans(std::move(plans), count);
  }

  // The weight's map (the first), where weight_boxes() holds: the K x KD·KH·KW·C matrix in boxes
  // of BN rows x a chunk's channels. The input's (the second, for an aligned input: unaligned ones run
  // the twin): with mmajor, the NCDHW input in tiled boxes of 64 positions x 64 channels (a tap's
  // boxes start whole planes further on); with im2col, the NDHWC input in im2col mode, BM window
  // origins x a chunk's channels a copy, its bounding box the layer's window origins (geometry.cuh).
  // All swizzled as wide as the ring's rows (128 or 64 bytes).
  void tensor_maps(const Plan& plan, const void* input, const void* weight, void* /*output*/,
                   CUtensorMap* weight_map, CUtensorMap* input_map, CUtensorMap*) const override {
    const ConvParams& p = plan.params;
    const HalfSm90Config c = kTable.load(plan.key.config);
    // Float32 here is the tf32 class's: the TMA rounds its boxes.
    const CUtensorMapDataType type = operand_map_type(plan.key.dtype, plan.key.precision);
    const CUtensorMapSwizzle swizzle = c.chunk * element_bytes(plan.key.dtype) == geo::kRowBytes
                                           ? CU_TENSOR_MAP_SWIZZLE_128B
                                           : CU_TENSOR_MAP_SWIZZLE_64B;
    if (geo::weight_boxes(reinterpret_cast<unsigned long long>(weight))) {
      thread_local LastTensorMap last;
      const long long kred = static_cast<long long>(p.c_per_group) * p.kd * p.kh * p.kw;
      *weight_map = last.get(plan.key, weight, {p.k, kred}, [&] {
        return encode_matrix_rows(type, weight, p.k, kred, static_cast<unsigned>(c.bn), static_cast<unsigned>(c.chunk),
                                  swizzle);
      });
    }
    if (c.mmajor == 1) {
      // The NCDHW input as a (D·H·W) x C x N tensor in boxes of 64 positions x 64 channels.
      thread_local LastTensorMap last;
      *input_map = last.get(plan.key, input, {p.n, p.c, p.d, p.h, p.w}, [&] {
        return encode_channel_runs(type, input, p.n, p.c, p.d * p.h * p.w, geo::kMajorBox,
                                   static_cast<unsigned>(c.chunk));
      });
    }
    if (c.im2col == 1) {
      thread_local LastTensorMap last;
      // (The output's extents too: the bounding box ends at the last window origin, which the
      // padding after each axis moves.)
      *input_map = last.get(plan.key, input, {p.n, p.c, p.d, p.h, p.w, p.pad_d, p.pad_h, p.pad_w, p.od, p.oh, p.ow},
                            [&] {
        return encode_input_im2col(type, input, p, static_cast<unsigned>(c.chunk), static_cast<unsigned>(c.bm),
                                   swizzle);
      });
    }
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    const HalfSm90Config c = kTable.apply(staged({128, 128, 3}, prob), forced);
    if (!fits(prob, limits, c)) {
      refuse_config(forced, "BM of 64 or 128, BN of 64, 96, 128, 192 or 256 (at most 128 for float32 outputs of "
                            "16-bit reductions past 16 chunks), 3 to 8 stages, the ring within the block's shared memory, "
                            "a chunk of 64 or 32 channels for bf16 / fp16 (32 only with mmajor 0), 32 for float32, "
                            "im2col 0 or 1, and 1 only with zero padding, strides up to 8 and padding within 16 "
                            "of the extents, mmajor 0 or 1, and 1 only with im2col 0 on 16-bit NCDHW layers of "
                            "KD x 1 x 1 windows, unit strides along H and W (a stride along D over planes of a multiple "
                            "of 64 positions) and zero padding along D only; pn 0, or 128 or 256 with BN 64, BM 128 or 256 a "
                            "multiple of pn, bf16 / fp16 and mmajor 0 (pn 128 at most for those float32 outputs)");
    }
    return plan(prob, limits, c);
  }

 private:
  // Where it is valid, whatever C: for K > 128, 128 x 256 or 128 x 192 with 4 stages (one block
  // an SM), the width whose waves of kWaveBlocks blocks multiply the fewest columns (128 too on
  // layers whose 128-column blocks fit one wave); else BN = 128
  // for K > 96, 96 for K > 64, else 64, with BM = 128 and 3 stages (two blocks an SM). On the H200
  // (docs/kernels/igemm_sm90_half.md), bf16 NDHWC: HunyuanVideo's C512 layer 128 x 256 x 4 1.33 ms,
  // x 3 1.43, 128 x 128 x 3 1.58; Wan's K = 384 layer at 120 x 208 128 x 192 x 4 0.258, 128 x 256
  // x 4 0.435; K = 192 0.278 against 0.449; video_vae_512 (80 blocks at 256) 0.150 against 0.176;
  // Wan's K = 96 layer 128 x 96 x 3 0.566, 128 x 128 x 3 0.837; at K = 128 (LTX) 128 x 256 loses,
  // 0.80 against 0.37. 64-row tiles only where 128 would make fewer than 128 blocks.
  std::optional<Plan> choose_tile(const Problem& prob, const DeviceLimits& limits) const {
    if (serves_types(prob) || can_implement(prob, limits)) return std::nullopt;
    const long long k = prob.k_per_group;
    // Pointwise NCDHW layers (M-major boxes) keep 128 x 128 tiles, two blocks an SM, whatever K:
    // their reductions of a few chunks leave a lone wide block idle through its copy-out.
    if (k > 128 && !(mmajor_fits(prob) && prob.taps() == 1)) {
      // The width whose waves of one-a-SM blocks sum the fewest columns.
      auto columns = [&](int bn) { return ceil_div(blocks(prob, staged({128, bn, 4}, prob)), kWaveBlocks) * bn; };
      int wide_bn = columns(192) < columns(256) ? 192 : 256;
      // Layers whose 128-column blocks fill at most one wave take those where the wide tile
      // multiplies more columns (K = 256 at 98 blocks: 128 x 192 tiles leave a third of their
      // second column block empty, and every block is alone on its SM either way).
      if (blocks(prob, staged({128, 128, 4}, prob)) <= kWaveBlocks && columns(128) < columns(wide_bn)) {
        wide_bn = 128;
      }
      if (const HalfSm90Config wide = staged({128, wide_bn, 4}, prob); fits(prob, limits, wide)) {
        return plan(prob, limits, wide);
      }
    }
    const int bn = k > 96 ? 128 : k > 64 ? 96 : 64;
    if (bn == 64) {
      if (auto swapped = channels_as_m(prob, limits)) return swapped;
    }
    const HalfSm90Config tiles[] = {staged({128, bn, 3}, prob), staged({64, bn, 3}, prob), staged({64, 64, 3}, prob)};
    std::optional<HalfSm90Config> best;
    for (const HalfSm90Config& c : tiles) {
      if (c.bn > bn || !fits(prob, limits, c)) continue;
      if (!best) best = c;
      if (blocks(prob, c) >= 128) {
        best = c;
        break;
      }
    }
    if (!best) return std::nullopt;
    return plan(prob, limits, *best);
  }

  // Output channels as the products' M (pn 128, 256 positions a block, two warpgroups): 16-bit
  // layers of one group and at most 64 output channels, but for 64 input channels a group, in at
  // least 128 blocks; 4 stages of chunks of 32 (two blocks an SM), 3 of 64 (one). H100, against
  // 128 x 64 tiles (`conv3djit run --config`, medians of 30; docs/kernels/igemm_sm90_half.md):
  // the unet3d encoder (32 -> 64, 3^3, 2 x 64^3) NDHWC 0.2806 -> 0.2121 ms, NCDHW 0.2639
  // (igemm_sm90's gather) -> 0.2272; 48, 96, 128 and 256 channels 1.02-1.22x. At 64 channels it
  // lost (dilated 0.0867 -> 0.0908, 3 x 1 x 7 0.0725 -> 0.0770, 64 -> 48 0.0751 -> 0.0782), for
  // reasons not known (the 128 x 64 tiles run three blocks an SM there as at 48 channels, where
  // they lose). Wider layers split into 64-column blocks lost too (K = 128, 230): K > 64 keeps
  // positions as M.
  std::optional<Plan> channels_as_m(const Problem& prob, const DeviceLimits& limits) const {
    if (prob.desc.dtype == DataType::Float32 || prob.desc.groups != 1 || prob.k_per_group > 64) return std::nullopt;
    if (prob.c_per_group == 64) return std::nullopt;
    HalfSm90Config c = staged({256, 64, 3}, prob);
    c.pn = 128;
    c.stages = c.chunk == 32 ? 4 : 3;
    if (!fits(prob, limits, c) || blocks(prob, c) < 128) return std::nullopt;
    return plan(prob, limits, c);
  }

  static long long blocks(const Problem& prob, const HalfSm90Config& c) {
    const long long positions = prob.out.d * prob.out.h * prob.out.w;
    return geo::row_tiles(prob.out.n, positions, c.bm, c.mmajor == 1) * prob.desc.groups *
           ceil_div(prob.k_per_group, c.bn);
  }

  Plan plan(const Problem& prob, const DeviceLimits& limits, const HalfSm90Config& c) const {
    Plan plan = new_plan(prob, *this, kTable, c, geo::threads(c.bm, c.pn),
                         geo::shared_bytes(c.bm, c.bn, c.stages, row_bytes(prob, c)));
    plan.grid = checked_grid(blocks(prob, c), *this);
    const bool ncdhw = prob.desc.layout == Layout::NCDHW;
    if (ncdhw && c.mmajor == 0) {
      plan.input_copy = channels_last_plan(plan.params, prob.desc.dtype, ChannelsLastTensor::Input, limits);
    }
    // B's reduction runs (kd, kh, kw, c): an NCDHW weight of several taps is rewritten in that order.
    if (ncdhw && (c.mmajor == 0 || prob.taps() > 1)) {
      plan.prep = channels_last_plan(plan.params, prob.desc.dtype, ChannelsLastTensor::Weight, limits);
    }
    if ((c.im2col == 1 && !ncdhw) || c.mmajor == 1) {
      // A map of the caller's input needs it 16-byte aligned: the twin stages A by the threads,
      // from the channels-last copy for NCDHW (whose own im2col map reads the aligned copy).
      HalfSm90Config copies = c;
      copies.mmajor = 0;
      copies.im2col = ncdhw && im2col_fits(prob, copies.chunk) ? 1 : 0;
      plan.unaligned = std::make_shared<const Plan>(this->plan(prob, limits, copies));
    }
    return plan;
  }

  const KernelDef def_{"igemm_sm90_half", "igemm_sm90_half/igemm_sm90_half.cu", kUsesConvolution, true,
                      kTable.infos(), &blocks_an_sm};
};

}  // namespace

const Family& igemm_sm90_half_family() {
  static const HalfSm90Family family;
  return family;
}

}  // namespace conv3djit::detail
