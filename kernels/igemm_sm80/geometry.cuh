#pragma once
#include "common/common.cuh"
// igemm_sm80's shared-memory size, shared by the kernel and its family's planner.

namespace conv3djit {

/// igemm_sm80's dynamic shared memory: double-buffered A (BK x BM) and B (BK x BN) slices with
/// 8 floats of row padding, two parts each for 3xTF32, then an 8-byte gather-table entry per
/// reduction index, padded to whole slices of BK = 16.
CONV3DJIT_HOST_DEVICE constexpr int igemm_shared_bytes(int kred, int bm, int bn, int split) {
  return 4 * 2 * (split ? 2 : 1) * 16 * (bm + bn + 16) + 8 * ((kred + 15) / 16 * 16);
}

}  // namespace conv3djit
