// Implicit-GEMM convolution on Hopper's warpgroup tensor cores (wgmma, sm_90a), groups == 1, for
// problems whose whole reduction (CG * KD * KH * KW terms) fits in shared memory with BN channels.
//
// GEMM view: rows = output positions, columns = output channels, reduction = (c, kd, kh, kw). A
// block is a persistent worker for one block of BN channels: it loads those channels' weights
// once (rounded to TF32, split into big + small for 3xTF32, in wgmma's shared-memory layout) and
// walks spatial tiles of TH x TW outputs of one (n, od). Each tile's input (CG x KD x rows x
// columns, zero outside the input = padding) is copied with cp.async into one of two buffers
// while the previous tile is computed.
//
// The im2col gather is what run-time specialisation buys: a thread's A fragment for reduction
// slice s is four shared-memory loads at (its output position's base) + (the slice's offsets for
// its k = t and t + 4), and those offsets come from a per-block table built from compile-time
// constants, so C = 3 packs densely (315 terms = 40 slices of 8, the 5 padding terms read an
// all-zero channel). The planner picks the tile pitches RP, PP, CP so that these loads hit
// distinct banks.
//
// SPLIT = 1 (fp32 class): 3xTF32, x = big + small with big = tf32(x), small = tf32(x - big); per
// slice small*big, big*small, then big*big into the same accumulator. Tensor cores add with
// truncation, so one long chain drifts (2-4e-6 rel-L2 measured with mma.sync): the chain restarts
// every CHAIN slices (scale-d = 0) and is added to a running sum with a round-to-nearest FADD.
// SPLIT = 0 (tf32 class): one TF32 product, one chain.
#pragma once
#include "async_copy.cuh"
#include "common.cuh"
#include "tf32.cuh"
#include "tile_geometry.cuh"
#include "wgmma.cuh"

namespace conv3djit {

template <int CG, int KD, int KH, int KW, int SD, int SH, int SW, int DD, int DH, int DW, int TH, int TW, int BN,
          int RP, int PP, int CP, int SPLIT>
__global__ void __launch_bounds__(TH* TW * 2, 1)
igemm_sm90(const float* __restrict__ in, const float* __restrict__ wt, const float* __restrict__ bias,
           float* __restrict__ out, ConvParams p) {
  constexpr Sm90Geometry G = sm90_geometry(CG, KD, KH, KW, SH, SW, DH, DW, TH, TW, BN, CP, SPLIT);
  constexpr int KVOL = KD * KH * KW, S = G.slices, THREADS = G.threads, NB = BN / 8, PARTS = SPLIT ? 2 : 1;
  constexpr int CHAIN = SPLIT ? (BN > 64 ? 1 : 2) : 4;  // slices per wgmma group (and per fresh chain)
  constexpr int GROUPS = (S + CHAIN - 1) / CHAIN;
  constexpr int R = BN / 2;  // accumulators per thread
  static_assert(TW % 8 == 0 && (TH * TW) % 64 == 0, "a warp's 8 + 8 rows lie in tile rows of 8");
  static_assert(RP >= G.in_w && PP >= G.in_h * RP && CP >= KD * PP, "tile pitches too small");

  extern __shared__ float4 shared4[];
  float* const w_s = reinterpret_cast<float*>(shared4);                   // [PARTS][S][NB][2][8][4]
  int2* const table = reinterpret_cast<int2*>(w_s + G.weight_floats);     // [S][4]: k = t, t + 4
  float* const tiles = reinterpret_cast<float*>(table) + G.table_ints;    // [2][tile_floats]

  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const long long k_blocks = (p.k + BN - 1) / BN;
  const int kb = static_cast<int>(blockIdx.x % k_blocks);
  const long long tiles_h = (p.oh + TH - 1) / TH, tiles_w = (p.ow + TW - 1) / TW;
  const long long n_tiles = p.n * p.od * tiles_h * tiles_w;
  const long long step = gridDim.x / k_blocks;  // the planner makes the grid a multiple of k_blocks

  // Weights of channels kb * BN ...: element (n, r) goes to core matrix (s, n / 8, k half) row n % 8.
  for (int i = tid; i < S * 8 * BN; i += THREADS) {
    const int n = i / (S * 8), r = i % (S * 8);
    const long long k = static_cast<long long>(kb) * BN + n;
    const float x = (r < G.kred && k < p.k) ? __ldg(wt + k * G.kred + r) : 0.f;
    const int at = (((r / 8 * NB + n / 8) * 2 + (r % 8) / 4) * 8 + n % 8) * 4 + r % 4;
    const float big = to_tf32(x);
    w_s[at] = big;
    if (SPLIT) w_s[S * 8 * BN + at] = to_tf32(x - big);
  }
  // Tile offset of every reduction term; padding terms read the zero channel.
  for (int r = tid; r < S * 8; r += THREADS) {
    const int c = r / KVOL, tap = r % KVOL;
    const int off = r < G.kred ? c * CP + tap / (KH * KW) * PP + tap / KW % KH * DH * RP + tap % KW * DW : CG * CP;
    int* entry = reinterpret_cast<int*>(&table[r / 8 * 4 + r % 4]);
    entry[(r % 8) / 4] = off;
  }
  if (G.zero_channel) {
    for (int i = tid; i < CP; i += THREADS) tiles[CG * CP + i] = tiles[G.tile_floats + CG * CP + i] = 0.f;
  }
  // The tensor cores read the weights through the async proxy.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const unsigned long long w_desc = wgmma::descriptor(w_s);

  // This thread's two A rows: positions pa and pa + 8 of its warpgroup's 64.
  const int pa = (tid >> 7) * 64 + ((tid >> 5) & 3) * 16 + g, pb = pa + 8;
  const int base_a = pa / TW * SH * RP + pa % TW * SW, base_b = pb / TW * SH * RP + pb % TW * SW;

  auto tile_origin = [&](long long tile, long long& n, long long& od, long long& oh0, long long& ow0) {
    ow0 = tile % tiles_w * TW;
    oh0 = tile / tiles_w % tiles_h * TH;
    od = tile / (tiles_w * tiles_h) % p.od;
    n = tile / (tiles_w * tiles_h * p.od);
  };
  auto stage = [&](long long tile, int buf) {
    long long n, od, oh0, ow0;
    tile_origin(tile, n, od, oh0, ow0);
    const long long id0 = od * SD - p.pad_d, ih0 = oh0 * SH - p.pad_h, iw0 = ow0 * SW - p.pad_w;
    const float* in_n = in + n * p.c * p.d * p.h * p.w;
    float* dst = tiles + buf * G.tile_floats;
    for (int i = tid; i < CG * KD * G.in_h * G.in_w; i += THREADS) {
      const int x = i % G.in_w, y = i / G.in_w % G.in_h, z = i / (G.in_w * G.in_h) % KD, c = i / (G.in_w * G.in_h * KD);
      const long long id = id0 + z * DD, ih = ih0 + y, iw = iw0 + x;
      const bool ok = id >= 0 && id < p.d && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
      copy_or_zero(dst + c * CP + z * PP + y * RP + x, ok ? in_n + ((c * p.d + id) * p.h + ih) * p.w + iw : in, ok);
    }
  };

  long long tile = blockIdx.x / k_blocks;
  if (tile < n_tiles) stage(tile, 0);
  copies_commit();
#pragma unroll 1
  for (int it = 0; tile < n_tiles; ++it, tile += step) {
    const int buf = it & 1;
    if (tile + step < n_tiles) stage(tile + step, buf ^ 1);
    copies_commit();
    copies_wait<1>();  // this tile's copies (the next tile's stay in flight)
    __syncthreads();

    const float* tb = tiles + buf * G.tile_floats;
    unsigned a[2][CHAIN][PARTS][4];  // A fragments of two groups: one gathered while the other runs
    auto gather = [&](int group, unsigned (&frag)[CHAIN][PARTS][4]) {
#pragma unroll
      for (int j = 0; j < CHAIN; ++j) {
        const int s = group * CHAIN + j;
        if (s >= S) break;
        const int2 o = table[s * 4 + t];
        const float x[4] = {tb[base_a + o.x], tb[base_b + o.x], tb[base_a + o.y], tb[base_b + o.y]};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float big = to_tf32(x[e]);
          frag[j][0][e] = __float_as_uint(big);
          if (SPLIT) frag[j][PARTS - 1][e] = __float_as_uint(to_tf32(x[e] - big));
        }
      }
    };
    float acc[R], sum[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = sum[i] = 0.f;
    // One group: its wgmmas on `cur`, then the next group's gather into `next`. The group loop
    // stays rolled (two groups per trip, so the fragment arrays keep fixed registers): NVRTC
    // compiles a fully unrolled 3xTF32 kernel in 1.3 s (BN = 64) to 11 s (BN = 128).
    using Frags = unsigned[CHAIN][PARTS][4];
    auto run_group = [&](int group, const Frags& cur, Frags& next) {
      wgmma::fence();
#pragma unroll
      for (int j = 0; j < CHAIN; ++j) {
        const int s = group * CHAIN + j;
        if (s >= S) break;
        const unsigned long long big_b = w_desc + static_cast<unsigned>(s * NB * 2 * 128 >> 4);
        const bool chained = SPLIT ? j > 0 : s > 0;
        if (SPLIT) {
          const unsigned long long small_b = big_b + (S * NB * 2 * 128 >> 4);
          wgmma::mma<BN>(acc, cur[j][PARTS - 1], big_b, chained);
          wgmma::mma<BN>(acc, cur[j][0], small_b, true);
          wgmma::mma<BN>(acc, cur[j][0], big_b, true);
        } else {
          wgmma::mma<BN>(acc, cur[j][0], big_b, chained);
        }
      }
      wgmma::commit();
      // `next` holds the fragments of the group before this one: with 3xTF32 that group was
      // waited for below; with TF32 wait for it now.
      if (!SPLIT) wgmma::wait<1>();
      if (group + 1 < GROUPS) gather(group + 1, next);
      if (SPLIT) {
        wgmma::wait<0>();
        wgmma::settle(acc);
#pragma unroll
        for (int i = 0; i < R; ++i) sum[i] += acc[i];
      }
    };
    gather(0, a[0]);
#pragma unroll 1
    for (int group = 0; group < GROUPS; group += 2) {
      run_group(group, a[0], a[1]);
      if (group + 1 < GROUPS) run_group(group + 1, a[1], a[0]);
    }
    wgmma::wait<0>();
    wgmma::settle(acc);
    if (!SPLIT) {
#pragma unroll
      for (int i = 0; i < R; ++i) sum[i] = acc[i];
    }

    long long n, od, oh0, ow0;
    tile_origin(tile, n, od, oh0, ow0);
    const long long out_vol = p.od * p.oh * p.ow;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int pos = half ? pb : pa;
      const long long oh = oh0 + pos / TW, ow = ow0 + pos % TW;
      if (oh >= p.oh || ow >= p.ow) continue;
      float* o = out + n * p.k * out_vol + (od * p.oh + oh) * p.ow + ow;
#pragma unroll
      for (int j = 0; j < NB; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const long long k = static_cast<long long>(kb) * BN + j * 8 + 2 * t + e;
          if (k < p.k) o[k * out_vol] = sum[j * 4 + half * 2 + e] + (p.has_bias ? __ldg(bias + k) : 0.f);
        }
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
}

}  // namespace conv3djit
