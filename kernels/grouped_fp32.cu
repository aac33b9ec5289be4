// Direct convolution for grouped and depthwise problems (groups > 1), fp32 FFMA. These do little
// arithmetic per byte, so the kernel is built to stream: one block per (n, KB output channels of
// one group, ODT x BH x BW output tile) stages the input the tile needs (CG channels x its input
// planes, zero-filled for padding) in shared memory once, so neighbouring output planes share
// their input planes instead of each re-reading KD of them, and the KB channels share the whole
// tile (ResNeXt's 8 channels per group read it once instead of 8 times); each thread computes TW
// outputs along W on each of the ODT planes for each of the KB channels; the block writes its
// outputs row by row through shared memory, so every store is coalesced.
#pragma once
#include "common.cuh"
#include "tile_geometry.cuh"

namespace conv3djit {

template <int CG, int KD, int KH, int KW, int SD, int SH, int SW, int DD, int DH, int DW, int BH, int BW,
          int TW, int ODT, int KB>
__global__ void __launch_bounds__(BH * BW / TW)
grouped_fp32(const float* __restrict__ in, const float* __restrict__ wt,
             const float* __restrict__ bias, float* __restrict__ out, ConvParams p) {
  constexpr GroupedGeometry G = grouped_geometry(CG, KD, KH, KW, SD, SH, SW, DD, DH, DW, BH, BW, TW, ODT, KB);
  constexpr int WK = CG * G.kvol;  // one output channel's weights
  extern __shared__ float shared[];
  __shared__ float w_s[KB * WK];

  long long b = blockIdx.x;
  const long long tiles_w = (p.ow + BW - 1) / BW;
  const long long tiles_h = (p.oh + BH - 1) / BH;
  const long long tiles_d = (p.od + ODT - 1) / ODT;
  const long long ow0 = (b % tiles_w) * BW;  b /= tiles_w;
  const long long oh0 = (b % tiles_h) * BH;  b /= tiles_h;
  const long long od0 = (b % tiles_d) * ODT; b /= tiles_d;
  const long long k_blocks = p.k / KB;  // KB divides the channels per group
  const long long k0 = b % k_blocks * KB;
  const long long n = b / k_blocks;
  const long long g = k0 / p.k_per_group;

  for (int i = threadIdx.x; i < KB * WK; i += G.threads) w_s[i] = __ldg(wt + k0 * WK + i);

  const long long id0 = od0 * SD - p.pad_d;
  const long long ih0 = oh0 * SH - p.pad_h;
  const long long iw0 = ow0 * SW - p.pad_w;
  const long long in_plane = p.h * p.w;
  const float* in_g = in + (n * p.c + g * CG) * p.d * in_plane;
  // Batches of 8 loads in flight per thread before any is stored.
  constexpr int BATCH = 8;
#pragma unroll 1
  for (int base = threadIdx.x; base < G.in_floats; base += BATCH * G.threads) {
    float v[BATCH];
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = base + j * G.threads;
      const int col = i % G.in_w;
      const int row = (i / G.in_w) % G.in_h;
      const int cz = i / (G.in_w * G.in_h);   // c_local * in_d + plane
      const long long id = id0 + cz % G.in_d;
      const long long ih = ih0 + row;
      const long long iw = iw0 + col;
      v[j] = 0.f;
      if (i < G.in_floats && id >= 0 && id < p.d && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w) {
        v[j] = __ldg(in_g + ((cz / G.in_d) * p.d + id) * in_plane + ih * p.w + iw);
      }
    }
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = base + j * G.threads;
      if (i < G.in_floats) shared[i] = v[j];
    }
  }
  __syncthreads();

  const int row = threadIdx.x / G.segs;
  const int seg = threadIdx.x % G.segs;
  float acc[KB][ODT][TW];
#pragma unroll
  for (int j = 0; j < KB; ++j)
#pragma unroll
    for (int z = 0; z < ODT; ++z)
#pragma unroll
      for (int x = 0; x < TW; ++x) acc[j][z][x] = 0.f;
#pragma unroll 1
  for (int c = 0; c < CG; ++c) {
#pragma unroll 1
    for (int kd = 0; kd < KD; ++kd) {
#pragma unroll
      for (int z = 0; z < ODT; ++z) {
        const int plane = c * G.in_d + z * SD + kd * DD;
#pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
          const float* src = shared + (plane * G.in_h + row * SH + kh * DH) * G.in_w + seg * TW * SW;
          float xin[G.nx];
#pragma unroll
          for (int i = 0; i < G.nx; ++i) xin[i] = src[i];
          const float* w = w_s + ((c * KD + kd) * KH + kh) * KW;
#pragma unroll
          for (int kw = 0; kw < KW; ++kw) {
#pragma unroll
            for (int j = 0; j < KB; ++j) {
              const float wv = w[j * WK + kw];
#pragma unroll
              for (int x = 0; x < TW; ++x) acc[j][z][x] = fmaf(wv, xin[x * SW + kw * DW], acc[j][z][x]);
            }
          }
        }
      }
    }
  }

  __syncthreads();  // the input tile is consumed: reuse it to stage the outputs
#pragma unroll
  for (int j = 0; j < KB; ++j)
#pragma unroll
    for (int z = 0; z < ODT; ++z)
#pragma unroll
      for (int x = 0; x < TW; ++x) shared[((j * ODT + z) * BH + row) * BW + seg * TW + x] = acc[j][z][x];
  __syncthreads();
  for (int i = threadIdx.x; i < KB * ODT * BH * BW; i += G.threads) {
    const int j = i / (ODT * BH * BW), z = i / (BH * BW) % ODT, r = (i / BW) % BH, col = i % BW;
    const long long od = od0 + z, k = k0 + j;
    if (od < p.od && oh0 + r < p.oh && ow0 + col < p.ow) {
      out[(((n * p.k + k) * p.od + od) * p.oh + oh0 + r) * p.ow + ow0 + col] =
          shared[i] + (p.has_bias ? __ldg(bias + k) : 0.f);
    }
  }
}

}  // namespace conv3djit
