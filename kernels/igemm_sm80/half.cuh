// igemm_sm80 for bf16 and fp16 inputs (Spec::element), in NCDHW and NDHWC (Spec::ndhwc), with
// output and residual in the input type or float32 (Spec::out_element): one
// mma.sync.m16n8k16.f32.{bf16,f16} product per 16 reduction terms, summed in float32. The half
// operands are exact, so nothing is split as 3xTF32 splits floats.
//
// GEMM view as in the float32 kernel: rows M = N * OD * OH * OW output positions, columns = K
// output channels, BM x BN a block, (BM/32) x (BN/32) warps of 32 x 32 (2 m16 x 4 n8 fragments),
// the reduction of CG * KD * KH * KW terms packed densely (C = 3 with 3 x 5 x 7 taps: 315 terms
// in 10 slices of 32, nothing padded per channel).
//
// Reduction order: the weight's memory order in each layout, so that B is read as stored.
// - NCDHW: (c, kd, kh, kw), kw fastest. A thread gathers one output position's terms through the
//   offset table; neighbouring threads take neighbouring output positions, whose elements lie
//   next to each other along W (coalesced 2-byte loads).
// - NDHWC: (kd, kh, kw, c), c fastest: a tap's CG channels are contiguous in memory. With CG a
//   multiple of 8 and a 16-byte aligned input, each group of 8 terms a thread stages is one
//   16-byte load (one table entry and one bounds check for 8 terms); otherwise (C = 3, 5, an
//   input view off a 16-byte boundary) the terms are gathered one by one as for NCDHW.
//
// Staging: slices of BK = 32 terms, double-buffered through registers (the next slice's loads are
// in flight during this one's mma). Shared memory holds A as [BM][20 words] and B as [BN][20
// words]: a row's 32 halves as 16 words of consecutive pairs (k, k+1), the pair a register of the
// m16n8k16 fragments holds, plus 4 words of padding. A thread stores 8 consecutive terms as one
// 16-byte word quad; 8 rows 80 bytes apart cover all 32 banks, so the stores and the ldmatrix.x4
// fragment reads (8 rows of 16 bytes a phase) are free of bank conflicts.
//
// Accuracy: the tensor cores' float32 accumulation truncates, so a long chain of mma into one
// accumulator drifts. A chain here is at most 16 slices (32 mma, 512 terms): every 16 slices the
// accumulators join a separate total with a round-to-nearest FADD and start again from zero, so
// fp32 outputs of long reductions (C * KD * KH * KW >= 10000) stay within 1e-5 of float64. (The
// float32 kernel also restarts every slice, which the fp32 class's 1e-6 needs; here that cost 32
// registers and 32 FADDs a slice for nothing the half classes can see.)
#pragma once
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/mma_sync.cuh"
#include "common/padding.cuh"
#include "igemm_sm80/geometry.cuh"
#include "igemm_sm80/warp_tile.cuh"

namespace conv3djit {

// The 16 bits of the element at p (read-only path).
template <class T>
__device__ __forceinline__ unsigned half_bits(const T* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}

template <class Spec>
__device__ __forceinline__ void igemm_sm80_half(const typename Spec::element* __restrict__ in,
                                                const typename Spec::element* __restrict__ wt,
                                                const typename Spec::element* __restrict__ bias,
                                                typename Spec::out_element* __restrict__ out, const ConvParams& p) {
  using T = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, BM = Spec::bm, BN = Spec::bn;
  constexpr bool NDHWC = Spec::ndhwc != 0;
  constexpr int KVOL = KD * KH * KW, KRED = CG * KVOL, BK = igemm_half::kSlice;
  constexpr int PITCH = igemm_half::kRowWords;       // 32-bit words a shared row
  constexpr int WARPS_N = BN / 32, THREADS = BM * BN / 32;
  constexpr int A_GROUPS = BM * (BK / 8) / THREADS;  // 8-term groups a thread stages per slice
  constexpr int B_GROUPS = BN * (BK / 8) / THREADS;
  constexpr int KTILES = (KRED + BK - 1) / BK, CHUNK_TILES = 16;
  constexpr bool BLOCKED = KTILES > CHUNK_TILES;
  constexpr int TABLE = KTILES * BK;
  constexpr bool VECTOR_A = NDHWC && CG % 8 == 0;    // a group is 8 channels of one tap
  constexpr int MODE = Spec::pad_mode;
  static_assert(A_GROUPS >= 1 && B_GROUPS >= 1, "BM and BN of 32, 64 or 128");

  extern __shared__ uint4 shared_half[];
  auto& As = *reinterpret_cast<unsigned (*)[2][BM][PITCH]>(shared_half);
  auto& Bs = *reinterpret_cast<unsigned (*)[2][BN][PITCH]>(reinterpret_cast<unsigned*>(shared_half) +
                                                             2 * BM * PITCH);
  int2* tap_table = reinterpret_cast<int2*>(reinterpret_cast<unsigned*>(shared_half) + 2 * (BM + BN) * PITCH);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const long long n_tiles = (p.k + BN - 1) / BN;
  const long long m0 = (blockIdx.x / n_tiles) * BM;
  const long long k0 = (blockIdx.x % n_tiles) * BN;
  const long long out_vol = p.od * p.oh * p.ow;
  const long long m_total = p.n * out_vol;
  const int H = static_cast<int>(p.h), W = static_cast<int>(p.w);
  // Element strides inside one image (the planner keeps an image below 2^31 elements).
  const int in_vol = static_cast<int>(p.d) * H * W;
  const int s_c = NDHWC ? 1 : in_vol;
  const int s_d = NDHWC ? H * W * static_cast<int>(p.c) : H * W;
  const int s_h = NDHWC ? W * static_cast<int>(p.c) : W;
  const int s_w = NDHWC ? static_cast<int>(p.c) : 1;

  // Term r's offset inside one image and its (kd*DD, kh*DH, kw*DW) displacements, 10 bits each;
  // past the end: a displacement that fails every bounds check.
  for (int r = tid; r < TABLE; r += THREADS) {
    const int c = NDHWC ? r % CG : r / KVOL, tap = NDHWC ? r / CG : r % KVOL;
    const int dz = tap / (KH * KW) * DD, dy = tap / KW % KH * DH, dx = tap % KW * DW;
    tap_table[r] = r < KRED ? make_int2(c * s_c + dz * s_d + dy * s_h + dx * s_w, dz | (dy << 10) | (dx << 20))
                            : make_int2(0, 1023 | (1023 << 10) | (1023 << 20));
  }

  // This thread's A row (output position) and B row (output channel) are fixed.
  const int a_m = tid % BM, a_q = tid / BM;  // group a_q + j * (THREADS / BM) of the slice
  const int b_n = tid % BN, b_q = tid / BN;
  const long long m = m0 + a_m;
  const bool m_ok = m < m_total;
  int id0 = -(1 << 20), ih0 = 0, iw0 = 0;  // out-of-range m: every tap fails
  const T* image = in;
  const T* in_m = in;  // the element at (id0, ih0, iw0), read where a tap is in bounds
  if (m_ok) {
    long long n = m;
    const long long s = take_remainder(n, out_vol);
    id0 = static_cast<int>(s / (p.oh * p.ow)) * SD - p.pad_d;
    ih0 = static_cast<int>(s / p.ow % p.oh) * SH - p.pad_h;
    iw0 = static_cast<int>(s % p.ow) * SW - p.pad_w;
    image = in + n * p.c * static_cast<long long>(in_vol);
    in_m = image + (id0 * s_d + ih0 * s_h + iw0 * s_w);
  }
  const long long b_k = k0 + b_n;
  const T* w_row = wt + (b_k < p.k ? b_k : 0) * static_cast<long long>(KRED);
  // 16-byte loads need 16-byte aligned tensors; a view off such a boundary takes the 2-byte path.
  const bool a_vector = VECTOR_A && (reinterpret_cast<unsigned long long>(in) & 15) == 0;
  const bool b_vector = KRED % 8 == 0 && (reinterpret_cast<unsigned long long>(wt) & 15) == 0;
  __syncthreads();  // the table is ready

  // The input element of term r (table entry e) for this thread's position, as 16 bits.
  auto a_element = [&](int r, int2 e) -> unsigned {
    const int dz = e.y & 1023, dy = (e.y >> 10) & 1023, dx = e.y >> 20;
    const int id = id0 + dz, ih = ih0 + dy, iw = iw0 + dx;
    if constexpr (MODE == padding::kZeros) {
      const bool ok = static_cast<unsigned>(id) < static_cast<unsigned>(p.d) &&
                      static_cast<unsigned>(ih) < static_cast<unsigned>(H) &&
                      static_cast<unsigned>(iw) < static_cast<unsigned>(W);
      return ok ? half_bits(in_m + e.x) : 0u;
    } else {  // every position reads: the term's channel at the mapped (id, ih, iw)
      const int channel = e.x - (dz * s_d + dy * s_h + dx * s_w);
      const int at = channel + padding::source<MODE>(id, static_cast<int>(p.d)) * s_d +
                     padding::source<MODE>(ih, H) * s_h + padding::source<MODE>(iw, W) * s_w;
      return m_ok && r < KRED ? half_bits(image + at) : 0u;
    }
  };

  uint4 a_reg[A_GROUPS], b_reg[B_GROUPS];
  auto load_global = [&](int kt) {
#pragma unroll
    for (int j = 0; j < A_GROUPS; ++j) {
      const int r0 = kt * BK + (a_q + j * (THREADS / BM)) * 8;
      if (VECTOR_A && a_vector) {  // 8 channels of one tap (CG % 8 == 0): one 16-byte load
        const int2 e = tap_table[r0];
        const int dz = e.y & 1023, dy = (e.y >> 10) & 1023, dx = e.y >> 20;
        const int id = id0 + dz, ih = ih0 + dy, iw = iw0 + dx;
        uint4 v = make_uint4(0, 0, 0, 0);
        if constexpr (MODE == padding::kZeros) {
          const bool ok = static_cast<unsigned>(id) < static_cast<unsigned>(p.d) &&
                          static_cast<unsigned>(ih) < static_cast<unsigned>(H) &&
                          static_cast<unsigned>(iw) < static_cast<unsigned>(W);
          if (ok) v = __ldg(reinterpret_cast<const uint4*>(in_m + e.x));
        } else {
          const int channel = e.x - (dz * s_d + dy * s_h + dx * s_w);
          const int at = channel + padding::source<MODE>(id, static_cast<int>(p.d)) * s_d +
                         padding::source<MODE>(ih, H) * s_h + padding::source<MODE>(iw, W) * s_w;
          if (m_ok && r0 < KRED) v = __ldg(reinterpret_cast<const uint4*>(image + at));
        }
        a_reg[j] = v;
      } else {
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = r0 + 2 * i;
          const unsigned lo = a_element(r, tap_table[r]), hi = a_element(r + 1, tap_table[r + 1]);
          w[i] = lo | (hi << 16);
        }
        a_reg[j] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < B_GROUPS; ++j) {
      const int r0 = kt * BK + (b_q + j * (THREADS / BN)) * 8;
      const bool n_ok = b_k < p.k;
      if (b_vector) {
        b_reg[j] = n_ok && r0 < KRED ? __ldg(reinterpret_cast<const uint4*>(w_row + r0)) : make_uint4(0, 0, 0, 0);
      } else {
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = r0 + 2 * i;
          const unsigned lo = n_ok && r < KRED ? half_bits(w_row + r) : 0u;
          const unsigned hi = n_ok && r + 1 < KRED ? half_bits(w_row + r + 1) : 0u;
          w[i] = lo | (hi << 16);
        }
        b_reg[j] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  };
  auto store_shared = [&](int buf) {
#pragma unroll
    for (int j = 0; j < A_GROUPS; ++j)
      *reinterpret_cast<uint4*>(&As[buf][a_m][(a_q + j * (THREADS / BM)) * 4]) = a_reg[j];
#pragma unroll
    for (int j = 0; j < B_GROUPS; ++j)
      *reinterpret_cast<uint4*>(&Bs[buf][b_n][(b_q + j * (THREADS / BN)) * 4]) = b_reg[j];
  };

  WarpTile sum, total;  // total: only with blocked summation (otherwise optimised away)
  zero(sum);
  zero(total);

  // ldmatrix rows: A's lane l reads row l % 16 of an m16 fragment at k half l / 16; B's lane l
  // reads channel l % 8 (+8 for l >= 16) at k half (l / 8) % 2: two n8 fragments an x4.
  const int a_row = wm * 32 + (lane & 15), a_col = (lane >> 4) * 4;
  const int b_row = wn * 32 + (lane & 7) + ((lane >> 4) << 3), b_col = ((lane >> 3) & 1) * 4;

  load_global(0);
  store_shared(0);
  __syncthreads();
#pragma unroll 1
  for (int kt = 0; kt < KTILES; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < KTILES) load_global(kt + 1);  // in flight during the multiplies below
#pragma unroll
    for (int ks = 0; ks < BK / 2; ks += 8) {  // words: 8 a k16 step
      unsigned a[2][4], b[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) ldmatrix_x4(a[i], &As[buf][a_row + i * 16][ks + a_col]);
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        unsigned r[4];
        ldmatrix_x4(r, &Bs[buf][b_row + jj * 16][ks + b_col]);
        b[2 * jj][0] = r[0], b[2 * jj][1] = r[1], b[2 * jj + 1][0] = r[2], b[2 * jj + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_half<T>(sum[i][j], a[i], b[j]);
    }
    if (kt + 1 < KTILES) store_shared(buf ^ 1);
    __syncthreads();
    if constexpr (BLOCKED) {
      if ((kt + 1) % CHUNK_TILES == 0 || kt + 1 == KTILES) add_into(total, sum, true);
    }
  }

  // Accumulator (i, j, e) holds row wm*32 + i*16 + g (+8 for e >= 2), channel wn*32 + j*8 + 2t (+1).
  float bias_v[4][2];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const long long k = k0 + wn * 32 + j * 8 + 2 * t + e;
      bias_v[j][e] = p.has_bias && k < p.k ? load_float(bias + k) : 0.f;
    }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const long long mm = m0 + wm * 32 + i * 16 + g + half * 8;
      if (mm >= m_total) continue;
      long long n = mm, s = mm;
      if constexpr (!NDHWC) s = take_remainder(n, out_vol);  // 32-bit division where it fits
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const long long k = k0 + wn * 32 + j * 8 + 2 * t + e;
          if (k >= p.k) continue;
          float v;
          if constexpr (BLOCKED) v = total[i][j][half * 2 + e];
          else v = sum[i][j][half * 2 + e];
          const long long at = NDHWC ? mm * p.k + k : (n * p.k + k) * out_vol + s;
          out[at] = from_float<Out>(epilogue::apply<Spec>(v, bias_v[j][e], at, p));
        }
    }
}

}  // namespace conv3djit
