#pragma once
#include "common/common.cuh"
// gemm_sm90's tile arithmetic, shared by the kernel and its family's planner.

namespace conv3djit::gemm_sm90_geometry {

/// Input channels a chunk of the reduction: one 128-byte row of 16-bit elements.
inline constexpr int kChunk = 64;
/// Positions of one box of the input (a 128-byte row of a channel); a tile's BN positions are
/// ceil(BN / 64) such boxes.
inline constexpr int kBox = 64;
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
