#pragma once
// A warp's outputs of one channel for 16 consecutive positions of a plane (the rows g and g + 8 of
// its wgmma fragment), stored to an NCDHW output where those positions are one run in memory.
#include "common/element.cuh"
#include "common/epilogue.cuh"

namespace conv3djit {

/// Lane (g, t)'s sums v0 (position g) and v1 (position g + 8) of its channel, whose run starts at
/// output offset `at` (position 0): the epilogue with bias b and the residual, then the store of
/// the first `limit` positions where `inside` (the channel exists). Half outputs gather each
/// channel's 16 values in 8 lanes (two shuffles of packed pairs: every lane of the warp must call
/// it) and store two adjacent positions a lane, 4 bytes, so that a store instruction fills whole
/// 32-byte sectors (2-byte stores of 8 positions half-filled them: docs/kernels/igemm_sm90.md);
/// where a pair is off 4 bytes or the run ends, its halves go one by one.
template <class Spec>
__device__ __forceinline__ void store_run16(typename Spec::out_element* out, long long at, int limit, bool inside,
                                            float v0, float v1, float b, const ConvParams& p, int g, int t) {
  using Out = typename Spec::out_element;
  const float r0 = epilogue::residual<Spec, float>(at + g, inside && g < limit, p);
  const float r1 = epilogue::residual<Spec, float>(at + g + 8, inside && g + 8 < limit, p);
  v0 = epilogue::apply_read<Spec>(v0, b, r0, p);
  v1 = epilogue::apply_read<Spec>(v1, b, r1, p);
  if constexpr (sizeof(Out) == 2) {
    const unsigned packed = pack_pair<Out>(v0, v1);  // positions g, g + 8
    const unsigned select = g >= 4 ? 0x7632u : 0x5410u;  // positions 2g, 2g + 1 >= 8: the high halves
    const unsigned word = __byte_perm(__shfl_sync(0xffffffffu, packed, 4 * ((2 * g) & 7) + t),
                                      __shfl_sync(0xffffffffu, packed, 4 * ((2 * g + 1) & 7) + t), select);
    // Three predicated stores, no branches: a 256-channel tile calls this 64 times, and branch
    // regions there doubled ptxas's time.
    Out* const dst = out + at + 2 * g;
    const bool first = inside && 2 * g < limit, second = inside && 2 * g + 1 < limit;
    const bool whole = second && reinterpret_cast<unsigned long long>(dst) % 4 == 0;
    if (whole) *reinterpret_cast<unsigned*>(dst) = word;
    if (first && !whole) dst[0].bits = static_cast<unsigned short>(word & 0xffffu);
    if (second && !whole) dst[1].bits = static_cast<unsigned short>(word >> 16);
  } else {
    if (inside && g < limit) out[at + g] = from_float<Out>(v0);
    if (inside && g + 8 < limit) out[at + g + 8] = from_float<Out>(v1);
  }
}

}  // namespace conv3djit
