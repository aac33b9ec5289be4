#pragma once
#include "common/common.cuh"
// igemm_sm90_k16's tile arithmetic, shared by the kernel and its family's planner.

namespace conv3djit::igemm_sm90_k16_geometry {

/// kw slots a kernel row takes in a k16 slice: KW rounded up to 2, 4 or 8 (the padding slots carry
/// zero weights). A slice holds 16 / slots kernel rows (c, kd, kh).
CONV3DJIT_HOST_DEVICE constexpr int kw_slots(int kw) { return kw <= 2 ? 2 : kw <= 4 ? 4 : 8; }
/// k16 slices of the whole reduction: C·KD·KH kernel rows, 16 / kw_slots a slice.
CONV3DJIT_HOST_DEVICE constexpr int slices(int cg, int kd, int kh, int kw) {
  const int rows_a_slice = 16 / kw_slots(kw);
  return (cg * kd * kh + rows_a_slice - 1) / rows_a_slice;
}
/// Input planes a tile's box holds: the KD planes of one output plane, or one plane where a block
/// walks `planes` > 1 output planes (each input plane then serves KD of them).
CONV3DJIT_HOST_DEVICE constexpr int box_planes(int kd, int planes) { return planes > 1 ? 1 : kd; }
/// Slices of the weights in shared memory: the whole reduction, or, walking planes, the C·KH kernel
/// rows of each kd apart (a slice's two rows then always share kd).
CONV3DJIT_HOST_DEVICE constexpr int weight_slices(int cg, int kd, int kh, int kw, int planes) {
  return planes > 1 ? kd * slices(cg, 1, kh, kw) : slices(cg, kd, kh, kw);
}
/// Output rows a run of `positions` consecutive positions of a plane OW wide can touch.
CONV3DJIT_HOST_DEVICE constexpr int row_span(int positions, int ow) { return (ow + positions - 2) / ow + 1; }
/// Input rows a tile's box holds: its output rows' inputs.
CONV3DJIT_HOST_DEVICE constexpr int box_rows(int positions, int ow, int sh, int kh, int dh) {
  return (row_span(positions, ow) - 1) * sh + (kh - 1) * dh + 1;
}
/// Halves a box row holds: every output column's inputs and kw slots, after a shift of up to 7
/// columns that puts the box's origin on 16 bytes, rounded up to 8 (TMA rows are 16-byte
/// multiples).
CONV3DJIT_HOST_DEVICE constexpr int box_row(int ow, int sw, int kw) {
  return ((ow - 1) * sw + kw_slots(kw) + 7 + 7) / 8 * 8;
}
/// Columns the box starts before the first input column a tile reads (pad_w before it): its origin
/// on a multiple of 8 halves.
CONV3DJIT_HOST_DEVICE constexpr int box_shift(int pad_w) { return -pad_w & 7; }

/// Shared memory of a block (bytes): the weights (weight_slices x BN columns x 16 terms), the bias (BN
/// floats), two mbarriers, two stages of the input tile, each the TMA box (128-byte aligned) and
/// its copy shifted by one element 64 bytes past a 128-byte boundary (a warp reads the same word of
/// both for positions of either parity, which then fall in different banks), and, for 16-bit
/// outputs, each warpgroup's output tile for a TMA store: BN channels x 64 positions, 128 bytes a
/// channel, from the first 1024-byte boundary at or past out_at (the 128-byte swizzle's groups).
struct Layout {
  int weight_bytes, bias_at, bars_at, tile_bytes, tiles_at, out_at, out_tile_bytes, shared_bytes;
};
CONV3DJIT_HOST_DEVICE constexpr int align128(int bytes) { return (bytes + 127) / 128 * 128; }
CONV3DJIT_HOST_DEVICE constexpr Layout layout(int cg, int kd, int kh, int kw, int bn, int wgs, int rows, int rw,
                                              int out_bytes, int planes) {
  Layout l{};
  l.weight_bytes = weight_slices(cg, kd, kh, kw, planes) * bn * 16 * 2;
  l.bias_at = l.weight_bytes;
  l.bars_at = l.bias_at + bn * 4;
  // The box (C x box_planes x rows x rw halves) and 16 bytes more: the shifted copy's last word
  // reads one element past the box.
  l.tile_bytes = align128(cg * box_planes(kd, planes) * rows * rw * 2 + 16) + 64;
  l.tiles_at = align128(l.bars_at + 16);
  l.out_tile_bytes = out_bytes == 2 ? bn * 128 : 0;
  l.out_at = l.tiles_at + 4 * l.tile_bytes;
  l.shared_bytes = l.out_at + (l.out_tile_bytes > 0 ? 1024 + wgs * l.out_tile_bytes : 0);
  return l;
}

}  // namespace conv3djit::igemm_sm90_k16_geometry
