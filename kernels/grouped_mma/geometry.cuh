#pragma once
#include "common/common.cuh"
// grouped_mma's tile arithmetic, shared by the kernel and its family's planner.
//
// The reduction of one output is its group's CG channels at every tap, in items of 8 channels of
// one tap (pieces): item i is tap i / pieces(CG), channels 8 (i % pieces(CG)) on. Groups of 4
// channels take one piece a tap, its upper half zeros. An m16n8k16 step takes two items (the
// second of an odd count is zeros).

namespace conv3djit::grouped_mma_geometry {

/// Bytes of one staged input row: 8 channels of one position.
inline constexpr int kRowBytes = 16;
/// Longest reduction a chain of mma.sync runs into one float32 accumulator (32 steps, 512
/// terms), as in igemm_sm80: the tensor cores' accumulation truncates, and longer chains drift
/// past the 1e-5 class of float32 outputs.
inline constexpr int kMaxItems = 64;
/// Registers a thread may hold its B fragments in (2 a step and column block).
inline constexpr int kMaxWeightRegisters = 64;

/// 8-channel pieces of a group's channels at one tap (CG a multiple of 8, or 4: one half-filled).
CONV3DJIT_HOST_DEVICE constexpr int pieces(int cg) { return (cg + 7) / 8; }

struct GroupedMmaGeometry {
  int items, steps;          // reduction items of 8 terms; m16n8k16 steps (two items each)
  int span, in_h, in_w;      // input planes, rows and columns of one output plane's TH x TW tile
  int slots;                 // the ring of input planes: a span, and SD more while a block walks planes
  int group_rows;            // staged 16-byte rows of one group in one plane: pieces x in_h x in_w
  int slot_rows;             // GB groups' rows of one plane
  int m_blocks;              // m16 blocks of the tile's TH x TW positions
  int warps_per_group;       // NG / NW x WM
  int threads;
  int shared_bytes;          // the ring's slots, then one zero row
  int min_blocks;            // per SM, for the register budget (128 or 168 registers a thread)
};

CONV3DJIT_HOST_DEVICE constexpr GroupedMmaGeometry geometry(int cg, int kd, int kh, int kw, int sd, int sh, int sw,
                                                             int dd, int dh, int dw, int th, int tw, int gb, int ng,
                                                             int nw, int wm, int odb) {
  GroupedMmaGeometry g{};
  g.items = kd * kh * kw * pieces(cg);
  g.steps = (g.items + 1) / 2;
  g.span = (kd - 1) * dd + 1;
  g.in_h = (th - 1) * sh + (kh - 1) * dh + 1;
  g.in_w = (tw - 1) * sw + (kw - 1) * dw + 1;
  g.slots = odb > 1 ? g.span + sd : g.span;
  g.group_rows = pieces(cg) * g.in_h * g.in_w;
  g.slot_rows = gb * g.group_rows;
  g.m_blocks = (th * tw + 15) / 16;
  g.warps_per_group = nw > 0 ? ng / nw * wm : 0;
  g.threads = 32 * gb * g.warps_per_group;
  g.shared_bytes = (g.slots * g.slot_rows + 1) * kRowBytes;
  // 128 registers a thread, 168 where the B fragments take more than 32 (54 of them beside an
  // NCDHW GELU + residual epilogue spilled at 128).
  const int budget = 2 * g.steps * nw > 32 ? 168 : 128;
  const int by_registers = g.threads > 0 ? 65536 / (budget * g.threads) : 1;
  g.min_blocks = by_registers < 1 ? 1 : by_registers > 8 ? 8 : by_registers;
  return g;
}

/// Item `item`'s tap along D (its input plane is kd * DD of an output plane's span) and its staged
/// row relative to an output position's first in that plane's slot ([GB][pieces][in_h][in_w]; tap
/// (kd, 0, 0), channels 0..7 at 0).
CONV3DJIT_HOST_DEVICE constexpr int item_kd(int item, int cg, int kh, int kw) { return item / pieces(cg) / (kh * kw); }
CONV3DJIT_HOST_DEVICE constexpr int item_row(int item, int cg, int kh, int kw, int dh, int dw, int in_h, int in_w) {
  const int chunks = pieces(cg), tap = item / chunks, chunk = item % chunks;
  const int y = tap / kw % kh, x = tap % kw;
  return (chunk * in_h + y * dh) * in_w + x * dw;
}

}  // namespace conv3djit::grouped_mma_geometry
