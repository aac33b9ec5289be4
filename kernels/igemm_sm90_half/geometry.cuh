#pragma once
#include "common/common.cuh"
// igemm_sm90_half's tile arithmetic, shared by the kernel and its family's planner.

namespace conv3djit::igemm_sm90_half_geometry {

/// Reduction terms a chunk: 64 channels of one tap, 128 bytes a row of A and of B.
inline constexpr int kChunk = 64;
/// Bytes a staged row (output position of A, output channel of B).
inline constexpr int kRowBytes = 128;
/// Chunks of one tap: the channels rounded up to whole chunks (the last one zero-filled).
CONV3DJIT_HOST_DEVICE constexpr int chunks_per_tap(int cg) { return (cg + kChunk - 1) / kChunk; }
/// Threads a block: one warpgroup (128 threads) per 64 output positions.
CONV3DJIT_HOST_DEVICE constexpr int threads(int bm) { return bm / 64 * 128; }
/// Bytes of one ring stage: BM rows of A and BN rows of B.
CONV3DJIT_HOST_DEVICE constexpr int stage_bytes(int bm, int bn) { return (bm + bn) * kRowBytes; }
/// Most stages a ring may have.
inline constexpr int kMaxStages = 8;
/// Dynamic shared memory: the ring, 1024 bytes to align it to the swizzle's 1024-byte groups, and
/// one mbarrier a stage for its box of weights.
CONV3DJIT_HOST_DEVICE constexpr int shared_bytes(int bm, int bn, int stages) {
  return stages * stage_bytes(bm, bn) + 1024 + 8 * kMaxStages;
}
/// Whether the weight's chunks arrive as TMA boxes (one a chunk, from the weight's tensor map):
/// where its address is 16-byte aligned, as a map needs; else by cp.async like the input's.
CONV3DJIT_HOST_DEVICE constexpr bool weight_boxes(unsigned long long weight) { return weight % 16 == 0; }
/// Chunks between the accumulators' restarts when partial sums are kept apart (float32 outputs
/// of long reductions): 8 chunks, 512 terms.
inline constexpr int kBlockedChunks = 8;
/// Whether a reduction of `cg` channels and `taps` taps with float32 outputs keeps partial sums
/// apart (then the accumulators are doubled: BN at most 128).
CONV3DJIT_HOST_DEVICE constexpr bool blocked(int cg, int taps, bool fp32_output) {
  return fp32_output && chunks_per_tap(cg) * taps > 2 * kBlockedChunks;
}

}  // namespace conv3djit::igemm_sm90_half_geometry
