#pragma once
#include "common/common.cuh"
// igemm_sm90's tile geometry, shared by the kernel and its family's planner.

namespace conv3djit {

/// Registers a thread of igemm_sm90 needs: accumulators (PL sets in the tf32 class; 3xTF32 adds
/// running sums and, past 512 terms of the whole reduction, blocked totals) plus the rest, an
/// upper bound fitted to ptxas -v on sm_90a (2026-11-29): 3xTF32 BN 64: 123 (blocked: 155), BN
/// 128: 168 (blocked: 232); TF32 BN 64: 106-122, BN 128: 138; TF32 PL 2, BN 64: 128 (2026-11-30).
CONV3DJIT_HOST_DEVICE constexpr int sm90_registers(int bn, int split, int kred_total, int pl = 1) {
  return split ? bn + 59 + (kred_total > 512 ? bn / 2 : 0) : pl == 1 ? bn / 2 + 90 : pl * bn / 2 + 64;
}

/// Shared memory an SM of compute capability 9.0 (the only target of igemm_sm90) gives its blocks.
constexpr int kSm90SharedPerSm = 228 * 1024;
/// Most copy stages of igemm_sm90 (items in flight + the one computed).
constexpr int kSm90MaxStages = 4;
/// Output staging of igemm_sm90's tf32 row tiles: each warp owns a box of its 16
/// consecutive positions x PL planes x some channels in shared memory, which it fills and stores
/// with TMA, BN / channels rounds a tile: 4 KB a warp where that fits, else 2 KB (H200, tf32
/// reference: stores from registers 0.547 ms, 2 KB boxes 0.514 (0.533 as two 1 KB boxes in turn),
/// 4 KB boxes with a copy stage less 0.500; docs/kernels/igemm_sm90.md). Not for 3xTF32, whose
/// products take 3x longer: two fp32 kernels that staged ran 0-1.4 % slower (dilated,
/// asymmetric_kernel). Also with cp.async input staging: the tf32 reference's cp.async twin (for
/// inputs not 16-byte aligned) spilled 44 bytes storing from registers, none staged.
constexpr int kSm90StoreWarpFloats[2] = {1024, 512};

/// Which tiles stage their outputs (sm90_geometry's `staged`: 0 for NDHWC outputs, which leave
/// from registers): row tiles, and TH x TW tiles of 256 columns whose warps' 16 positions lie in
/// one output row (TW % 16 == 0). With an epilogue other than the plain one such tiles always use
/// their boxes: the epilogue then runs over the box in a rolled loop, where from registers it was
/// unrolled for every accumulator (a tf32 384 -> 256 GELU kernel: 0.48 s of its 1.0 s compile);
/// with the plain one only where TMA stores the boxes (sm90_stores_staged), else the kernel stores
/// from registers. Narrower TH x TW tiles store from registers: staged, layers of short reductions
/// ran 0.73-0.96x as fast (H200; docs/kernels/igemm_sm90.md), and their register epilogues compile
/// in under 0.7 s.

/// Channels of a staging box of `floats` (a multiple of 8 dividing BN), 0 where none fits.
CONV3DJIT_HOST_DEVICE constexpr int sm90_store_channels(int bn, int pl, int floats) {
  int c = floats / (16 * pl) / 8 * 8;
  while (c > 0 && bn % c != 0) c -= 8;
  return c;
}

/// igemm_sm90: a block of WG warpgroups computes TH x TW outputs of one (n, od) for BN channels;
/// warpgroup q owns positions 64q .. 64q + 63 (row-major in the TH x TW tile). Row tiles (ROW > 0,
/// the output width OW): a tile is instead TH x TW consecutive positions of the OH x ROW plane,
/// and its input covers whole rows, so no column of a tile is wasted when OW is no multiple of 8.
/// The reduction runs CC channels at a time. With PL > 1 output planes a tile (tf32 class, one
/// chunk, unit stride and dilation along D), a tile also spans PL consecutive output planes: its
/// input holds PL + KD - 1 planes, and the reduction is ordered (kd, then c, kh, kw), each kd
/// padded to whole slices, so that the A fragments gathered from one input plane serve every
/// output plane that reads it (plane z is tap kd = z - d of output plane d). Shared memory: the
/// weights of its BN channels for one chunk (PARTS x slices x BN x 8 floats, in wgmma's
/// core-matrix layout; one buffer per stage when there are several chunks, else loaded once), the
/// gather table (4 words per slice of 8 terms, two 16-bit offsets each; PL > 1: one kd's slices, none with a gather pattern),
/// the bias of its channels, one mbarrier and one counter per stage (TMA staging), then, 128-byte aligned, one
/// input tile per stage of [CC][in_d planes of PP][in_h rows of RP] (channel pitch CP), then a zero
/// plane when the padding terms need it; then, for row tiles of NCDHW outputs (`staged`; TH x TW
/// tiles of 256 columns too, above),
/// each warp's output staging box (NDHWC outputs leave from registers: a thread's two channels
/// are adjacent there, and a warp's store fills whole 32-byte sectors).
/// The stages are the items whose copies are in flight
/// while one is computed, plus that one: two, or where a block has the SM to itself, up to four
/// when its reduction streams in chunks (more bytes in flight: such kernels wait on their copies,
/// not on the tensor cores) and three when it holds the whole reduction (H200, 2026-11-30: tf32
/// reference 0.674 -> 0.662 ms, others within 1 %). The pitches come from the planner: chosen
/// against bank conflicts for cp.async staging; with TMA staging the box is stored densely
/// (RP = tma_row(in_w), PP = in_h * RP, CP = in_d * PP).
struct Sm90Geometry {
  int kred, slices, parts, warpgroups, threads;
  int in_d;          // input planes of a tile (sm90_input_planes)
  int plane_slices;  // PL > 1: slices of one kd (the gather table's or pattern's); else all of them
  int chunks, stages, weight_buffers;
  int in_h, in_w;
  int zero_channel;  // 1 when a chunk's last slice has padding terms: they read an all-zero channel
  int zero_floats;   // of it: what the gather reads at term offset 0, at most a plane (PP <= CP / KD)
  int weight_floats, table_ints, tile_floats;
  int bars_at, tiles_at;  // floats from the start: the mbarriers, the input tiles
  // tf32 row tiles: the warps' output staging boxes after the tiles (store_floats in all) and
  // the channels of a box, where they fit without costing a block an SM; else 0 (stores from
  // registers).
  int store_at, store_floats, store_channels;
  int shared_bytes;
  // 2 when two blocks fit an SM by shared memory and by the register estimate: the kernel's
  // launch bounds then hold ptxas to it, and two independent blocks overlap one's epilogue and
  // loads with the other's tensor-core work.
  int min_blocks;
};

/// Input planes of a tile of PL output planes whose KD taps step by the dilation: KD + PL - 1 (PL > 1
/// needs unit dilation along D; with PL = 1 the TMA box steps over the dilated planes).
CONV3DJIT_HOST_DEVICE constexpr int sm90_input_planes(int kd, int pl) { return kd + pl - 1; }

/// A gather pattern of igemm_sm90 (PL > 1): the reduction of one kd, (c, kh, kw), is cut into
/// translates of an inner box of at most 16 terms (one or two groups of 8 slots, the last one
/// padded), so that slot j of slice s reads (the box cell's offset, one register a thread) + (the
/// translate's offset, a compile-time constant of the unrolled slice): no table, no address
/// arithmetic in the gather. Slice s is translate s / groups, group s % groups. Taken only where it
/// needs no more slices than the table's dense packing (the reference: a 3 x 5 x 1 box in 2
/// groups, 7 translates along kw, 14 slices a kd as packed densely); else groups == 0.
struct Sm90Pattern {
  int groups;    // 0: none (the gather table)
  int box[3];    // inner box extents along (c, kh, kw)
  int cells;     // box[0] x box[1] x box[2]
  int slices;    // (terms / cells) x groups
};

CONV3DJIT_HOST_DEVICE constexpr Sm90Pattern sm90_pattern(int cc, int kh, int kw, int pl) {
  Sm90Pattern best{};
  if (pl == 1) return best;
  const int ext[3] = {cc, kh, kw}, terms = cc * kh * kw;
  best.slices = (terms + 7) / 8;  // the dense packing: a pattern must not need more
  for (int b0 = 1; b0 <= ext[0] && b0 <= 16; ++b0) {
    for (int b1 = 1; b1 <= ext[1] && b0 * b1 <= 16; ++b1) {
      for (int b2 = 1; b2 <= ext[2] && b0 * b1 * b2 <= 16; ++b2) {
        if (ext[0] % b0 != 0 || ext[1] % b1 != 0 || ext[2] % b2 != 0) continue;
        const int cells = b0 * b1 * b2, groups = (cells + 7) / 8, slices = terms / cells * groups;
        if (slices < best.slices || (slices == best.slices && (best.groups == 0 || groups < best.groups))) {
          best = Sm90Pattern{groups, {b0, b1, b2}, cells, slices};
        }
      }
    }
  }
  return best;
}

/// Whether igemm_sm90 pairs its A rows: with a gather pattern whose translates step along kw by
/// one output column (box kw extent x DW == SW, several translates a kernel row) and rows of even
/// width (row tiles: ROW even), a thread's two A rows are the adjacent positions p, p + 1 instead
/// of p, p + 8. Translate o at p is then translate o - 1 at p + 1, which the thread gathered for
/// the slice one translate before: a slice loads only its p + 1 half (two loads, not four). Only
/// with TMA boxes: cp.async staging's two-plane row tiles spilled 4-36 bytes at 128 registers
/// paired, and ran as fast unpaired (H200, tf32 reference with W = 63: 0.699 / 0.698 ms, W = 66:
/// 0.688 / 0.684; docs/kernels/igemm_sm90.md).
CONV3DJIT_HOST_DEVICE constexpr bool sm90_paired(int cc, int kh, int kw, int sw, int dw, int row, int pl, int tma) {
  const Sm90Pattern p = sm90_pattern(cc, kh, kw, pl);
  return tma == 1 && p.groups > 0 && p.groups <= 2 && p.box[2] * dw == sw && kw / p.box[2] > 1 && row % 2 == 0;
}

/// Whether paired rows also load their inputs two at a time: with unit stride along W a thread's
/// positions p, p + 1 read adjacent columns, translate o's pair (p + o, p + o + 1) follows translate
/// o - 1's, and in a TMA box (rows of a multiple of 4 floats, a tile's positions starting at an even
/// column) the pairs of every other translate are 8-byte aligned: those of the translates o whose
/// parity is the box shift's (sm90_tma_shift: the parity of pad_w, a field of the kernel's key).
CONV3DJIT_HOST_DEVICE constexpr bool sm90_pair_loads(int cc, int kh, int kw, int sw, int dw, int row, int pl,
                                                     int tma) {
  return sw == 1 && sm90_paired(cc, kh, kw, sw, dw, row, pl, tma);
}

/// A reduction term of a chunk: channel and kernel tap (c = -1: a padding slot).
struct Sm90Term {
  int c, kd, kh, kw;
};

/// Its offset in floats in igemm_sm90's input tile.
CONV3DJIT_HOST_DEVICE constexpr int sm90_term_at(const Sm90Term& x, int dh, int dw, int rp, int pp, int cp) {
  return x.c * cp + x.kd * pp + x.kh * dh * rp + x.kw * dw;
}

/// (c, 0, kh, kw) of box cell `cell` (row-major in the box), or of translate `o` (row-major over
/// the translates, in box units) when `outer`.
CONV3DJIT_HOST_DEVICE constexpr Sm90Term sm90_pattern_cell(const Sm90Pattern& p, int i, int kh, int kw, bool outer) {
  const int n1 = outer ? kh / p.box[1] : p.box[1], n2 = outer ? kw / p.box[2] : p.box[2];
  const Sm90Term at{i / (n1 * n2), 0, i / n2 % n1, i % n2};
  return outer ? Sm90Term{at.c * p.box[0], 0, at.kh * p.box[1], at.kw * p.box[2]} : at;
}

/// The term of slot q of one kd's slices under a pattern (kd 0).
CONV3DJIT_HOST_DEVICE constexpr Sm90Term sm90_pattern_slot(const Sm90Pattern& p, int q, int kh, int kw) {
  const int s = q / 8, cell = s % p.groups * 8 + q % 8;
  if (cell >= p.cells) return Sm90Term{-1, 0, 0, 0};
  const Sm90Term o = sm90_pattern_cell(p, s / p.groups, kh, kw, true), i = sm90_pattern_cell(p, cell, kh, kw, false);
  return Sm90Term{o.c + i.c, 0, o.kh + i.kh, o.kw + i.kw};
}

/// The term reduction slot r of a chunk holds: the order shared by the weights in shared memory
/// and the gather. PL = 1: the terms in order (c, kd, kh, kw), packed densely; PL > 1: slice s
/// holds kd = s / plane_slices and that kd's (c, kh, kw), in the gather pattern's order where
/// there is one, else packed densely.
CONV3DJIT_HOST_DEVICE constexpr Sm90Term sm90_slot_term(int r, int cc, int kd, int kh, int kw, int pl) {
  const int khw = kh * kw;
  if (pl == 1) {
    const int kvol = kd * khw, tap = r % kvol;
    return r < cc * kvol ? Sm90Term{r / kvol, tap / khw, tap / kw % kh, tap % kw} : Sm90Term{-1, 0, 0, 0};
  }
  const Sm90Pattern pat = sm90_pattern(cc, kh, kw, pl);
  const int plane_slots = (pat.groups > 0 ? pat.slices : (cc * khw + 7) / 8) * 8, z = r / plane_slots,
            q = r % plane_slots;
  if (pat.groups > 0) {
    const Sm90Term x = sm90_pattern_slot(pat, q, kh, kw);
    return Sm90Term{x.c, z, x.kh, x.kw};
  }
  return q < cc * khw ? Sm90Term{q / khw, z, q / kw % kh, q % kw} : Sm90Term{-1, 0, 0, 0};
}

/// Where the term of slot r (of a chunk of cc channels) starts in igemm_sm90's input tile, in
/// floats: the kernel's gather table, and the planner's bank-conflict search over the same
/// offsets. Padding slots read the all-zero plane after channel cc - 1; with several output
/// planes a tile the table holds one kd's slots (the gather adds the plane), and its padding
/// slots read offset 0 (the gather zeroes them).
CONV3DJIT_HOST_DEVICE constexpr int sm90_term_offset(int r, int cc, int kd, int kh, int kw, int dh, int dw, int rp,
                                                     int pp, int cp, int pl = 1) {
  const Sm90Term x = sm90_slot_term(r, cc, kd, kh, kw, pl);
  return x.c >= 0 ? sm90_term_at(x, dh, dw, rp, pp, cp) : pl > 1 ? 0 : cc * cp;
}

/// Which weight of a chunk (index c * KVOL + kd * KH * KW + kh * KW + kw) slot r holds, or -1
/// for a padding slot (PL = 1: r itself, the terms being in order).
CONV3DJIT_HOST_DEVICE constexpr int sm90_slot_weight(int r, int cc, int kd, int kh, int kw, int pl) {
  if (pl == 1) return r < cc * kd * kh * kw ? r : -1;
  const Sm90Term x = sm90_slot_term(r, cc, kd, kh, kw, pl);
  return x.c < 0 ? -1 : ((x.c * kd + x.kd) * kh + x.kh) * kw + x.kw;
}

/// Columns a TMA box starts before a tile's first input column: boxes start at multiples of 4
/// floats, and tile origins are pad_w less a multiple of 4 (TW is a multiple of 8).
CONV3DJIT_HOST_DEVICE constexpr int sm90_tma_shift(int pad_w) { return -pad_w & 3; }

/// Whether igemm_sm90 with output staging stores through the output's tensor map: the map needs
/// 16-byte aligned planes (OH x OW elements of out_bytes a multiple of 16 bytes) and output
/// address. The host encodes the map under the same test; elsewhere each warp copies its staging
/// box out with plain stores. (Half outputs leave their float box converted in place.)
CONV3DJIT_HOST_DEVICE constexpr bool sm90_stores_boxed(long long plane, unsigned long long out_address,
                                                       int out_bytes) {
  return plane * out_bytes % 16 == 0 && out_address % 16 == 0;
}

/// Whether staged igemm_sm90 tiles store their boxes by TMA (else the warps copy them out): the
/// output aligned for it (sm90_stores_boxed), and each warp's 16 positions a run of the plane (row
/// tiles) or of one output row (TH x TW tiles, TW % 16 == 0, where OW % TW == 0: a box of
/// positions past the row's end, in a tile reaching past it, would write over the next row's).
CONV3DJIT_HOST_DEVICE constexpr bool sm90_stores_staged(int row, int tw, long long ow, long long plane,
                                                        unsigned long long out_address, int out_bytes) {
  return sm90_stores_boxed(plane, out_address, out_bytes) && (row > 0 || ow % tw == 0);
}

/// The narrowest TMA box row: the tile's in_w columns after the shift, rounded up to 4 floats. The
/// planner may take a wider one (a multiple of 4) to spread the gather over the banks.
CONV3DJIT_HOST_DEVICE constexpr int sm90_tma_row(int in_w, int shift) { return (in_w + shift + 3) / 4 * 4; }

/// Output rows that `positions` consecutive positions of rows `row` wide may touch (starting at a
/// row's last column).
CONV3DJIT_HOST_DEVICE constexpr int sm90_row_span(int positions, int row) { return (row + positions - 2) / row + 1; }

/// Tiles across images (ACROSS = 1): a pointwise layer with unit strides and no padding, planned
/// as planes of OH rows of OW = TW = 8 positions, is tiled over the N x OH rows of all its images
/// at once, TH rows a tile, so that a tile may end in one image and go on in the next: no tile is
/// short but the very last (pointwise_512: 784 positions an image, 6.1 tiles of 128). Its input
/// tile is stored row by row, [TH rows][CC channels][8 columns] (RP = CC x 8, CP = 8: a gather
/// load's 8 positions x 4 channels are 32 consecutive words), which lets a tile that crosses
/// images be loaded as one box a row.
CONV3DJIT_HOST_DEVICE constexpr long long sm90_across_tiles(long long n, long long oh, int th) {
  return (n * oh + th - 1) / th;
}

/// Whether igemm_sm90 reads its weight chunks straight from the weight tensor, one TMA box of BN
/// rows x 32 terms (128 bytes) a step of the chunk, rounded to TF32 as they land and stored
/// 128-byte swizzled as wgmma's K-major B (wgmma::descriptor_sw128), instead of copying chunks
/// that igemm_sm90_weights prepared on every call: one TF32 product (the tf32 class's float32
/// weights: a half weight's float32 form, or 3xTF32's big and small parts, are made by that step),
/// streamed chunks staged by TMA, each chunk whole rows of 32 terms (a box never reaches into the
/// next chunk's terms: `kred` a multiple of 32, and the tensor's rows of `cg_kvol` terms on 16
/// bytes), in the weight's own order (NCDHW; NDHWC's weights are (kd, kh, kw, c): one tap only).
CONV3DJIT_HOST_DEVICE constexpr bool sm90_raw_weights(int split, int half, int chunks, int tma, int kred, int cg_kvol,
                                                      int ndhwc, int kvol) {
  return !split && !half && chunks > 1 && tma == 1 && kred % 32 == 0 && cg_kvol % 4 == 0 && (!ndhwc || kvol == 1);
}

CONV3DJIT_HOST_DEVICE constexpr Sm90Geometry sm90_geometry(int cg, int kd, int kh, int kw, int sh, int sw, int dh,
                                                           int dw, int th, int tw, int bn, int cc, int cp,
                                                           int split, int row, int pl = 1,
                                                           int staged = 1, int across = 0,
                                                           int raw = 0) {
  Sm90Geometry g{};
  g.kred = cc * kd * kh * kw;  // one chunk's terms
  g.in_d = sm90_input_planes(kd, pl);
  const Sm90Pattern pattern = sm90_pattern(cc, kh, kw, pl);
  g.plane_slices = pattern.groups > 0 ? pattern.slices : pl > 1 ? (cc * kh * kw + 7) / 8 : (g.kred + 7) / 8;
  g.slices = pl > 1 ? kd * g.plane_slices : g.plane_slices;
  g.parts = split ? 2 : 1;
  g.warpgroups = th * tw / 64;
  g.threads = 128 * g.warpgroups;
  g.chunks = (cg + cc - 1) / cc;
  g.stages = 2;
  g.weight_buffers = g.chunks > 1 ? g.stages : 1;
  const int out_rows = row > 0 ? sm90_row_span(th * tw, row) : th, out_cols = row > 0 ? row : tw;
  g.in_h = (out_rows - 1) * sh + (kh - 1) * dh + 1;
  g.in_w = (out_cols - 1) * sw + (kw - 1) * dw + 1;
  g.zero_channel = pl == 1 && g.kred % 8 != 0 ? 1 : 0;
  g.weight_floats = g.parts * g.slices * 8 * bn;
  g.table_ints = pattern.groups > 0 ? 0 : g.plane_slices * 4;
  g.zero_floats = g.zero_channel ? cp / kd : 0;
  // 128-byte aligned buffers (TMA); tiles across images hold TH rows of CC channels.
  g.tile_floats = ((across ? th : 1) * cc * cp + g.zero_floats + 31) / 32 * 32;
  // (Weights read raw, sm90_raw_weights: the kernel aligns its shared memory to the swizzle's
  // 1024-byte row groups, from up to 1024 bytes in.)
  auto lay_out = [&] {
    g.bars_at = g.weight_buffers * g.weight_floats + g.table_ints + bn;  // even: 8-byte aligned
    g.tiles_at = (g.bars_at + 3 * kSm90MaxStages + 31) / 32 * 32;  // an mbarrier and a count a stage
    g.store_at = g.tiles_at + g.stages * g.tile_floats;
    g.shared_bytes = 4 * (g.store_at + g.store_floats) + (raw ? 1024 : 0);
  };
  lay_out();
  const int regs = (sm90_registers(bn, split, cg * kd * kh * kw, pl) + 7) / 8 * 8;
  g.min_blocks = 2 * regs * g.threads <= 65536 && 2 * (g.shared_bytes + 1024) <= kSm90SharedPerSm ? 2 : 1;
  // Output staging where it fits without costing a block an SM: the largest box.
  auto stage_outputs = [&] {
    const bool stages = staged != 0 && (row > 0 || (tw % 16 == 0 && bn >= 256));
    for (int i = 0; i < 2 && stages && split == 0 && g.store_channels == 0; ++i) {
      const int channels = sm90_store_channels(bn, pl, kSm90StoreWarpFloats[i]);
      if (channels == 0) continue;
      g.store_floats = g.threads / 32 * 16 * pl * channels;
      lay_out();
      if (g.min_blocks * (g.shared_bytes + 1024) > kSm90SharedPerSm) {
        g.store_floats = 0;
        lay_out();
      } else {
        g.store_channels = channels;
      }
    }
  };
  // A whole reduction in shared memory takes the staging before a third stage (measured on the
  // tf32 reference, above); streamed chunks keep their stages first (they wait on their copies).
  if (g.chunks == 1) stage_outputs();
  // Alone on its SM: more stages while they fit, each with its own weights when they stream.
  const int most = g.chunks > 1 ? kSm90MaxStages : 3;
  while (g.min_blocks == 1 && g.stages < most) {
    const Sm90Geometry fewer = g;
    ++g.stages;
    if (g.chunks > 1) g.weight_buffers = g.stages;
    lay_out();
    if (g.shared_bytes + 1024 > kSm90SharedPerSm) {
      g = fewer;
      break;
    }
  }
  if (g.chunks > 1) stage_outputs();
  return g;
}

/// Where an igemm_sm90 TMA box holds cells outside the input, which padding modes other than zeros
/// overwrite (igemm_sm90.cu, fill_border). Box cell (c, z, y, x) is input plane id0 + z * dd, row
/// ih0 + y, column iw0 + x; of its columns the gather reads shift .. shift + in_w - 1.
struct Sm90Border {
  int id0, ih0, iw0;   // the box's first input plane, row and column
  int left, right;     // of the columns the gather reads, those outside the input on either side
  int zf, zb, yf, yb;  // planes [0, zf) and [zb, in_d), rows [0, yf) and [yb, in_h) lie outside
};

/// The border of a box at (id0, ih0, iw0) of an input of extents d x h x w.
CONV3DJIT_HOST_DEVICE constexpr Sm90Border sm90_border(int id0, int ih0, int iw0, int shift, int dd, int in_d,
                                                       int in_h, int in_w, int d, int h, int w) {
  auto lower = [](int a, int b) { return a < b ? a : b; };
  auto upper = [](int a, int b) { return a > b ? a : b; };
  Sm90Border b{id0, ih0, iw0, 0, 0, 0, 0, 0, 0};
  b.left = lower(upper(-iw0 - shift, 0), in_w);
  b.right = lower(upper(shift + in_w - (w - iw0), 0), in_w - b.left);
  b.zf = id0 < 0 ? lower((dd - 1 - id0) / dd, in_d) : 0;                          // planes id0 + z * dd < 0
  b.zb = d - id0 > 0 ? lower(upper((d - id0 + dd - 1) / dd, b.zf), in_d) : b.zf;  // planes from d on
  b.yf = lower(upper(-ih0, 0), in_h);
  b.yb = lower(upper(h - ih0, b.yf), in_h);
  return b;
}

/// Rows outside the input of one channel of the box: every row of the planes outside, the rows
/// outside of the others.
CONV3DJIT_HOST_DEVICE constexpr int sm90_border_rows(const Sm90Border& b, int in_d, int in_h) {
  return (b.zf + in_d - b.zb) * in_h + (b.zb - b.zf) * (b.yf + in_h - b.yb);
}

/// Whether the box has cells outside the input among those the gather reads.
CONV3DJIT_HOST_DEVICE constexpr bool sm90_border_any(const Sm90Border& b, int in_d, int in_h) {
  return b.left + b.right > 0 || sm90_border_rows(b, in_d, in_h) > 0;
}

/// A row's columns inside the input, lo .. hi - 1, as units: 16 bytes from va to vb (`vectors` of
/// them: box rows are 16-byte aligned), one float each the rest.
struct Sm90Span {
  int lo, hi, va, vb, vectors, units;
};
CONV3DJIT_HOST_DEVICE constexpr Sm90Span sm90_border_span(const Sm90Border& b, int shift, int in_w) {
  Sm90Span s{shift + b.left, shift + in_w - b.right, 0, 0, 0, 0};
  s.va = (s.lo + 3) / 4 * 4 < s.hi ? (s.lo + 3) / 4 * 4 : s.hi;
  s.vb = s.hi / 4 * 4 > s.va ? s.hi / 4 * 4 : s.va;
  s.vectors = (s.vb - s.va) / 4;
  s.units = s.vectors + (s.va - s.lo) + (s.hi - s.vb);
  return s;
}

/// One cell of a border pass (four cells from x on where vec).
struct Sm90BorderCell {
  int c, z, y, x;
  bool vec;
};

/// Cell i of the column pass (i < channels x in_d x in_h x (left + right)): box row i / (left +
/// right) in channel, plane, row order, its (i % (left + right))-th column outside.
CONV3DJIT_HOST_DEVICE constexpr Sm90BorderCell sm90_border_column(const Sm90Border& b, int i, int shift, int in_d,
                                                                  int in_h, int in_w) {
  const int cols = b.left + b.right, row = i / cols, j = i % cols;
  return {row / (in_h * in_d), row / in_h % in_d, row % in_h,
          j < b.left ? shift + j : shift + in_w - b.right + (j - b.left), false};
}

/// Unit i of the row pass (i < channels x sm90_border_rows x span.units): the channel, then its
/// rows outside (the planes outside, then the rows outside of the planes inside), then the row's
/// units of columns inside.
CONV3DJIT_HOST_DEVICE constexpr Sm90BorderCell sm90_border_row(const Sm90Border& b, const Sm90Span& s, int i,
                                                               int in_d, int in_h) {
  const int rows = sm90_border_rows(b, in_d, in_h), c = i / (rows * s.units), r = i / s.units % rows;
  const int u = i % s.units, planes_out = (b.zf + in_d - b.zb) * in_h, rows_in = b.yf + in_h - b.yb;
  int z = 0, y = 0;
  if (r < planes_out) {
    z = r / in_h < b.zf ? r / in_h : b.zb + (r / in_h - b.zf);
    y = r % in_h;
  } else {
    const int k = r - planes_out;
    z = b.zf + k / rows_in;
    y = k % rows_in < b.yf ? k % rows_in : b.yb + (k % rows_in - b.yf);
  }
  const int v = u - s.vectors;
  return {c, z, y, v < 0 ? s.va + 4 * u : v < s.va - s.lo ? s.lo + v : s.vb + (v - (s.va - s.lo)), v < 0};
}

/// 1 where a specialisation S multiplies 3xTF32 (big + small parts), 0 for one TF32 product:
/// float32 inputs in the fp32 class. bf16 and fp16 values are exact in TF32 (8 and 10 mantissa
/// bits, fp16's range inside TF32's), so half inputs take one product whatever their class.
template <class S>
CONV3DJIT_HOST_DEVICE constexpr int sm90_split_of() {
  return S::fp32_class != 0 && sizeof(typename S::element) == 4 ? 1 : 0;
}

/// Whether a specialisation S reads its weights raw (sm90_raw_weights).
template <class S>
CONV3DJIT_HOST_DEVICE constexpr bool sm90_raw_weights_of() {
  const int kvol = S::kd * S::kh * S::kw, cc = S::cc < S::cg ? S::cc : S::cg;
  return sm90_raw_weights(sm90_split_of<S>(), sizeof(typename S::element) == 2, (S::cg + cc - 1) / cc, S::tma,
                          cc * kvol, S::cg * kvol, S::ndhwc, kvol);
}

/// The geometry of a specialisation S (the generated traits struct of named constants).
template <class S>
CONV3DJIT_HOST_DEVICE constexpr auto sm90_geometry_of() {
  return sm90_geometry(S::cg, S::kd, S::kh, S::kw, S::sh, S::sw, S::dh, S::dw, S::th, S::tw, S::bn, S::cc, S::cp,
                       sm90_split_of<S>(), S::rows, S::planes,
                       S::ndhwc == 0 ? 1 : 0, S::across,
                       sm90_raw_weights_of<S>());
}

}  // namespace conv3djit
