#pragma once
#include "common/common.cuh"
// Tile geometry of the tiled FFMA kernel, shared by the kernel (as compile-time constants) and
// its family's planner (to size shared memory and the grid), so the two can never disagree.

namespace conv3djit {

struct TiledGeometry {
  int tk;            // channels per thread
  int bk;            // channels per block
  int rows;          // output rows per tile: WS warps x WR rows each
  int threads;
  int segs;          // W segments per warp row
  int tile_w;        // output columns per tile
  int in_h, in_w;    // input tile extents for one (channel, kd)
  int nx;            // inputs along W one thread's row needs
  int pitch;         // shared-memory row pitch in floats: a multiple of 4 (16-byte copies and reads)
  int kvol;
  int in_floats, w_floats;
  int stage_pitch;   // the epilogue's output staging: one row of a warp's tile, 4 floats of padding
  int stage_floats;  // one team's warps
  int chunks;        // channel chunks per tile
  int teams;         // single chunk: P teams of warps share the weights, each with 2 input buffers
  int block_threads; // teams x threads
  int buffer_floats; // chunked: one of the 2 buffers (weights, then the input tile or the staging)
  int in_at;         // single chunk: the first input buffer (after the weights), and the distance
  int in_stride;     // between two (team t's buffer b is number 2 t + b)
  int stage_at;      // floats from the start: after the input buffers (single chunk), else buffer 0's tile
  int shared_bytes;
};

/// Lane -> (row, segment) of a warp's WR x segs outputs. With 8 segments a row, bit 2 of the lane
/// picks the row: a quarter-warp (one phase of 16-byte shared-memory loads) then reads segments
/// 0-3 of two rows 4 mod 8 floats apart, all in distinct banks, where segments s and s + 4 of one
/// row (TW = 8: 64 floats apart) would share them.
CONV3DJIT_HOST_DEVICE constexpr int tiled_lane_row(int lane, int segs) {
  return segs == 8 ? ((lane >> 2) & 1) | ((lane >> 4) << 1) : lane / segs;
}
CONV3DJIT_HOST_DEVICE constexpr int tiled_lane_seg(int lane, int segs) {
  return segs == 8 ? (lane & 3) | (((lane >> 3) & 1) << 2) : lane % segs;
}

CONV3DJIT_HOST_DEVICE constexpr TiledGeometry tiled_geometry(int cg, int kd, int kh, int kw, int sh, int sw, int dh,
                                                             int dw, int wk, int ws, int wr, int cc, int tw,
                                                             int teams) {
  TiledGeometry g{};
  g.tk = 8;
  g.bk = wk * g.tk;
  g.rows = ws * wr;
  g.threads = wk * ws * 32;
  g.segs = 32 / wr;
  g.tile_w = g.segs * tw;
  g.in_h = (g.rows - 1) * sh + (kh - 1) * dh + 1;
  g.in_w = (g.tile_w - 1) * sw + (kw - 1) * dw + 1;
  g.nx = (tw - 1) * sw + (kw - 1) * dw + 1;
  // A thread reads its nx inputs as float4s (then a float2 and a float) from column seg * TW * SW.
  // A quarter-warp holds two rows' segments 0-3: rows 16 mod 32 floats apart interleave their
  // contiguous 16-float runs (TW * SW = 4), rows 4 mod 8 apart their 8-float-strided ones.
  const int need = (g.segs - 1) * tw * sw + g.nx;
  const int width = ((need > g.in_w ? need : g.in_w) + 3) / 4 * 4;  // 16-byte copies fill whole groups of 4
  g.pitch = tw * sw == 4 ? width + (48 - width % 32) % 32 : width + (12 - width % 8) % 8;
  g.kvol = kd * kh * kw;
  g.in_floats = cc * kd * g.in_h * g.pitch;
  g.w_floats = cc * g.kvol * g.bk;
  g.stage_pitch = g.tile_w + 4;
  g.stage_floats = wk * ws * wr * g.stage_pitch;
  g.chunks = (cg + cc - 1) / cc;
  g.teams = g.chunks > 1 ? 1 : teams;
  g.block_threads = g.teams * g.threads;
  // Regions rounded to 8 floats keep the 16-byte alignment of float4 accesses. A single chunk:
  // [weights | 2 input buffers a team | staging], its own staging space so that a warp starts its
  // epilogue without waiting for the others to finish with the input tile. Chunked: 2 x
  // [weights | input tile], the staging in buffer 0's input tile (free after the last chunk).
  const int w8 = (g.w_floats + 7) / 8 * 8, in8 = (g.in_floats + 7) / 8 * 8;
  g.buffer_floats = (g.w_floats + (g.stage_floats > g.in_floats ? g.stage_floats : g.in_floats) + 7) / 8 * 8;
  g.in_at = w8;
  g.in_stride = in8;
  g.stage_at = g.chunks > 1 ? g.w_floats : w8 + 2 * g.teams * in8;
  g.shared_bytes = 4 * (g.chunks > 1 ? 2 * g.buffer_floats : g.stage_at + g.teams * g.stage_floats);
  return g;
}

}  // namespace conv3djit
