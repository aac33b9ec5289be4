#pragma once
#include "common/common.cuh"
// gemm_sm90's tile arithmetic, shared by the kernel and its family's planner.

namespace conv3djit::gemm_sm90_geometry {

/// Input channels a chunk of the reduction: one 128-byte row of 16-bit elements.
inline constexpr int kChunk = 64;
/// Positions of one box of the input (a 128-byte row of a channel); a tile's BN positions are
/// ceil(BN / 64) such boxes.
inline constexpr int kBox = 64;
/// Threads a block: two consumer warpgroups and one producer warp.
inline constexpr int kThreads = 288;
/// Most stages a ring may have (one mbarrier pair each after the ring).
inline constexpr int kMaxStages = 8;

CONV3DJIT_HOST_DEVICE constexpr int boxes(int bn) { return (bn + kBox - 1) / kBox; }
/// Bytes of a stage: BM weight rows (a tile's output channels) and the input's boxes, 128 bytes a
/// row.
CONV3DJIT_HOST_DEVICE constexpr int stage_bytes(int bm, int bn) { return (bm + boxes(bn) * kChunk) * 128; }
/// Dynamic shared memory: the ring, 1024 bytes to align it to the swizzle's 1024-byte groups, and
/// a full and an empty mbarrier a stage.
CONV3DJIT_HOST_DEVICE constexpr int shared_bytes(int bm, int bn, int stages) {
  return stages * stage_bytes(bm, bn) + 1024 + 16 * kMaxStages;
}

}  // namespace conv3djit::gemm_sm90_geometry
