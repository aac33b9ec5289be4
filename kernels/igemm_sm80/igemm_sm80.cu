// Implicit-GEMM convolution on tensor cores (mma.sync m16n8k8 TF32, sm_80+), groups == 1.
//
// GEMM view: rows M = N * OD * OH * OW output positions, columns = K output channels, reduction
// = CG * KD * KH * KW. A block computes a BM x BN tile with (BM/32) x (BN/32) warps of 32 x 32;
// the reduction advances BK = 16 at a time through double-buffered shared memory: A is gathered
// straight from the input (im2col), zero where padding or past the reduction's end, so C = 3
// packs densely (315 terms take 20 slices of 16); B is the weight matrix as stored. The next
// slice's global loads are in flight while this one is multiplied. The gather's per-term offsets
// (c, kd, kh, kw) come from a table built once per block, not from divisions per element.
//
// SPLIT = 1 (fp32 class): 3xTF32. Each operand x = big + small with big = tf32(x) and
// small = tf32(x - big), split once when the slice is stored to shared memory; the mma takes
// small*big, then big*small, then big*big, the small terms first and into the same accumulator.
// SPLIT = 0 (tf32 class): one TF32 product.
// Accuracy: tensor cores accumulate with truncation, so a long chain of mma into one accumulator
// drifts; each slice's mma chain starts from zero and is added to the running sum with a
// round-to-nearest FADD, and every 32 slices (512 terms) that sum joins a separate total.
//
// bf16 and fp16 inputs (either layout, output in the input type or float32) take the kernel in
// igemm_sm80/half.cuh: m16n8k16 products of the exact half operands.
#pragma once
#include "common/epilogue.cuh"
#include "common/padding.cuh"
#include "common/tf32.cuh"
#include "igemm_sm80/geometry.cuh"
#include "igemm_sm80/half.cuh"
#include "igemm_sm80/warp_tile.cuh"

namespace conv3djit {

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <class Spec>
__global__ void __launch_bounds__(Spec::bm * Spec::bn / 32)
igemm_sm80(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
           const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out, ConvParams p) {
  if constexpr (sizeof(typename Spec::element) == 2) {
    igemm_sm80_half<Spec>(in, wt, bias, out, p);
  } else {
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, BM = Spec::bm, BN = Spec::bn;
  constexpr int SPLIT = Spec::fp32_class;
  constexpr int KVOL = KD * KH * KW, KRED = CG * KVOL, BK = 16;
  constexpr int WARPS_N = BN / 32, THREADS = BM * BN / 32;
  constexpr int A_ROWS = THREADS / BM;                 // reduction rows one pass of threads covers
  constexpr int A_PER = BK / A_ROWS, B_PER = BK * BN / THREADS;
  constexpr int KTILES = (KRED + BK - 1) / BK, CHUNK_TILES = 32;
  constexpr bool BLOCKED = KTILES > CHUNK_TILES;
  constexpr int PARTS = SPLIT ? 2 : 1;                 // big (and small) halves of each operand
  constexpr int TABLE = KTILES * BK;                   // gather offsets, padded to whole slices
  // Dynamic shared memory (igemm_shared_bytes() sizes it): A and B slices [buffer][part][k][m or n] (+8 so that fragment reads
  // hit 32 distinct banks), then the gather table (per reduction index: offset, packed taps).
  extern __shared__ float4 shared4[];
  auto& As = *reinterpret_cast<float (*)[2][PARTS][BK][BM + 8]>(shared4);
  auto& Bs = *reinterpret_cast<float (*)[2][PARTS][BK][BN + 8]>(reinterpret_cast<float*>(shared4) +
                                                                   2 * PARTS * BK * (BM + 8));
  int2* tap_table = reinterpret_cast<int2*>(reinterpret_cast<float*>(shared4) + 2 * PARTS * BK * (BM + BN + 16));

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const long long n_tiles = (p.k + BN - 1) / BN;
  const long long m0 = (blockIdx.x / n_tiles) * BM;
  const long long k0 = (blockIdx.x % n_tiles) * BN;
  const long long out_vol = p.od * p.oh * p.ow;
  const long long m_total = p.n * out_vol;
  const int in_plane = static_cast<int>(p.h * p.w), in_vol = static_cast<int>(p.d * p.h * p.w);

  // Offset of term r inside one image (the planner keeps C * D * H * W < 2^31) and its
  // (kd*DD, kh*DH, kw*DW) displacements, 10 bits each; past the end: a displacement that fails
  // every bounds check.
  for (int r = tid; r < TABLE; r += THREADS) {
    const int c = r / KVOL, tap = r % KVOL;
    const int dz = tap / (KH * KW) * DD, dy = tap / KW % KH * DH, dx = tap % KW * DW;
    tap_table[r] = r < KRED ? make_int2(c * in_vol + dz * in_plane + dy * static_cast<int>(p.w) + dx,
                                        dz | (dy << 10) | (dx << 20))
                            : make_int2(0, 1023);
  }

  // This thread's A row (output position) is fixed for the whole reduction.
  const int a_m = tid % BM, a_k = tid / BM;
  const long long m = m0 + a_m;
  int id0 = -(1 << 20), ih0 = 0, iw0 = 0;              // out-of-range m: every tap fails
  const float* in_n = in;
  const float* image = in;  // other padding modes than zeros: the image's first element
  if (m < m_total) {
    const long long n = m / out_vol, s = m % out_vol;
    id0 = static_cast<int>(s / (p.oh * p.ow)) * SD - p.pad_d;
    ih0 = static_cast<int>(s / p.ow % p.oh) * SH - p.pad_h;
    iw0 = static_cast<int>(s % p.ow) * SW - p.pad_w;
    image = in + n * p.c * static_cast<long long>(in_vol);
    in_n = image + (static_cast<long long>(id0) * in_plane + ih0 * p.w + iw0);
  }
  constexpr int MODE = Spec::pad_mode;
  const int b_k = tid % BK, b_n = tid / BK;
  __syncthreads();  // the table is ready

  float a_reg[A_PER], b_reg[B_PER];
  auto load_global = [&](int kt) {
#pragma unroll
    for (int j = 0; j < A_PER; ++j) {
      const int r = kt * BK + a_k + j * A_ROWS;
      const int2 e = tap_table[r];
      const int dz = e.y & 1023, dy = (e.y >> 10) & 1023, dx = e.y >> 20;
      const int id = id0 + dz, ih = ih0 + dy, iw = iw0 + dx;
      if constexpr (MODE == padding::kZeros) {
        const bool ok = static_cast<unsigned>(id) < static_cast<unsigned>(p.d) &&
                        static_cast<unsigned>(ih) < static_cast<unsigned>(p.h) &&
                        static_cast<unsigned>(iw) < static_cast<unsigned>(p.w);
        a_reg[j] = ok ? __ldg(in_n + e.x) : 0.f;
      } else {  // every position reads: the term's channel plane at the mapped (id, ih, iw)
        const int w = static_cast<int>(p.w);
        const int channel = e.x - (dz * in_plane + dy * w + dx);
        const int at = channel + (padding::source<MODE>(id, static_cast<int>(p.d)) * in_plane +
                                  padding::source<MODE>(ih, static_cast<int>(p.h)) * w +
                                  padding::source<MODE>(iw, w));
        a_reg[j] = m < m_total && r < KRED ? __ldg(image + at) : 0.f;
      }
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
    for (int j = 0; j < A_PER; ++j) {
      const float big = to_tf32(a_reg[j]);
      As[buf][0][a_k + j * A_ROWS][a_m] = big;
      if (SPLIT) As[buf][PARTS - 1][a_k + j * A_ROWS][a_m] = to_tf32(a_reg[j] - big);
    }
#pragma unroll
    for (int j = 0; j < B_PER; ++j) {
      const float big = to_tf32(b_reg[j]);
      Bs[buf][0][b_k][b_n + j * (THREADS / BK)] = big;
      if (SPLIT) Bs[buf][PARTS - 1][b_k][b_n + j * (THREADS / BK)] = to_tf32(b_reg[j] - big);
    }
  };

  WarpTile sum, total;  // total: only with blocked summation (otherwise optimised away)
  zero(sum);
  zero(total);

  load_global(0);
  store_shared(0);
  __syncthreads();
#pragma unroll 1
  for (int kt = 0; kt < KTILES; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < KTILES) load_global(kt + 1);          // in flight during the multiplies below
    WarpTile acc;
    zero(acc);
#pragma unroll
    for (int ks = 0; ks < BK; ks += 8) {
      unsigned a[PARTS][2][4], b[PARTS][4][2];
#pragma unroll
      for (int q = 0; q < PARTS; ++q) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int row = wm * 32 + i * 16 + g;
          a[q][i][0] = __float_as_uint(As[buf][q][ks + t][row]);
          a[q][i][1] = __float_as_uint(As[buf][q][ks + t][row + 8]);
          a[q][i][2] = __float_as_uint(As[buf][q][ks + t + 4][row]);
          a[q][i][3] = __float_as_uint(As[buf][q][ks + t + 4][row + 8]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col = wn * 32 + j * 8 + g;
          b[q][j][0] = __float_as_uint(Bs[buf][q][ks + t][col]);
          b[q][j][1] = __float_as_uint(Bs[buf][q][ks + t + 4][col]);
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (SPLIT) {
            mma_tf32(acc[i][j], a[PARTS - 1][i], b[0][j]);
            mma_tf32(acc[i][j], a[0][i], b[PARTS - 1][j]);
          }
          mma_tf32(acc[i][j], a[0][i], b[0][j]);
        }
    }
    add_into(sum, acc, false);
    if (kt + 1 < KTILES) store_shared(buf ^ 1);
    __syncthreads();
    if constexpr (BLOCKED) {
      if ((kt + 1) % CHUNK_TILES == 0 || kt + 1 == KTILES) add_into(total, sum, true);
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
          else v = sum[i][j][half * 2 + e];
          const long long at = (n * p.k + k) * out_vol + s;
          out[at] = epilogue::apply<Spec>(v, p.has_bias ? __ldg(bias + k) : 0.f, at, p);
        }
    }
  }
}

}  // namespace conv3djit
