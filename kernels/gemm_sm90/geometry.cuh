#pragma once
#include "common/common.cuh"
// gemm_sm90's tile arithmetic, shared by the kernel and its family's planner. A chunk of the
// reduction and a box of the input are one 128-byte row: 64 channels or positions of 16-bit
// elements, 32 of float32 (the tf32 class); with im2col boxes a chunk may be a 64- or 32-byte row
// (32 or 16 channels), so that 32 or 48 input channels are not padded to 64.

namespace conv3djit::gemm_sm90_geometry {

/// Input channels a chunk of the reduction, and positions a box of the input: one 128-byte row of
/// `element_bytes`-byte elements. A tile's BN positions are ceil(BN / box) such boxes.
CONV3DJIT_HOST_DEVICE constexpr int row_elements(int element_bytes) { return 128 / element_bytes; }
/// Threads a block: two consumer warpgroups and a producer warpgroup.
inline constexpr int kThreads = 384;
/// Registers a thread after the start, producer and consumers (setmaxnreg): a block of 384
/// threads starts with 168 each (65536 / 384, in steps of 8); the producer, which only issues
/// TMA loads, keeps 40 and gives the rest to the consumers' accumulators and epilogue
/// (2 x 128 x 232 + 128 x 40 <= 65536). With a producer warp alone (288 threads) every thread had
/// 168, and 16-bit epilogues with an activation spilled at 128 accumulators.
inline constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
/// Most stages a ring may have (one mbarrier pair each after the ring).
inline constexpr int kMaxStages = 8;

CONV3DJIT_HOST_DEVICE constexpr int boxes(int bn, int element_bytes) {
  return (bn + row_elements(element_bytes) - 1) / row_elements(element_bytes);
}
/// Input rows a stage holds: the tile's BN positions in whole boxes, and with the im2col form's
/// row boxes `halo` = (KW - 1)·DW window origins more, which the kernel row's other taps reach.
CONV3DJIT_HOST_DEVICE constexpr int input_rows(int bn, int element_bytes, int halo) {
  return boxes(bn, element_bytes) * row_elements(element_bytes) + halo;
}
/// Row boxes: the window origins a kernel row reaches past its first tap's, (KW - 1)·DW, which an
/// input box holds past the tile's and each output row gains.
CONV3DJIT_HOST_DEVICE constexpr int row_reach(int kw, int dw) { return (kw - 1) * dw; }
/// Row boxes count an image's output positions along rows of OW + `halo` (the kernel row's reach
/// past each row's last output): position v is output (v / (OW + halo))·OW + v % (OW + halo) of the
/// image's OD·OH·OW, or none (-1) in a row's last `halo`.
CONV3DJIT_HOST_DEVICE constexpr long long row_box_output(int v, int ow, int halo) {
  const int width = ow + halo, r = v / width, x = v - r * width;
  return x < ow ? static_cast<long long>(r) * ow + x : -1;
}
/// Bytes of a stage: `taps` boxes of BM weight rows (a tile's output channels; KW with row boxes)
/// and the input's rows (a chunk's channels, one row each), `row_bytes` a row (the chunk's), in
/// whole 1024 bytes (each stage on the 128-byte swizzle's groups, and so on the narrower ones').
CONV3DJIT_HOST_DEVICE constexpr int stage_bytes(int bm, int bn, int element_bytes, int taps = 1, int halo = 0,
                                                int row_bytes = 128) {
  return ((taps * bm + input_rows(bn, element_bytes, halo)) * row_bytes + 1023) / 1024 * 1024;
}
/// Dynamic shared memory: the ring, 1024 bytes to align it to the swizzle's 1024-byte groups, a
/// full and an empty mbarrier a stage, and the producer's im2col tile origin (4 ints).
CONV3DJIT_HOST_DEVICE constexpr int shared_bytes(int bm, int bn, int stages, int element_bytes, int taps = 1,
                                                 int halo = 0, int row_bytes = 128) {
  return stages * stage_bytes(bm, bn, element_bytes, taps, halo, row_bytes) + 1024 + 16 * kMaxStages + 16;
}

}  // namespace conv3djit::gemm_sm90_geometry
