// Implicit-GEMM convolution on tensor cores (mma.sync m16n8k8 TF32, sm_80+), groups == 1.
//
// GEMM view: rows M = N * OD * OH * OW output positions, columns = K output channels, reduction
// = CG * KD * KH * KW. A block computes a BM x BN tile with (BM/32) x (BN/32) warps of 32 x 32;
// the reduction advances BK = 16 at a time through double-buffered shared memory: A is gathered
// straight from the input (im2col with the kernel's compile-time offsets, zero where padding
// or past the reduction's end, so C = 3 packs densely: 315 terms take 20 slices of 16), B is the
// weight matrix as stored. The next slice's global loads are in flight while this one is
// multiplied.
//
// SPLIT = 1 (fp32 class): 3xTF32. Each operand x = big + small with big = tf32(x) and
// small = tf32(x - big); the accumulator takes small*big, then big*small, then big*big, the small
// terms first and into the same accumulator (adding them separately loses their benefit).
// SPLIT = 0 (tf32 class): one TF32 product.
// Blocked summation: every 32 slices (512 terms) the partial sums join a separate total, which
// keeps long reductions inside the fp32 class.
#pragma once
#include "common.cuh"

namespace conv3djit {

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int CG, int KD, int KH, int KW, int SD, int SH, int SW, int DD, int DH, int DW, int BM, int BN,
          int SPLIT>
__global__ void __launch_bounds__(BM * BN / 32)
igemm_tf32(const float* __restrict__ in, const float* __restrict__ wt, const float* __restrict__ bias,
           float* __restrict__ out, ConvParams p) {
  constexpr int KVOL = KD * KH * KW, KRED = CG * KVOL, BK = 16;
  constexpr int WARPS_N = BN / 32, THREADS = BM * BN / 32;
  constexpr int A_ROWS = THREADS / BM;                 // reduction rows one pass of threads covers
  constexpr int A_PER = BK / A_ROWS, B_PER = BK * BN / THREADS;
  constexpr int KTILES = (KRED + BK - 1) / BK, CHUNK_TILES = 32;
  constexpr bool BLOCKED = KTILES > CHUNK_TILES;
  __shared__ float As[2][BK][BM + 8];                  // +8: fragment reads hit 32 distinct banks
  __shared__ float Bs[2][BK][BN + 8];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const long long n_tiles = (p.k + BN - 1) / BN;
  const long long m0 = (blockIdx.x / n_tiles) * BM;
  const long long k0 = (blockIdx.x % n_tiles) * BN;
  const long long out_vol = p.od * p.oh * p.ow;
  const long long m_total = p.n * out_vol;
  const long long in_plane = p.h * p.w, in_vol = p.d * in_plane;

  // This thread's A row (output position) is fixed for the whole reduction.
  const int a_m = tid % BM, a_k = tid / BM;
  const long long m = m0 + a_m;
  const bool m_ok = m < m_total;
  long long id0 = 0, ih0 = 0, iw0 = 0;
  const float* in_n = in;
  if (m_ok) {
    const long long n = m / out_vol, s = m % out_vol;
    id0 = s / (p.oh * p.ow) * SD - p.pad_d;
    ih0 = s / p.ow % p.oh * SH - p.pad_h;
    iw0 = s % p.ow * SW - p.pad_w;
    in_n = in + n * p.c * in_vol;
  }
  const int b_k = tid % BK, b_n = tid / BK;

  float a_reg[A_PER], b_reg[B_PER];
  auto load_global = [&](int kt) {
#pragma unroll
    for (int j = 0; j < A_PER; ++j) {
      const int r = kt * BK + a_k + j * A_ROWS;        // reduction index: (c, kd, kh, kw)
      const int c = r / KVOL, tap = r % KVOL;
      const long long id = id0 + tap / (KH * KW) * DD;
      const long long ih = ih0 + tap / KW % KH * DH;
      const long long iw = iw0 + tap % KW * DW;
      const bool ok = m_ok && r < KRED && id >= 0 && id < p.d && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
      a_reg[j] = ok ? __ldg(in_n + c * in_vol + id * in_plane + ih * p.w + iw) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < B_PER; ++j) {
      const int r = kt * BK + b_k;
      const long long k = k0 + b_n + j * (THREADS / BK);
      b_reg[j] = (r < KRED && k < p.k) ? __ldg(wt + k * KRED + r) : 0.f;
    }
  };
  auto store_shared = [&](int buf) {
#pragma unroll
    for (int j = 0; j < A_PER; ++j) As[buf][a_k + j * A_ROWS][a_m] = a_reg[j];
#pragma unroll
    for (int j = 0; j < B_PER; ++j) Bs[buf][b_k][b_n + j * (THREADS / BK)] = b_reg[j];
  };

  float acc[2][4][4], total[BLOCKED ? 2 : 1][BLOCKED ? 4 : 1][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  if constexpr (BLOCKED) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) total[i][j][e] = 0.f;
  }

  load_global(0);
  store_shared(0);
  __syncthreads();
#pragma unroll 1
  for (int kt = 0; kt < KTILES; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < KTILES) load_global(kt + 1);          // in flight during the multiplies below
#pragma unroll
    for (int ks = 0; ks < BK; ks += 8) {
      unsigned a_big[2][4], a_small[2][4], b_big[4][2], b_small[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = wm * 32 + i * 16 + g;
        const float x[4] = {As[buf][ks + t][row], As[buf][ks + t][row + 8], As[buf][ks + t + 4][row],
                            As[buf][ks + t + 4][row + 8]};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          a_big[i][e] = to_tf32(x[e]);
          if (SPLIT) a_small[i][e] = to_tf32(x[e] - __uint_as_float(a_big[i][e]));
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = wn * 32 + j * 8 + g;
        const float y[2] = {Bs[buf][ks + t][col], Bs[buf][ks + t + 4][col]};
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          b_big[j][e] = to_tf32(y[e]);
          if (SPLIT) b_small[j][e] = to_tf32(y[e] - __uint_as_float(b_big[j][e]));
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (SPLIT) {
            mma_tf32(acc[i][j], a_small[i], b_big[j]);
            mma_tf32(acc[i][j], a_big[i], b_small[j]);
          }
          mma_tf32(acc[i][j], a_big[i], b_big[j]);
        }
    }
    if (kt + 1 < KTILES) store_shared(buf ^ 1);
    __syncthreads();
    if constexpr (BLOCKED) {
      if ((kt + 1) % CHUNK_TILES == 0 || kt + 1 == KTILES) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              total[i][j][e] += acc[i][j][e];
              acc[i][j][e] = 0.f;
            }
      }
    }
  }

  // Accumulator (i, j, e) holds row wm*32 + i*16 + g (+8 for e >= 2), channel wn*32 + j*8 + 2t (+1).
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const long long mm = m0 + wm * 32 + i * 16 + g + half * 8;
      if (mm >= m_total) continue;
      const long long n = mm / out_vol, s = mm % out_vol;
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const long long k = k0 + wn * 32 + j * 8 + 2 * t + e;
          if (k >= p.k) continue;
          float v;
          if constexpr (BLOCKED) v = total[i][j][half * 2 + e];
          else v = acc[i][j][half * 2 + e];
          out[(n * p.k + k) * out_vol + s] = v + (p.has_bias ? __ldg(bias + k) : 0.f);
        }
    }
}

}  // namespace conv3djit
