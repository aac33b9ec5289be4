#pragma once
// A warp's 32 x 32 accumulators in the igemm_sm80 kernels (float32 and half types alike): 2 m16 x
// 4 n8 fragments of 4 floats, and the blocked summation's two operations on them.

namespace conv3djit {

using WarpTile = float[2][4][4];

__device__ __forceinline__ void zero(WarpTile& a) {
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) a[i][j][e] = 0.f;
}

// to += from (round-to-nearest FADD); from is zeroed when `reset`.
__device__ __forceinline__ void add_into(WarpTile& to, WarpTile& from, bool reset) {
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        to[i][j][e] += from[i][j][e];
        if (reset) from[i][j][e] = 0.f;
      }
}

}  // namespace conv3djit
