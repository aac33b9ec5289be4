#pragma once
#include "common/common.cuh"
// The grouped kernel's geometry, shared by the kernel and its family's planner.

namespace conv3djit {

/// grouped: a block computes KB channels of one group for BH x BW outputs of up to ODB
/// consecutive output planes, one plane after the other, while the input planes stream through a
/// ring of shared-memory slots (each input plane is copied once per block, not once per output
/// plane that reads it), PF output planes ahead. A thread owns TH rows x TW columns of each plane
/// for each of the KB channels.
struct GroupedGeometry {
  int segs, threads;
  int span;          // input planes one output plane reads
  int slots;         // the ring: one span plus the SD-plane steps of PF output planes in flight
  int in_h, in_w;    // input rows and columns of one channel's plane in the tile
  int rows;          // input rows a thread's TH output rows read
  int nx;            // inputs along W one of those rows needs
  int vec;           // rows are read as float4 (TW x SW a multiple of 4), nxv floats
  int nxv;
  int pitch;         // row pitch in floats: a multiple of 4, not of 32
  int plane_floats;  // one slot: CG channels x in_h rows
  int kvol;
  int weight_floats; // static shared memory: KB channels' weights
  int shared_bytes;  // dynamic: the ring
  int min_blocks;    // per SM, for the register budget
  int depth_unroll;  // the depth loop's unroll: whole, or 1 past 1024 FMAs a channel
  int rows_unroll;   // the input-row loop's unroll: whole, or 1 past 1024 FMAs a depth step
};

CONV3DJIT_HOST_DEVICE constexpr GroupedGeometry grouped_geometry(int cg, int kd, int kh, int kw, int sd, int sh,
                                                                 int sw, int dd, int dh, int dw, int bh, int bw,
                                                                 int th, int tw, int kb, int pf, bool ndhwc) {
  GroupedGeometry g{};
  g.segs = bw / tw;
  g.threads = bh / th * g.segs;
  g.span = (kd - 1) * dd + 1;
  g.slots = g.span + pf * sd;
  g.in_h = (bh - 1) * sh + (kh - 1) * dh + 1;
  g.in_w = (bw - 1) * sw + (kw - 1) * dw + 1;
  g.rows = (th - 1) * sh + (kh - 1) * dh + 1;
  g.nx = (tw - 1) * sw + (kw - 1) * dw + 1;
  g.vec = tw * sw % 4 == 0 ? 1 : 0;
  g.nxv = g.vec ? (g.nx + 3) / 4 * 4 : g.nx;
  const int need = (g.segs - 1) * tw * sw + g.nxv;
  g.pitch = ((need > g.in_w ? need : g.in_w) + 3) / 4 * 4;
  if (g.pitch % 32 == 0) g.pitch += 4;
  g.plane_floats = cg * g.in_h * g.pitch;
  g.kvol = kd * kh * kw;
  g.weight_floats = kb * cg * g.kvol;
  g.shared_bytes = 4 * g.slots * g.plane_floats;
  // Few terms per output (depthwise): latency-bound at 16 warps an SM (ncu), so registers are
  // traded for warps: 28 warps' worth at 72 registers a thread. More terms, or several channels
  // a group (their partial sums spill at 72 under NVRTC), or NDHWC blocks of several output
  // channels of one input channel (a channel multiplier: 24-360 bytes spilled at 72 with KB = 2):
  // registers for the accumulators.
  const int warps = (g.threads + 31) / 32;
  g.min_blocks = cg == 1 && g.kvol <= 64 && warps <= 28 && (kb == 1 || !ndhwc) ? 28 / warps : 1;
  // Unrolled, a channel's loops hold KD x KH x KW x KB x TH x TW FMAs: NVVM and ptxas took
  // seconds on 7 x 7 x 7 with 16 accumulators (5488). Past 1024 the depth loop is rolled, and
  // past 1024 a depth step the row loop too (the body then holds one input row's FMAs).
  const int step_fmas = kh * kw * kb * th * tw;
  g.depth_unroll = kd * step_fmas > 1024 ? 1 : kd;
  g.rows_unroll = step_fmas > 1024 ? 1 : g.rows;
  return g;
}

/// The geometry of a specialisation S (the generated traits struct of named constants).
template <class S>
CONV3DJIT_HOST_DEVICE constexpr auto grouped_geometry_of() {
  return grouped_geometry(S::cg, S::kd, S::kh, S::kw, S::sd, S::sh, S::sw, S::dd, S::dh, S::dw, S::bh, S::bw, S::th,
                          S::tw, S::kb, S::pf, S::ndhwc != 0);
}

}  // namespace conv3djit
