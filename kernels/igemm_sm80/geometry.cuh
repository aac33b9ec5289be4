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

namespace igemm_half {
/// Reduction terms a slice of the bf16 / fp16 kernel (igemm_sm80/half.cuh): two k16 mma steps.
inline constexpr int kSlice = 32;
/// 32-bit words a shared row of A or B: the slice's 16 pairs of halves and 4 words of padding
/// (rows 80 bytes apart: 8 consecutive rows' 16-byte quads cover all 32 banks).
inline constexpr int kRowWords = 20;
}  // namespace igemm_half

/// The bf16 / fp16 kernel's dynamic shared memory: double-buffered A (BM rows) and B (BN rows)
/// slices, then an 8-byte gather-table entry per reduction index, padded to whole slices.
CONV3DJIT_HOST_DEVICE constexpr int igemm_half_shared_bytes(int kred, int bm, int bn) {
  return 4 * 2 * igemm_half::kRowWords * (bm + bn) +
         8 * ((kred + igemm_half::kSlice - 1) / igemm_half::kSlice * igemm_half::kSlice);
}

}  // namespace conv3djit
