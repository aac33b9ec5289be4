// Direct convolution for grouped and depthwise problems (groups > 1), fp32 FFMA. These do little
// arithmetic per byte, so the kernel is built to stream: one block per (n, k, od, BH x BW output
// tile) stages the tile's input (CG channels x KD planes, zero-filled for padding) in shared
// memory once, each thread computes TW outputs along W, and the block writes its outputs row by
// row through shared memory so that every store is coalesced. Blocks are ordered with the output
// tile fastest, then od, so the KD-fold reuse of an input plane by neighbouring od hits in L2.
#pragma once
#include "common.cuh"
#include "tile_geometry.cuh"

namespace conv3djit {

template <int CG, int KD, int KH, int KW, int SH, int SW, int DH, int DW, int BH, int BW, int TW>
struct GroupedTile {
  static constexpr GroupedGeometry G = grouped_geometry(CG, KD, KH, KW, SH, SW, DH, DW, BH, BW, TW);
  static constexpr int SEGS = G.segs, THREADS = G.threads, IN_H = G.in_h, IN_W = G.in_w, NX = G.nx;
  static constexpr int KVOL = G.kvol, IN_FLOATS = G.in_floats;
};

template <int CG, int KD, int KH, int KW, int SD, int SH, int SW, int DD, int DH, int DW, int BH, int BW,
          int TW>
__global__ void __launch_bounds__(BH * BW / TW)
grouped_fp32(const float* __restrict__ in, const float* __restrict__ wt,
             const float* __restrict__ bias, float* __restrict__ out, ConvParams p) {
  using T = GroupedTile<CG, KD, KH, KW, SH, SW, DH, DW, BH, BW, TW>;
  extern __shared__ float shared[];
  __shared__ float w_s[CG * T::KVOL];

  long long b = blockIdx.x;
  const long long tiles_w = (p.ow + BW - 1) / BW;
  const long long tiles_h = (p.oh + BH - 1) / BH;
  const long long ow0 = (b % tiles_w) * BW; b /= tiles_w;
  const long long oh0 = (b % tiles_h) * BH;    b /= tiles_h;
  const long long od = b % p.od;               b /= p.od;
  const long long k = b % p.k;
  const long long n = b / p.k;
  const long long g = k / p.k_per_group;

  for (int i = threadIdx.x; i < CG * T::KVOL; i += T::THREADS) w_s[i] = __ldg(wt + k * (CG * T::KVOL) + i);

  const long long id0 = od * SD - p.pad_d;
  const long long ih0 = oh0 * SH - p.pad_h;
  const long long iw0 = ow0 * SW - p.pad_w;
  const long long in_plane = p.h * p.w;
  const float* in_g = in + (n * p.c + g * CG) * p.d * in_plane;
  // Batches of 8 loads in flight per thread before any is stored.
  constexpr int BATCH = 8;
#pragma unroll 1
  for (int base = threadIdx.x; base < T::IN_FLOATS; base += BATCH * T::THREADS) {
    float v[BATCH];
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = base + j * T::THREADS;
      const int col = i % T::IN_W;
      const int row = (i / T::IN_W) % T::IN_H;
      const int ckd = i / (T::IN_W * T::IN_H);
      const long long id = id0 + (ckd % KD) * DD;
      const long long ih = ih0 + row;
      const long long iw = iw0 + col;
      v[j] = 0.f;
      if (i < T::IN_FLOATS && id >= 0 && id < p.d && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w) {
        v[j] = __ldg(in_g + ((ckd / KD) * p.d + id) * in_plane + ih * p.w + iw);
      }
    }
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = base + j * T::THREADS;
      if (i < T::IN_FLOATS) shared[i] = v[j];
    }
  }
  __syncthreads();

  const int row = threadIdx.x / T::SEGS;
  const int seg = threadIdx.x % T::SEGS;
  float acc[TW];
#pragma unroll
  for (int x = 0; x < TW; ++x) acc[x] = 0.f;
#pragma unroll 1
  for (int ckd = 0; ckd < CG * KD; ++ckd) {
#pragma unroll
    for (int kh = 0; kh < KH; ++kh) {
      const float* src = shared + (ckd * T::IN_H + row * SH + kh * DH) * T::IN_W + seg * TW * SW;
      float xin[T::NX];
#pragma unroll
      for (int i = 0; i < T::NX; ++i) xin[i] = src[i];
      const float* w = w_s + (ckd * KH + kh) * KW;
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) {
#pragma unroll
        for (int x = 0; x < TW; ++x) acc[x] = fmaf(w[kw], xin[x * SW + kw * DW], acc[x]);
      }
    }
  }

  __syncthreads();  // the input tile is consumed: reuse it to stage the outputs
#pragma unroll
  for (int x = 0; x < TW; ++x) shared[row * BW + seg * TW + x] = acc[x];
  __syncthreads();
  const float bv = p.has_bias ? __ldg(bias + k) : 0.f;
  float* o = out + (((n * p.k + k) * p.od + od) * p.oh + oh0) * p.ow + ow0;
  for (int i = threadIdx.x; i < BH * BW; i += T::THREADS) {
    const int r = i / BW, col = i % BW;
    if (oh0 + r < p.oh && ow0 + col < p.ow) o[r * p.ow + col] = shared[i] + bv;
  }
}

}  // namespace conv3djit
