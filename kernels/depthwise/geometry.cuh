#pragma once
#include "common/common.cuh"
// The depthwise kernel's geometry, shared by the kernel and its family's planner.

namespace conv3djit {

/// depthwise: a thread computes TH output rows x 4 columns of one channel and walks a run
/// of ODB output planes, one input plane at a time, entirely in registers (no shared memory, no
/// barriers): each input plane adds into the SPAN output planes that read it. A row group of L
/// lanes covers a W tile: lane s loads one 16-byte-aligned float4 of each input row and takes the
/// columns to its right from its neighbours by shuffle, so the last lanes only load (halo), and
/// with a shift S (padding not a multiple of 4) one more lane computes for the stores' realignment.
struct DepthwiseGeometry {
  int span;        // input planes one output plane reads: the accumulator sets
  int rows;        // input rows a thread's TH output rows read
  int nxw;         // inputs along W of a thread's 4 outputs: its float4 plus halo columns
  int halo_lanes;  // lanes to the right whose float4 a window needs
  int stores;      // lanes of a row group that store a float4 of outputs: the W tile is 4 x stores
  int groups;      // row groups a warp
  int threads, bh, bw;
  int kvol;
  int min_blocks;  // per SM, for the register budget (launch bounds)
};

CONV3DJIT_HOST_DEVICE constexpr DepthwiseGeometry depthwise_geometry(int kd, int kh, int kw, int sh, int dd, int dh,
                                                                     int dw, int th, int lanes, int warps,
                                                                     int shift) {
  DepthwiseGeometry g{};
  g.span = (kd - 1) * dd + 1;
  g.rows = (th - 1) * sh + (kh - 1) * dh + 1;
  g.nxw = 4 + (kw - 1) * dw;
  g.halo_lanes = (g.nxw - 1) / 4;
  g.stores = lanes - g.halo_lanes - (shift > 0 ? 1 : 0);
  g.groups = 32 / lanes;
  g.threads = 32 * warps;
  g.bh = warps * g.groups * th;
  g.bw = 4 * g.stores;
  g.kvol = kd * kh * kw;
  // Left alone, ptxas takes 126-155 registers for 3x3x3 (TH 2, 7 warps), which leaves an SM 7
  // or 14 warps, too few to hide DRAM latency (ncu); held to 21 warps an SM it takes 79 without
  // spilling (0.136 / 0.092 ms uncapped, 0.087 at 79; capped at 96 with __maxnreg__ it took 91
  // and 0.102 ms). The planner's tiles don't spill at this budget (ptxas -v, sm_90, 2026-11-29);
  // forced runs that loop can.
  g.min_blocks = warps >= 21 ? 1 : 21 / warps;
  return g;
}

/// The geometry of a specialisation S (the generated traits struct of named constants).
template <class S>
CONV3DJIT_HOST_DEVICE constexpr auto depthwise_geometry_of() {
  return depthwise_geometry(S::kd, S::kh, S::kw, S::sh, S::dd, S::dh, S::dw, S::th, S::lanes, S::warps, S::shift);
}

}  // namespace conv3djit
