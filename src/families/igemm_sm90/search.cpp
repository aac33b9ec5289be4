#include "families/igemm_sm90/search.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "families/pitch_rows/pitch_rows.hpp"
#include "plan/family.hpp"

namespace conv3djit::detail {

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

bool sm90_too_narrow(const Problem& prob) {
  // Most of each 32-column MMA would be padding: NCDHW layers go to direct_tiled (NDHWC ones have
  // no other kernel than direct's FFMA, and keep the wgmma). A single TF32 product still outruns
  // FFMA at 8 columns of 32: slowfast_fast_stem_tf32 (C = 3, K = 8, 5 x 7 x 7) 0.86 ms against
  // direct_tiled's 1.74 (H200, `conv3djit tune`); with 3xTF32 only 1.63 against 1.74, not taken.
  const bool tf32 = prob.desc.dtype == DataType::Float32 && prob.desc.precision == Precision::Tf32;
  return prob.out.k < (tf32 ? 8 : 16) && prob.desc.layout == Layout::NCDHW;
}

bool sm90_split(const Problem& prob) {
  return prob.desc.dtype == DataType::Float32 && prob.desc.precision == Precision::Fp32;
}

bool sm90_raw(const Problem& prob, int cc, bool tma) {
  const Conv3dDesc& d = prob.desc;
  const int kvol = static_cast<int>(d.kernel.d * d.kernel.h * d.kernel.w), cg = static_cast<int>(prob.c_per_group);
  return tma && sm90_raw_weights(sm90_split(prob) ? 1 : 0, d.dtype != DataType::Float32 ? 1 : 0, (cg + cc - 1) / cc, 1,
                                 cc * kvol, cg * kvol, d.layout == Layout::NDHWC ? 1 : 0, kvol);
}

// With TMA staging (`tma`) a chunked tf32 kernel may read its weights raw (sm90_raw).
Sm90Geometry sm90_geom(const Problem& prob, int th, int tw, int bn, int cc, int cp, int row, int pl,
                       bool across = false, bool tma = false) {
  const Conv3dDesc& d = prob.desc;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  const bool raw = sm90_raw(prob, cc, tma);
  return sm90_geometry(i(prob.c_per_group), i(d.kernel.d), i(d.kernel.h), i(d.kernel.w), i(d.stride.h),
                       i(d.stride.w), i(d.dilation.h), i(d.dilation.w), th, tw, bn, cc, cp,
                       sm90_split(prob) ? 1 : 0, row, pl,
                       prob.desc.layout == Layout::NDHWC ? 0 : 1, across ? 1 : 0, raw ? 1 : 0);
}

// Tiles of one (n, od) output plane: TH x TW blocks, or runs of TH x TW positions (row tiles).
long long sm90_plane_tiles(const Problem& prob, int th, int tw, int row) {
  return row > 0 ? ceil_div(prob.out.h * prob.out.w, th * tw) : ceil_div(prob.out.h, th) * ceil_div(prob.out.w, tw);
}

// Tiles of the whole output: (n, group of PL output planes) x a plane's tiles.
long long sm90_tiles(const Problem& prob, int th, int tw, int row, int pl, bool across) {
  if (across) return sm90_across_tiles(prob.out.n, prob.out.h, th);
  return prob.out.n * ceil_div(prob.out.d, pl) * sm90_plane_tiles(prob, th, tw, row);
}

// The fraction of the tiles' positions that are outputs.
double sm90_area(const Problem& prob, int th, int tw, int row, bool across = false) {
  if (across) {
    return double(prob.out.n * prob.out.h * prob.out.w) / double(sm90_tiles(prob, th, tw, 0, 1, true) * th * tw);
  }
  return double(prob.out.h * prob.out.w) / double(sm90_plane_tiles(prob, th, tw, row) * th * tw);
}

namespace {
// A 1 x 1 x 1 kernel with unit strides and no padding: every position reads its own input.
bool sm90_pointwise(const Problem& prob) {
  const Conv3dDesc& d = prob.desc;
  const Dims3& lo = prob.pad.before;
  const Dims3& hi = prob.pad.after;
  return d.kernel.d * d.kernel.h * d.kernel.w == 1 && d.stride.d * d.stride.h * d.stride.w == 1 &&
         lo.d + lo.h + lo.w + hi.d + hi.h + hi.w == 0;
}
}  // namespace

bool sm90_across_fits(const Problem& prob) {
  return prob.desc.layout == Layout::NCDHW && prob.desc.groups == 1 && sm90_pointwise(prob) && prob.out.d == 1 &&
         prob.out.w == 8 && prob.out.n * prob.out.h < (1LL << 31);
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
// a forced STAGING 0 takes). PL > 1 output planes a tile: one TF32 product (the tf32 class, half
// types), 64 columns, the whole reduction in one chunk, unit stride and dilation along D, and KD >=
// PL (up to 3).
std::optional<Sm90Choice> sm90_candidate(const Problem& prob, const DeviceLimits& limits, int th, int tw, int bn,
                                         int cc, int staging, bool rows, int pl, bool across) {
  const Conv3dDesc& d = prob.desc;
  if (d.groups != 1 || limits.cc_major != 9 || limits.cc_minor != 0) return std::nullopt;
  // Across images: TW = OW = 8, whole slices a chunk (no padding slot: the all-zero channel a
  // padding slot reads has no place in rows of channels), TMA boxes only.
  if (across && (!sm90_across_fits(prob) || tw != 8 || rows || pl != 1 || cc % 8 != 0 || staging == 0)) {
    return std::nullopt;
  }
  if ((bn != 32 && bn != 64 && bn != 128 && bn != 256) || tw < 8 || tw % 8 != 0 || th < 1 || th * tw % 64 != 0 ||
      th * tw > 256 || cc < 1 || cc > prob.c_per_group || pl < 1) {
    return std::nullopt;
  }
  // (Several planes hold their accumulators in the kernel's three named sets of 64 columns. With
  // a padding mode other than zeros, its index maps made ptxas serialise the wgmmas, C7513. NDHWC
  // outputs leave from registers, and their residual reads beside both sets spilled: the tf32
  // reference with a residual, 8 bytes at 128 registers.)
  const bool ndhwc_residual = d.layout != Layout::NCDHW && d.epilogue.residual;
  if (pl > 1 && (sm90_split(prob) || d.padding_mode != PaddingMode::Zeros || cc != prob.c_per_group || d.stride.d != 1 || d.dilation.d != 1 ||
                 d.kernel.d < pl || bn != 64 || pl > 3 || ndhwc_residual)) {
    return std::nullopt;
  }
  const int row = rows ? static_cast<int>(prob.out.w) : 0;
  // The kernel counts items (tile, channel block), extents and one image's offsets in 32 bits.
  const long long n_tiles = sm90_tiles(prob, th, tw, row, pl, across);
  const long long limit = (1LL << 31) - 1;
  // (NDHWC: pitch_rows' transpose counts an image's input positions in 32 bits too.)
  if (n_tiles * ceil_div(prob.out.k, bn) > limit || prob.out.d * prob.out.h * prob.out.w > limit || d.c * d.d > limit ||
      prob.out.k > limit || (d.layout != Layout::NCDHW && d.d * d.h * d.w > limit)) {
    return std::nullopt;
  }
  // Bound the tile before the pitch search: input tiles beyond the shared memory cannot fit.
  const Sm90Geometry rough = sm90_geom(prob, th, tw, bn, cc, 0, row, pl);
  const int split = sm90_split(prob) ? 1 : 0;
  if (sm90_registers(bn, split, static_cast<int>(prob.c_per_group * d.kernel.d * d.kernel.h * d.kernel.w), pl) >
          std::min(255, 65536 / rough.threads / 8 * 8)) {
    return std::nullopt;
  }
  const long long tile_floats = cc * rough.in_d * rough.in_h * rough.in_w;
  if (4 * ((rough.chunks > 1 ? 2 : 1) * rough.weight_floats + 2 * tile_floats) > limits.max_smem_per_block_optin) {
    return std::nullopt;
  }
  if (across) {
    // Its box is stored densely, a row's channels 8 floats apart (conflict-free: sm90_across_tiles).
    const int rp = cc * tw, pp = th * rp, cp = tw;
    const Sm90Geometry g = sm90_geom(prob, th, tw, bn, cc, cp, 0, 1, true, true);
    if (g.shared_bytes > limits.max_smem_per_block_optin || th > 256 || cc > 256) return std::nullopt;
    const Sm90Staging box{1, rp, pp, cp, g, sm90_gather_wavefronts(prob, cc, rp, pp, cp, 1)};
    Sm90Choice choice{th, tw, bn, cc, 0, 1, box, box};
    choice.across = 1;
    return choice;
  }
  const Sm90Pitches pitches = sm90_pitches(prob, cc, rough.in_h, rough.in_w, rough.in_d, pl);
  const Sm90Geometry g = sm90_geom(prob, th, tw, bn, cc, pitches.cp, row, pl);
  if (g.shared_bytes > limits.max_smem_per_block_optin) return std::nullopt;
  Sm90Choice choice{th, tw, bn, cc, row, pl,
                    Sm90Staging{0, pitches.rp, pitches.pp, pitches.cp, g, pitches.wavefronts}, std::nullopt};
  const int narrowest = sm90_tma_row(rough.in_w, sm90_tma_shift(static_cast<int>(prob.pad.before.w)));
  // A box fills what lies outside the input with zeros, which the kernel overwrites in other
  // padding modes (igemm_sm90.cu). Those take boxes only where the input needs no pitched copy for
  // them (W % 4 == 0, or half and NDHWC inputs, copied anyway): the mode's padding then costs no
  // pass over the input. And by default not in the fp32 class (not profiled): H200, a
  // reflect-padded 64-channel 16 x 64^2 layer 0.232 -> 0.280 ms by boxes, although a
  // replicate-padded 128-channel 9 x 64^2 one gained (0.693 -> 0.533); in the tf32 class boxes ran
  // 1.07-1.78x faster on all five layers tried (bench/padding_modes.jsonl, docs/kernels/igemm_sm90.md).
  const bool unpitched = pitch_rows_every_call(d.dtype, d.layout) || d.w % 4 == 0;
  const bool boxes_pad = d.padding_mode == PaddingMode::Zeros || (unpitched && (staging == 1 || !sm90_split(prob)));
  if (staging != 0 && boxes_pad && sm90_tma_fits(prob, rough.in_h, narrowest, cc, rough.in_d)) {
    // A box is stored densely, so its row (a multiple of 4 floats) sets the plane and channel
    // pitches too: of the rows up to 28 floats wider than the narrowest that fit, the narrowest
    // with the fewest gather wavefronts. (A pointwise tile of 8 rows puts its channels 8 rows
    // apart, a multiple of 32 floats: one bank for all four k of a load at any row.)
    for (int box_row = narrowest; box_row <= std::min(256, narrowest + 28); box_row += 4) {
      const int plane = rough.in_h * box_row, channel = rough.in_d * plane;
      const Sm90Geometry boxed = sm90_geom(prob, th, tw, bn, cc, channel, row, pl, false, true);
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

// The busy fraction of the SMs over a layer's waves of one block an SM (kWaveBlocks): a last wave that leaves SMs
// idle costs as much as a full one. H200, tf32, N = 1, C = K = 256, 8 x 28 x 28, 3 x 3 x 3 + GELU:
// 6 x 32 tiles of 128 columns (80 blocks) 0.142 ms, 4 x 32 (112 blocks) 0.101, 8 x 16 (128)
// 0.112; video_vae_512_tf32 in 6 x 32 tiles (120 blocks) 0.278 ms, in 4 x 32 (160 blocks: two
// waves) 0.363. Only up to two waves: past them the idle tail is a smaller share, and it would
// tip choices the tile model leaves close but the GPU does not (the fp32 class's row tiles on
// dilated, asymmetric_kernel and odd_extents, 20-25 % faster than the tiles it would take). Not
// for pointwise layers, whose tiles were measured as they are (below).
namespace {
double sm90_wave_fill(long long blocks) {
  const double waves = double(blocks) / double(kWaveBlocks);
  return waves <= 2 ? waves / std::ceil(waves) : 1.0;
}

// Tiles across images exist to even out the items (tile, column block) a block walks: they are
// scored by the busy fraction of the rounds of items the resident blocks take (pointwise_512 in
// 16 x 8 tiles of 256 columns: 392 items on 132 blocks, 3 rounds, 0.99; in 32 x 8 tiles of 128:
// 400, 4 rounds, 0.76). A chunked kernel's blocks walk every column block's tiles; with resident
// weights each keeps one column block (igemm_sm90.cu). A layer of less than a round scores its
// idle SMs too, so that small layers keep the plans they had (for many, igemm_sm80's more and
// smaller blocks) where fuller tiles would mean fewer blocks. Only the tuner's candidates and
// forced configurations are scored so (tiles within images measured faster: choose_sm90).
double sm90_round_fill(long long tiles, long long k_blocks, const Sm90Geometry& g) {
  const long long resident = kWaveBlocks * g.min_blocks;
  const long long blocks = g.chunks > 1 ? resident : std::max(1LL, resident / k_blocks) * k_blocks;
  const long long items = tiles * k_blocks;
  return double(items) / double(ceil_div(items, blocks) * blocks);
}

}  // namespace

// Columns: K rounded up to 32, 64 or 128 (several channel blocks beyond). Channels per chunk: the
// whole group when its weights fit (converted once per block), else the chunk size that wastes
// the fewest reduction slots (ties: the larger, fewer items). Tile: the least padded of TW in
// {64, 32, 16, 8} x TH rows for 4, 3 or 2 warpgroups (earlier ones win ties: wide tiles load
// fewer halo columns; more warpgroups hide each other's gathers: on the reference problem 4 / 3 /
// 2 warpgroups took 1.86 / 2.08 / 2.42 ms with 3xTF32, 1.13 / 1.33 / 1.58 with TF32; one
// warpgroup took 2x as long again). Tf32 layers with K > 128 may also take 256 columns
// (2 warpgroups, for the registers): a product then needs half the input reads and gather
// loads (H200, TF32: pointwise_256 0.0447 ms against 0.0476 with 3 warpgroups of 128 columns;
// pointwise_512 0.0813 against 0.0922 with 2 of 128: as fast as 0.91 of 4 warpgroups of 128).
// With a kernel of several taps each gathered slice feeds twice the products, and 256 columns
// do as well as 4 warpgroups of 128: c3d_conv3b_tf32 in 4 x 32 tiles (448 blocks, 3.4 waves)
// 0.596 ms against 0.640 in 6 x 32 of 128 (640 blocks, 4.8 waves). A pointwise gather's loads are conflict-free or 4-way (all k
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
std::optional<Sm90Choice> choose_sm90(const Problem& prob, const DeviceLimits& limits, const Sm90Filter& filter) {
  // TF32 chunks streamed through 3 or more copy stages keep the tensor cores running from one
  // item into the next (igemm_sm90.cu: no drain between a tile's chunks), which smaller chunks
  // buy where the items are long, 128 or 256 columns (H200): c3d_conv3b_tf32 in 2-channel chunks
  // (4 stages) 0.670 ms against 0.726 in 4-channel ones (2 stages), video_vae_128_tf32 0.410
  // against 0.444, pointwise_512_tf32 in 32-channel chunks 0.078 against 0.082 in 64. With 64
  // columns the items' fixed costs win instead: unet3d_encoder_tf32 and _decoder, dilated_tf32
  // and odd_extents_tf32 in half-size chunks took 4-7 % longer.
  const double pipelined = sm90_split(prob) ? 1.0 : 1.06;
  // A tile the planner can only stage with cp.async (its TMA box does not fit) against one staged by
  // TMA (H200, the reference problem's row tiles: 0.784 against 0.674 ms in the tf32 class, 1.335
  // against 1.208 with 3xTF32; asymmetric_kernel in 8-channel chunks by cp.async 0.292 against 0.211
  // in 6-channel ones by TMA). Where W % 4 != 0 a box reads a pitched copy of the input, which
  // pays nearly everywhere: of 14 such layers (H200, 2026-12-01, copied by cuMemcpy2DAsync then)
  // 12 ran faster by TMA boxes of the copy than by cp.async, one as fast, one 3 % slower (8 x 3 x
  // 16 x 112 x 110, 3 x 3 x 3, fp32 class); with the pitch_rows kernel: the tf32 reference with
  // W = 66 0.687 -> 0.541 ms, odd_extents 0.135 -> 0.094, tf32 0.088 -> 0.051, a 2 x 32 x 32 x 56
  // x 58 layer 0.375 -> 0.260, and the 3 % loss 0.665 -> 0.667.
  constexpr double kCopiesSpeed = 0.88;
  const long long k = prob.out.k;
  if (!filter.forced && sm90_too_narrow(prob)) return std::nullopt;
  const int cg = static_cast<int>(prob.c_per_group);
  const long long kvol = prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
  std::vector<int> widths = {k <= 32 ? 32 : k <= 64 ? 64 : 128};
  if (!sm90_split(prob) && k > 128) widths.push_back(256);
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
  // channel's outputs leave as one contiguous run. H200, planned both ways (a 3 %
  // bonus for every row tile): c3d_conv3b 2.048 -> 1.965 ms, r2plus1d_spatial 0.354 -> 0.337,
  // r2plus1d_temporal 0.157 -> 0.154, video_vae_512 1.194 -> 1.175; with 64 columns it lost on
  // unet3d_encoder and _decoder (3 %) and won on the fp32 reference problem with W = 66 (4 %),
  // and pointwise layers lost 6-11 %, so it stays with 128 columns and real kernels.
  constexpr double kWideRowsGain = 1.03;
  const Conv3dDesc& desc = prob.desc;
  const long long khw = desc.kernel.h * desc.kernel.w;
  const double planes_eff = double(cg * kvol) / double(desc.kernel.d * ceil_div(cg * khw, 8) * 8) *
                            double(prob.out.d) / double(ceil_div(prob.out.d, 2) * 2) * kPlanesGain;
  // Tiles across images only where asked for (--config, the tuner's candidates): the heuristic
  // leaves them off, measured slower than the tiles within images on the layer they were built
  // for (H100, pointwise_512: tf32 0.0772 -> 0.0838 ms, fp32 0.151 -> 0.159; igemm_sm90.md).
  const bool across_fits = sm90_across_fits(prob) && filter.across.value_or(0) != 0;
  std::optional<Sm90Choice> best;
  double best_eff = 0;
  auto search = [&](const std::vector<int>& widths) {
    for (int cc : chunk_sizes) {
      const long long chunks = ceil_div(cg, cc);
      const double eff_r = double(cg * kvol) / double(chunks * ceil_div(cc * kvol, 8) * 8);
      const bool rows_pay = prob.out.w <= 64 && (cc == cg || sm90_split(prob));
      for (int width : {64, 32, 16, 8, 0}) {  // 0: row tiles
        if (width == 0 && !rows_pay) continue;
        for (int wgs : {4, 3, 2}) {
          for (int bn : widths) {
            // Variants of a tile: one output plane, two (row tiles), or tiles across images (after
            // the same tile within images, so that ties stay there).
            for (auto [pl, across] : {std::pair{1, 0}, std::pair{2, 0}, std::pair{1, 1}}) {
              const bool rows = width == 0;
              if (pl > 1 && !(rows && wgs == 4 && bn == 64)) continue;  // (sm90_candidate checks the rest)
              if (across && !(across_fits && width == 8 && pl == 1)) continue;
              const int tw = rows ? 64 : width, th = 64 * wgs / tw;
              if (!filter.admits(th, tw, bn, cc, rows ? static_cast<int>(prob.out.w) : 0, pl, across)) continue;
              // Useful fraction of the padded work, times the speed of this tile relative to 4
              // warpgroups of 128 columns (the times above).
              const double speed = bn == 256 ? (kvol > 1 ? 1.0 : 0.91) : wgs == 4 ? 1.0 : wgs == 3 ? 0.89 : 0.77;
              const int row = rows ? static_cast<int>(prob.out.w) : 0;
              double eff = (rows && bn >= 128 && kvol > 1 ? kWideRowsGain : 1.0) *
                           sm90_area(prob, th, tw, row, across) *
                           (pl > 1 ? planes_eff : eff_r) * double(k) / double(ceil_div(k, bn) * bn) * speed *
                           (kvol > 1 ? sm90_wave_fill(sm90_tiles(prob, th, tw, row, pl) * ceil_div(k, bn)) : 1.0);
              if (eff * pipelined <= best_eff * 1.01) continue;  // conflicts only lower it
              auto c = sm90_candidate(prob, limits, th, tw, bn, cc, filter.tma.value_or(-1), rows, pl, across);
              if (!c) continue;
              if (kvol == 1) eff /= 1.0 + (c->staging().wavefronts - 1.0) / 16;
              if (!c->boxed) eff *= kCopiesSpeed;
              if (bn >= 128 && c->staging().g.chunks > 1 && c->staging().g.stages >= 3) eff *= pipelined;
              if (across) {
                eff *= sm90_round_fill(sm90_tiles(prob, th, tw, 0, 1, true), ceil_div(k, bn), c->staging().g);
              }
              if (eff <= best_eff * 1.01) continue;
              best = c;
              best_eff = eff;
            }
          }
        }
      }
      if (best && cc == cg) break;  // resident weights
    }
  };
  search(widths);
  // Where no tile of the natural width is staged by TMA, half-width column blocks may be: each
  // gathers the input again, but by boxes (H200, i3d_r3d_stem_tf32, K = 64, 7^3 stride 2: 64
  // columns by cp.async 1.189 ms, two blocks of 32 by TMA 0.726; `conv3djit tune`). Only a boxed
  // tile of them replaces the choice.
  if (best && !best->boxed && !filter.forced && widths.front() >= 64 && filter.tma.value_or(-1) != 0) {
    const std::optional<Sm90Choice> copies = best;
    const double copies_eff = best_eff;
    best.reset();
    best_eff = 0;
    search({widths.front() / 2});
    if (!best || !best->boxed) {
      best = copies;
      best_eff = copies_eff;
    }
  }
  // NDHWC layers where no tile of the natural width fits (3xTF32's chunk weights of long kernels:
  // 5 x 5 x 5 at 128 columns, 262 KB for a chunk's two buffers) take narrower ones: they have no
  // other tensor-core family (igemm_sm80 serves NCDHW), and ran on direct.
  if (!best && prob.desc.layout == Layout::NDHWC) {
    std::vector<int> narrower;
    for (int w = widths.front() / 2; w >= 32; w /= 2) narrower.push_back(w);
    search(narrower);
  }
  // A pointwise kernel has no halo to share, and below 90 % useful tile area the flat rows of
  // igemm_sm80 win (pointwise_512: 14 x 14 outputs in 16 x 8 tiles, 77 %: 0.58 ms against 0.38;
  // as a 7 x 112 plane in 8 x 16 tiles, 87.5 %: 0.49 against 0.38; pointwise_128 and _256 with
  // 87.5 % of their 4 x 32 tiles won, 0.33 against 0.45 and 0.18 against 0.20, and won more once
  // planned as flat planes that fill the tiles: 0.29 and 0.15).
  if (best && kvol == 1 && !filter.forced && prob.desc.layout == Layout::NCDHW) {  // (igemm_sm80: NCDHW only)
    if (sm90_area(prob, best->th, best->tw, best->row, best->across) < 0.85) return std::nullopt;
  }
  if (best) best->score = best_eff;
  return best;
}

// A pointwise layer with unit strides and no padding treats every position alike, so any
// (D, H, W) with the same product addresses the same memory: it is also planned as one plane of
// W' = 256, 248, ..., 8 columns (W' dividing D x H x W), and the shape whose tiles waste the least
// wins (pointwise_256's 28 x 28 planes fill 4 x 32 tiles to 87.5 %; 98 rows of 64 fill them).
std::optional<Problem> sm90_flat_plane(const Problem& prob, int64_t w) {
  const int64_t positions = prob.out.d * prob.out.h * prob.out.w;
  if (!sm90_pointwise(prob) || positions % w != 0) return std::nullopt;
  Problem flat = prob;
  flat.desc.d = flat.out.d = 1;
  flat.desc.h = flat.out.h = positions / w;
  flat.desc.w = flat.out.w = w;
  return flat;
}

std::optional<std::pair<Problem, Sm90Choice>> choose_sm90_shape(const Problem& prob, const DeviceLimits& limits,
                                                                 const Sm90Filter& filter) {
  std::optional<std::pair<Problem, Sm90Choice>> best;
  if (auto c = choose_sm90(prob, limits, filter)) best.emplace(prob, *c);
  for (int64_t w = 256; w >= 8; w -= 8) {  // the widest of equal tiles: longer store rows
    const std::optional<Problem> flat = sm90_flat_plane(prob, w);
    if (!flat) continue;
    auto c = choose_sm90(*flat, limits, filter);
    if (c && (!best || c->score > best->second.score * 1.01)) best.emplace(*flat, *c);
  }
  return best;
}

}  // namespace conv3djit::detail
