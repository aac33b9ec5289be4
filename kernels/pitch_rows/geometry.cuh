#pragma once
#include "common/common.cuh"
// pitch_rows' work split for NDHWC inputs, shared by the kernel and its plan.

namespace conv3djit {

/// An NDHWC input's transpose runs in steps of 64 positions x 32 channels of one image. A block
/// takes this many consecutive steps: enough for about 2048 blocks in all (several blocks an SM
/// keep the copy's reads in flight: 2048-position spans left 36 blocks for a 3 x 24 x 17 x 31 x 45
/// input, 78 us against 14), at most 32 (each block's index arithmetic is then spread over up to
/// 2048 positions: a block a row of 64 positions spent ~350 instructions an element for C = 3).
CONV3DJIT_HOST_DEVICE constexpr long long pitch_rows_steps(long long n, long long c, long long positions) {
  const long long steps = n * ((c + 31) / 32) * ((positions + 63) / 64);
  const long long per_block = (steps + 2047) / 2048;
  return per_block < 1 ? 1 : per_block > 32 ? 32 : per_block;
}

}  // namespace conv3djit
