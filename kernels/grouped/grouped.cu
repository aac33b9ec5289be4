// Direct convolution for grouped and depthwise problems (groups > 1), FFMA in fp32 on float32,
// bf16 or fp16 tensors (NCDHW; half outputs in the input type or float32). These do little
// arithmetic per byte, so the kernel is built to stream. A block computes KB output channels of
// one group (they share its input) for a BH x BW tile of up to ODB consecutive output planes,
// walking the planes in order: the input planes flow through a ring of shared-memory slots
// (cp.async, zero-filled for padding), each copied once and read by every output plane that
// needs it, with the planes of the next PF output planes in flight while this one is computed.
// A thread owns TH rows x TW consecutive columns, so one input row it reads serves TW x KW terms
// of up to TH rows; its stores go straight from registers (4 outputs a store when the rows
// allow). The ring and the weights hold floats: half inputs are converted as they are staged, by
// loads and shared stores (cp.async moves 4 bytes at least and cannot convert).
// NDHWC (Spec::ndhwc): the ring is the same; the copies read each column's channel C apart, the
// weights are read in their (kd, kh, kw, c) order, and each output leaves on its own, a thread's
// KB channels of a position side by side. Blocks then take the channel blocks first, so that
// those running together read the same 32-byte pieces of the input (a piece holds 8 channels).
#pragma once
#include "common/async_copy.cuh"
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/padding.cuh"
#include "grouped/geometry.cuh"

namespace conv3djit {
namespace grouped_store {

// Four consecutive outputs at dst (aligned to four), streaming.
__device__ __forceinline__ void four(float* dst, float a, float b, float c, float d) {
  __stcs(reinterpret_cast<float4*>(dst), make_float4(a, b, c, d));
}
template <class H>
__device__ __forceinline__ void four(H* dst, float a, float b, float c, float d) {
  __stcs(reinterpret_cast<uint2*>(dst), make_uint2(pack_pair<H>(a, b), pack_pair<H>(c, d)));
}
__device__ __forceinline__ void one(float* dst, float v) { __stcs(dst, v); }
template <class H>
__device__ __forceinline__ void one(H* dst, float v) { *dst = from_float<H>(v); }

}  // namespace grouped_store

template <class Spec>
__global__ void __launch_bounds__(Spec::bh / Spec::th * (Spec::bw / Spec::tw),
                                  CONV3DJIT_BLOCKS_AN_SM(grouped_geometry_of<Spec>().min_blocks))
grouped(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
        const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out, ConvParams p) {
  using T = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr bool NDHWC = Spec::ndhwc != 0;
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, BH = Spec::bh, BW = Spec::bw;
  constexpr int TH = Spec::th, TW = Spec::tw, ODB = Spec::odb, KB = Spec::kb, PF = Spec::pf;
  constexpr GroupedGeometry G =
      grouped_geometry(CG, KD, KH, KW, SD, SH, SW, DD, DH, DW, BH, BW, TH, TW, KB, PF, Spec::ndhwc != 0);
  extern __shared__ __align__(16) float ring[];
  __shared__ float w_s[G.weight_floats];

  // The planner keeps every extent below 2^31. Block order: W tiles, H tiles, plane runs,
  // channel blocks, images, so that blocks sharing halo rows run together (NDHWC: channel
  // blocks first, above).
  const int D = static_cast<int>(p.d), H = static_cast<int>(p.h), W = static_cast<int>(p.w);
  const int OD = static_cast<int>(p.od), OH = static_cast<int>(p.oh), OW = static_cast<int>(p.ow);
  int b = static_cast<int>(blockIdx.x);
  const int tiles_w = (OW + BW - 1) / BW, tiles_h = (OH + BH - 1) / BH, runs = (OD + ODB - 1) / ODB;
  const int k_blocks = static_cast<int>(p.k / KB);  // KB divides the channels per group
  const int first_k = NDHWC ? b % k_blocks : 0;
  if constexpr (NDHWC) b /= k_blocks;
  const int ow0 = b % tiles_w * BW; b /= tiles_w;
  const int oh0 = b % tiles_h * BH; b /= tiles_h;
  const int od0 = b % runs * ODB;   b /= runs;
  const long long k0 = static_cast<long long>(NDHWC ? first_k : b % k_blocks) * KB;
  const long long n = NDHWC ? b : b / k_blocks;
  const long long g = k0 / p.k_per_group;

  // Depthwise weights (one channel's few taps) live in registers; others in shared memory.
  constexpr bool W_REGS = CG == 1 && G.weight_floats <= 32;
  float w_r[W_REGS ? G.weight_floats : 1];
  if constexpr (W_REGS) {
#pragma unroll
    for (int i = 0; i < G.weight_floats; ++i) w_r[i] = load_float(wt + k0 * G.kvol + i);
  } else {
    // Element i = (j, c, tap) of the shared weights: channel j's row, term c * KVOL + tap of it.
    constexpr int ROW = CG * G.kvol;
    auto at = [](int i) { return NDHWC ? i / ROW * ROW + weight_term(i % ROW, CG, G.kvol, true) : i; };
    for (int i = threadIdx.x; i < G.weight_floats; i += G.threads) w_s[i] = load_float(wt + k0 * ROW + at(i));
  }
  float bk[KB];
#pragma unroll
  for (int j = 0; j < KB; ++j) bk[j] = p.has_bias ? load_float(bias + k0 + j) : 0.f;

  const int id0 = od0 * SD - p.pad_d, ih0 = oh0 * SH - p.pad_h, iw0 = ow0 * SW - p.pad_w;
  constexpr int MODE = Spec::pad_mode;
  // The group's first channel; NDHWC: its positions p.c apart.
  const T* in_g = NDHWC ? in + n * (static_cast<long long>(D) * H * W) * p.c + g * CG
                        : in + (n * p.c + g * CG) * (static_cast<long long>(D) * H * W);
  // This thread's first output column of channel k0, plane od0 (NCDHW); channel j, plane s, row t
  // lie (j * OD + s) * OH + t rows further.
  Out* out_t = out + (((n * p.k + k0) * OD + od0) * OH + oh0) * OW + ow0;
  const int steps = min(ODB, OD - od0);
  const int planes = (steps - 1) * SD + G.span;  // input planes of this run
  // Copies the input planes that output plane u adds to the run (all of its span for the first)
  // into their ring slots, zero-filled outside the input: each row by a group of LANES threads
  // (a warp, or the whole block when it is smaller), so the index arithmetic is per row.
  constexpr int LANES = G.threads < 32 ? G.threads : 32, GROUPS = G.threads / LANES;
  const int lane = threadIdx.x % LANES, group = threadIdx.x / LANES;
  auto load = [&](int u) {
    const int last = min(G.span + u * SD, planes);
    for (int q = u == 0 ? 0 : G.span + (u - 1) * SD; q < last; ++q) {
      const int id = padding::source<MODE>(id0 + q, D);
      float* slot = ring + q % G.slots * G.plane_floats;
      if (group >= GROUPS) continue;  // the threads of a partial last warp
      for (int cr = group; cr < CG * G.in_h; cr += GROUPS) {
        const int c = cr / G.in_h, row = cr % G.in_h, ih = padding::source<MODE>(ih0 + row, H);
        const bool row_in = id >= 0 && ih >= 0;
        const T* src = NDHWC ? in_g + (static_cast<long long>(id) * H + ih) * W * p.c + c
                             : in_g + (static_cast<long long>(c * D + id) * H + ih) * W;
        float* dst = slot + (c * G.in_h + row) * G.pitch;
        for (int col = lane; col < G.in_w; col += LANES) {
          const int iw = padding::source<MODE>(iw0 + col, W);
          const bool ok = row_in && iw >= 0;
          const long long at = NDHWC ? iw * p.c : iw;
          if constexpr (sizeof(T) == 4) {
            copy_or_zero(dst + col, ok ? src + at : in, ok);
          } else {
            dst[col] = ok ? load_float(src + at) : 0.f;
          }
        }
      }
    }
  };

  const int rg = threadIdx.x / G.segs, seg = threadIdx.x % G.segs;
  const int ow = ow0 + seg * TW;
  out_t += static_cast<long long>(rg * TH) * OW + seg * TW;
  const bool vec_out = !NDHWC && TW % 4 == 0 && OW % 4 == 0 &&
                       (reinterpret_cast<unsigned long long>(out) % (4 * sizeof(Out))) == 0;
  // Iteration u loads output plane u's new input planes and computes plane s = u - PF, whose
  // inputs landed while the PF before it were computed.
#pragma unroll 1
  for (int u = 0; u < steps + PF; ++u) {
    const int s = u - PF;
    if (s >= 0) {
      copies_wait<PF - 1>();  // plane s's inputs have landed (later planes' may still fly) ...
      __syncthreads();   // ... for every thread, and every thread is done with plane s - 1
    }
    load(u);  // into the slots only plane s - 1 read
    copies_commit();
    if (s < 0) continue;

    // Per-channel partial sums, added into the total: blocked summation keeps long group
    // reductions (CG x KVOL terms) within the fp32 class.
    float total[KB][TH][TW] = {};
    const int first_slot = s * SD % G.slots;
#pragma unroll 1
    for (int c = 0; c < CG; ++c) {
      float acc[KB][TH][TW] = {};
#pragma unroll G.depth_unroll
      for (int kd = 0; kd < KD; ++kd) {
        int slot = first_slot + kd * DD;
        if (slot >= G.slots) slot -= G.slots;
        const float* src = ring + slot * G.plane_floats + (c * G.in_h + rg * TH * SH) * G.pitch + seg * TW * SW;
#pragma unroll G.rows_unroll
        for (int r = 0; r < G.rows; ++r) {
          float xin[G.nxv];
          if constexpr (G.vec) {
#pragma unroll
            for (int v = 0; v < G.nxv / 4; ++v) {
              const float4 q = *reinterpret_cast<const float4*>(src + r * G.pitch + 4 * v);
              xin[4 * v] = q.x; xin[4 * v + 1] = q.y; xin[4 * v + 2] = q.z; xin[4 * v + 3] = q.w;
            }
          } else {
#pragma unroll
            for (int i = 0; i < G.nxv; ++i) xin[i] = src[r * G.pitch + i];
          }
          // Input row r serves output row t through kernel row kh when t * SH + kh * DH == r.
#pragma unroll
          for (int t = 0; t < TH; ++t) {
            const int dr = r - t * SH;
            if (dr < 0 || dr % DH != 0 || dr / DH >= KH) continue;
            const int w0 = (c * KD + kd) * KH * KW + dr / DH * KW;
#pragma unroll
            for (int kw = 0; kw < KW; ++kw)
#pragma unroll
              for (int j = 0; j < KB; ++j) {
                const int wi = w0 + j * CG * G.kvol + kw;
                const float wv = W_REGS ? w_r[W_REGS ? wi : 0] : w_s[wi];
#pragma unroll
                for (int x = 0; x < TW; ++x) acc[j][t][x] = fmaf(wv, xin[x * SW + kw * DW], acc[j][t][x]);
              }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < KB; ++j)
#pragma unroll
        for (int t = 0; t < TH; ++t)
#pragma unroll
          for (int x = 0; x < TW; ++x) total[j][t][x] += acc[j][t][x];
    }

    if constexpr (NDHWC) {  // position by position, the thread's KB channels side by side
#pragma unroll
      for (int t = 0; t < TH; ++t) {
        const int oh = oh0 + rg * TH + t;
        if (oh >= OH) continue;
        const long long row = (((n * OD + od0 + s) * OH + oh) * OW + ow) * p.k + k0;
#pragma unroll
        for (int x = 0; x < TW; ++x) {
          if (ow + x >= OW) continue;
#pragma unroll
          for (int j = 0; j < KB; ++j) {
            const long long at = row + x * p.k + j;
            grouped_store::one(out + at, epilogue::apply<Spec>(total[j][t][x], bk[j], at, p));
          }
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < KB; ++j)
#pragma unroll
        for (int t = 0; t < TH; ++t) {
          const int oh = oh0 + rg * TH + t;
          if (oh >= OH) continue;
          Out* dst = out_t + (static_cast<long long>(j * OD + s) * OH + t) * OW;
          const long long at = dst - out;
          auto result = [&](int x) { return epilogue::apply<Spec>(total[j][t][x], bk[j], at + x, p); };
          if (vec_out && ow + TW <= OW) {
#pragma unroll
            for (int v = 0; v < TW / 4; ++v) {
              grouped_store::four(dst + 4 * v, result(4 * v), result(4 * v + 1), result(4 * v + 2), result(4 * v + 3));
            }
          } else {
#pragma unroll
            for (int x = 0; x < TW; ++x) {
              if (ow + x < OW) grouped_store::one(dst + x, result(x));
            }
          }
        }
    }
  }
}

}  // namespace conv3djit
