#pragma once
#include "common/common.cuh"
#include "common/im2col.cuh"
// igemm_sm90_half's tile arithmetic, shared by the kernel and its family's planner. A chunk of the
// reduction is one row of A and of B: 128 bytes whatever the element (64 bf16 / fp16 channels, or
// 32 float32 ones in the tf32 class), or 64 bytes for 16-bit layers of 32 channels (a 128-byte
// row would be half zeros), each row width swizzled as wide as it is.

namespace conv3djit::igemm_sm90_half_geometry {

/// Bytes of a full staged row (output position of A, output channel of B).
inline constexpr int kRowBytes = 128;
/// Reduction terms of a full chunk: the channels of one tap in a 128-byte row of A and of B.
CONV3DJIT_HOST_DEVICE constexpr int chunk_channels(int element_bytes) { return kRowBytes / element_bytes; }
/// Chunks of one tap of `chunk` channels: the channels rounded up to whole chunks (the last one
/// zero-filled).
CONV3DJIT_HOST_DEVICE constexpr int chunks_per_tap(int cg, int chunk) { return (cg + chunk - 1) / chunk; }
/// Threads a block: one warpgroup (128 threads) per 64 output positions, or, where the output
/// channels are the product's M (`pn` > 0: 64 of them), per `pn` output positions, its N.
CONV3DJIT_HOST_DEVICE constexpr int threads(int bm, int pn) { return bm / (pn > 0 ? pn : 64) * 128; }
/// Bytes of one ring stage: BM rows of A and BN rows of B, `row` bytes each.
CONV3DJIT_HOST_DEVICE constexpr int stage_bytes(int bm, int bn, int row) { return (bm + bn) * row; }
/// Most stages a ring may have.
inline constexpr int kMaxStages = 8;
/// Bytes of the outputs staged in the ring after the reduction, at most: BN channel rows of BM
/// float32 sums and 4 more (NCDHW), or BM position rows of BN and 8 more (NDHWC epilogues).
CONV3DJIT_HOST_DEVICE constexpr int staged_output_bytes(int bm, int bn) {
  return 4 * (bn * (bm + 4) > bm * (bn + 8) ? bn * (bm + 4) : bm * (bn + 8));
}
/// Bytes of the ring: its stages, or the staged outputs where those need more (64-byte rows).
CONV3DJIT_HOST_DEVICE constexpr int ring_bytes(int bm, int bn, int stages, int row) {
  return stages * stage_bytes(bm, bn, row) > staged_output_bytes(bm, bn) ? stages * stage_bytes(bm, bn, row)
                                                                          : staged_output_bytes(bm, bn);
}
/// Dynamic shared memory: the ring, 1024 bytes to align it to the swizzle's 1024-byte groups, and
/// one mbarrier a stage for its boxes.
CONV3DJIT_HOST_DEVICE constexpr int shared_bytes(int bm, int bn, int stages, int row) {
  return ring_bytes(bm, bn, stages, row) + 1024 + 8 * kMaxStages;
}
/// Whether the weight's chunks arrive as TMA boxes (one a chunk, from the weight's tensor map):
/// where its address is 16-byte aligned, as a map needs; else by cp.async like the input's.
CONV3DJIT_HOST_DEVICE constexpr bool weight_boxes(unsigned long long weight) { return weight % 16 == 0; }
/// Row tiles of BM output positions: over all N·OD·OH·OW positions, or, where A is read in
/// M-major order from an NCDHW input (Spec::mmajor), image by image (a tile never spans two).
CONV3DJIT_HOST_DEVICE constexpr long long row_tiles(long long n, long long positions, int bm, bool per_image) {
  return per_image ? n * ((positions + bm - 1) / bm) : (n * positions + bm - 1) / bm;
}
/// Positions of A's M-major boxes (64 positions x 64 channels of a 16-bit NCDHW input).
inline constexpr int kMajorBox = 64;
/// Chunks before the reduction's end at which a tile's residual is prefetched to L2 (c3d_conv3b:
/// about 7 us ahead of its copy-out on an H100, estimated from its time a chunk; 4 and 16 did alike).
inline constexpr int kResidualLead = 8;
/// Chunks between the accumulators' restarts when partial sums are kept apart (float32 outputs
/// of long 16-bit reductions): 8 chunks, 512 terms (256 in chunks of 32 channels).
inline constexpr int kBlockedChunks = 8;
/// Whether a reduction of `cg` channels and `taps` taps keeps partial sums apart (then the
/// accumulators are doubled: BN at most 128): float32 outputs of 16-bit inputs (a 1e-5 class),
/// not the tf32 class, whose 5e-4 the TF32 products' own rounding sets.
CONV3DJIT_HOST_DEVICE constexpr bool blocked(int cg, int taps, bool fp32_output, int element_bytes) {
  return fp32_output && element_bytes == 2 &&
         chunks_per_tap(cg, chunk_channels(element_bytes)) * taps > 2 * kBlockedChunks;
}

/// Blocks an SM the kernel's registers are budgeted for (__launch_bounds__): two up to 128
/// columns (128 registers), one for wider tiles, blocked sums, and float32 tiles of 128 columns
/// whose A the threads stage (their addresses and the TF32 rounding spilled 8-24 bytes at 128).
/// With the output channels as M (BN 64), a warpgroup of 256 positions holds 128 accumulators,
/// but its block is one warpgroup: two blocks still leave 255 registers a thread.
CONV3DJIT_HOST_DEVICE constexpr int blocks_an_sm(int bn, int cg, int taps, bool fp32_output, int element_bytes,
                                                  bool a_mapped) {
  if (bn > 128 || blocked(cg, taps, fp32_output, element_bytes)) return 1;
  return element_bytes == 4 && !a_mapped && bn == 128 ? 1 : 2;
}

}  // namespace conv3djit::igemm_sm90_half_geometry
