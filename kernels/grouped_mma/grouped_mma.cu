// Grouped convolution of bf16 / fp16 tensors on mma.sync tensor cores (sm_80 or newer), for groups
// of 4, 8, 16, .. channels in and out: ResNeXt's 32 groups of 4 or 8 run at a few products a byte,
// too few for wgmma's 64-column tiles and many for FFMA. Output in the input type or float32.
// Groups of 4 input channels fill half of each item (zeros), of 4 output channels half of each
// column block (not stored): the tensor cores have the time, the layer is bound by its copies.
//
// GEMM view of one group: rows = output positions, columns = the group's KG output channels,
// reduction = its CG channels at every tap, in items of 8 channels of one tap (geometry.cuh). A
// block computes a TH x TW tile of ODB consecutive output planes of one image for GB consecutive
// groups, plane after plane; each warp one group's NW column blocks of 8 for every WM-th m16
// block of the tile.
//
// Every tensor is in the layer's layout (Spec::ndhwc). The input planes the tile reads flow
// through a ring of shared-memory slots, each copied once per block: for each group, the
// 8-channel pieces of every position of the plane the tile reads, one 16-byte row a piece
// ([GB][pieces][rows][cols], positions along W adjacent: channels-last whatever the input's
// layout), zeros or the padding mode's sources where the tile reads padding; the next output
// plane's new input planes are copied while this one is computed. An A fragment is then one
// ldmatrix.x4 whatever the tap: lane l gives the row of position l % 16 of the m16 block at item
// 2s + l / 16 in the slot of the item's plane, so the im2col gather is the lanes' addresses. The B
// fragments (the group's weights, at most 64 registers) are loaded once a warp, while the first
// planes' copies are in flight.
#pragma once
#include "common/async_copy.cuh"
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/mma_sync.cuh"
#include "common/padding.cuh"
#include "grouped_mma/geometry.cuh"

namespace conv3djit {

namespace grouped_mma_geometry {
/// The geometry of a specialisation S (the generated traits struct).
template <class S>
__device__ constexpr GroupedMmaGeometry geometry_of() {
  return geometry(S::cg, S::kd, S::kh, S::kw, S::sd, S::sh, S::sw, S::dd, S::dh, S::dw, S::th, S::tw, S::gb, S::ng,
                  S::nw, S::wm, S::odb);
}
}  // namespace grouped_mma_geometry

template <class Spec>
__global__ void __launch_bounds__(grouped_mma_geometry::geometry_of<Spec>().threads,
                                  CONV3DJIT_BLOCKS_AN_SM(grouped_mma_geometry::geometry_of<Spec>().min_blocks))
grouped_mma(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
            const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out,
            ConvParams p) {
  using namespace grouped_mma_geometry;
  using T = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, MODE = Spec::pad_mode;
  constexpr int TH = Spec::th, TW = Spec::tw, GB = Spec::gb, NG = Spec::ng, NW = Spec::nw, WM = Spec::wm;
  constexpr int ODB = Spec::odb;
  constexpr GroupedMmaGeometry G = geometry_of<Spec>();
  constexpr int KVOL = KD * KH * KW, CHUNKS = pieces(CG), PIECE = CG < 8 ? CG : 8;  // channels a piece holds
  constexpr bool NDHWC = Spec::ndhwc != 0;
  static_assert((CG % 8 == 0 || CG == 4) && G.items <= kMaxItems && G.steps * NW * 2 <= kMaxWeightRegisters,
                "8-channel items, chains of at most 512 terms, B in at most 64 registers");
  extern __shared__ __align__(16) uint4 grouped_mma_rows[];
  const unsigned rows = static_cast<unsigned>(__cvta_generic_to_shared(grouped_mma_rows));
  const unsigned zero_row = rows + static_cast<unsigned>(G.slots * G.slot_rows * kRowBytes);

  // Block order: W tiles, H tiles, group blocks, runs of output planes, images (neighbouring
  // tiles, which share input rows, run together).
  const int OD = static_cast<int>(p.od), OH = static_cast<int>(p.oh), OW = static_cast<int>(p.ow);
  const int D = static_cast<int>(p.d), H = static_cast<int>(p.h), W = static_cast<int>(p.w);
  const int tiles_w = (OW + TW - 1) / TW, tiles_h = (OH + TH - 1) / TH, runs = (OD + ODB - 1) / ODB;
  const int group_blocks = static_cast<int>(p.c / CG) / GB;
  long long b = blockIdx.x;
  const int ow0 = static_cast<int>(take_remainder(b, tiles_w)) * TW;
  const int oh0 = static_cast<int>(take_remainder(b, tiles_h)) * TH;
  const int group0 = static_cast<int>(take_remainder(b, group_blocks)) * GB;
  const int od0 = static_cast<int>(take_remainder(b, runs)) * ODB;
  const long long n = b;
  const int planes_out = min(ODB, OD - od0);

  // Input plane z of the run (from od0 * SD - pad_d) into slot z % SLOTS: rows from oh0 * SH -
  // pad_h, columns from ow0 * SW - pad_w, 8 channels a row: one 16-byte copy of an NDHWC input
  // (a group of 4: an 8-byte load, the row's upper half zeros), 8 element loads of an NCDHW one
  // (consecutive threads on consecutive columns, so each load is a warp's run of W).
  const int id0 = od0 * SD - p.pad_d, ih0 = oh0 * SH - p.pad_h, iw0 = ow0 * SW - p.pad_w;
  // 16-byte copies of 8 channels, or 8-byte loads of a group of 4 (C % 4 == 0 keeps each
  // position's channels on 8 bytes), where the input is aligned for them.
  const bool vector = (reinterpret_cast<unsigned long long>(in) & 15) == 0;
  const bool vector8 = (reinterpret_cast<unsigned long long>(in) & 7) == 0;
  const ActivationStrides st = activation_strides<Spec::ndhwc>(p.c, D, H, W);
  const T* const image = in + n * st.n;
  auto stage = [&](int z_begin, int z_end) {
    for (int r = threadIdx.x; r < (z_end - z_begin) * G.slot_rows; r += G.threads) {
      const int z = z_begin + r / G.slot_rows;
      int q = r % G.slot_rows;
      const int x = q % G.in_w;
      q /= G.in_w;
      const int y = q % G.in_h;
      q /= G.in_h;
      const int chunk = q % CHUNKS, gl = q / CHUNKS;
      int id = id0 + z, ih = ih0 + y, iw = iw0 + x;
      bool ok;
      if constexpr (MODE == padding::kZeros) {
        ok = static_cast<unsigned>(id) < static_cast<unsigned>(D) &&
             static_cast<unsigned>(ih) < static_cast<unsigned>(H) && static_cast<unsigned>(iw) < static_cast<unsigned>(W);
      } else {
        id = padding::source<MODE>(id, D), ih = padding::source<MODE>(ih, H), iw = padding::source<MODE>(iw, W);
        ok = true;
      }
      const long long at = id * st.d + ih * st.h + iw * st.w + ((group0 + gl) * CG + chunk * 8) * st.c;
      const unsigned dst = rows + static_cast<unsigned>((z % G.slots * G.slot_rows + r % G.slot_rows) * kRowBytes);
      if constexpr (NDHWC && PIECE == 8) {
        copy16<T>(dst, ok ? image + at : in, ok, vector);
      } else {
        unsigned w[4] = {0u, 0u, 0u, 0u};
        if (ok && NDHWC && vector8) {  // a group's 4 channels: one 8-byte load
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(image + at));
          w[0] = v.x, w[1] = v.y;
        } else if (ok) {
#pragma unroll
          for (int i = 0; i < PIECE / 2; ++i) {
            w[i] = unsigned(__ldg(&image[at + 2 * i * st.c].bits)) |
                   (unsigned(__ldg(&image[at + (2 * i + 1) * st.c].bits)) << 16);
          }
        }
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]));
      }
    }
    copies_commit();
  };
  stage(0, G.span);
  if (threadIdx.x == 0) {
    const unsigned zero = 0u;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(zero_row), "r"(zero));
  }

  // This warp's group, column blocks and first m16 block (of every WM-th); lane (g, t) of the
  // m16n8k16 fragments.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int gl = warp / G.warps_per_group, in_group = warp % G.warps_per_group;
  const int nb0 = in_group % (NG / NW) * NW, mb0 = in_group / (NG / NW);
  const long long group = group0 + gl, kg = p.k_per_group;
  const long long k_first = group * kg + nb0 * 8;  // the warp's first output channel
  // Whether the group's column nb0 * 8 + c exists (K / groups of 4 fills half a column block).
  auto column = [&](int c) { return nb0 * 8 + c < kg; };

  // B fragments: b[s][j] = (item 2s, channels 2t, 2t + 1) and (item 2s + 1, ...) of column
  // 8j + g, as pairs of the weight's halves; items past the reduction are zeros.
  unsigned bw[G.steps][NW][2];
#pragma unroll
  for (int s = 0; s < G.steps; ++s) {
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      const T* const row = wt + (k_first + 8 * j + g) * (static_cast<long long>(CG) * KVOL);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int item = 2 * s + h, c = item % CHUNKS * 8 + 2 * t;
        unsigned v = 0u;
        if (item < G.items && c < CG && column(8 * j + g)) {
          const int tap = item / CHUNKS;
          const unsigned short lo = __ldg(&row[weight_term(c * KVOL + tap, CG, KVOL, NDHWC)].bits);
          const unsigned short hi = __ldg(&row[weight_term((c + 1) * KVOL + tap, CG, KVOL, NDHWC)].bits);
          v = unsigned(lo) | (unsigned(hi) << 16);
        }
        bw[s][j][h] = v;
      }
    }
  }
  float bias_at[NW][2];
#pragma unroll
  for (int j = 0; j < NW; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      bias_at[j][e] = p.has_bias && column(8 * j + 2 * t + e) ? load_float(bias + k_first + 8 * j + 2 * t + e) : 0.f;
    }
  }

  const bool second = lane >= 16;  // the lane's item of a step: 2s or 2s + 1
  const long long out_plane = static_cast<long long>(OH) * OW;
  // NDHWC: a thread's channels k, k + 1 in one store where `out` is aligned to two outputs (k is
  // even and K a multiple of 8).
  const bool paired = reinterpret_cast<unsigned long long>(out) % (2 * sizeof(Out)) == 0;
  // With an even count of 8-channel pieces a tap, a step's two items are pieces 2c and 2c + 1 of
  // one tap: the second lanes' rows lie one piece further, the same for every step, and each
  // step's address is an immediate from the lane's base (other layers select per step and lane
  // half, which the compiler hoists out of the loop as a register a step).
  constexpr bool PAIRED = CHUNKS % 2 == 0;
  const unsigned group_base =
      rows + static_cast<unsigned>((gl * G.group_rows + (PAIRED && second ? G.in_h * G.in_w : 0)) * kRowBytes);
#pragma unroll 1
  for (int u = 0; u < planes_out; ++u) {
    // This plane's input planes have landed (the stage before), and every warp is done with the
    // previous plane's slots: the next plane's new input planes go into them.
    copies_wait<0>();
    __syncthreads();
    if (u + 1 < planes_out) {
      const int next = (u + 1) * SD;
      stage(max(u * SD + G.span, next), next + G.span);
    }
    // The slot of each of this plane's input planes kd * DD.
    unsigned slot_at[KD];
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) slot_at[kd] = static_cast<unsigned>((u * SD + kd * DD) % G.slots * G.slot_rows * kRowBytes);
    const int od = od0 + u;
#pragma unroll 1
    for (int mb = mb0; mb < G.m_blocks; mb += WM) {
      // The lane's A row: position mb * 16 + l % 16 of the tile (the last one where past it).
      const int m_row = min(mb * 16 + (lane & 15), TH * TW - 1);
      const unsigned base = group_base + static_cast<unsigned>(((m_row / TW) * SH * G.in_w + (m_row % TW) * SW) * kRowBytes);
      float acc[NW][4];
#pragma unroll
      for (int j = 0; j < NW; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
      for (int s = 0; s < G.steps; ++s) {
        const int i0 = 2 * s, i1 = 2 * s + 1;
        const unsigned a0 = base + slot_at[item_kd(i0, CG, KH, KW)] +
                            static_cast<unsigned>(item_row(i0, CG, KH, KW, DH, DW, G.in_h, G.in_w) * kRowBytes);
        unsigned addr;
        if (PAIRED) {
          addr = a0;
        } else if (i1 < G.items) {
          addr = second ? base + slot_at[item_kd(i1, CG, KH, KW)] +
                              static_cast<unsigned>(item_row(i1, CG, KH, KW, DH, DW, G.in_h, G.in_w) * kRowBytes)
                        : a0;
        } else {
          addr = second ? zero_row : a0;
        }
        unsigned a[4];
        ldmatrix_x4(a, addr);
#pragma unroll
        for (int j = 0; j < NW; ++j) mma_half<T>(acc[j], a, bw[s][j]);
      }
      // acc[j][2h + e]: position mb * 16 + g + 8h, channel k_first + 8j + 2t + e.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = mb * 16 + g + 8 * h;
        const int oh = oh0 + m / TW, ow = ow0 + m % TW;
        if (m >= TH * TW || oh >= OH || ow >= OW) continue;
        const long long pos = (static_cast<long long>(od) * OH + oh) * OW + ow;
#pragma unroll
        for (int j = 0; j < NW; ++j) {
          const long long k = k_first + 8 * j + 2 * t;
          if (!column(8 * j + 2 * t)) continue;  // (k + 1 exists with k: K / groups is even)
          if constexpr (NDHWC) {
            const long long at = (n * OD * out_plane + pos) * p.k + k;
            const float r0 = epilogue::residual<Spec, float>(at, true, p);
            const float r1 = epilogue::residual<Spec, float>(at + 1, true, p);
            store_two(out + at, epilogue::apply_read<Spec>(acc[j][2 * h], bias_at[j][0], r0, p),
                      epilogue::apply_read<Spec>(acc[j][2 * h + 1], bias_at[j][1], r1, p), paired, true);
          } else {
            const long long at = (n * p.k + k) * OD * out_plane + pos;
            const float r0 = epilogue::residual<Spec, float>(at, true, p);
            const float r1 = epilogue::residual<Spec, float>(at + OD * out_plane, true, p);
            store_float(out + at, epilogue::apply_read<Spec>(acc[j][2 * h], bias_at[j][0], r0, p));
            store_float(out + at + OD * out_plane, epilogue::apply_read<Spec>(acc[j][2 * h + 1], bias_at[j][1], r1, p));
          }
        }
      }
    }
  }
}

}  // namespace conv3djit
