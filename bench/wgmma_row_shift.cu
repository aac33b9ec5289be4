// Whether a few-channel 16-bit convolution can feed wgmma from shared-memory descriptors alone: the
// weights as A (64 output channels x 16 terms, K-major), and as B the positions of one output
// column along H (N = 64 rows oh) with their 16 terms, two kernel rows (c, kd, kh) of 8 kw slots
// each, from 8 copies of the input tile, copy s holding input columns s .. s + 7 of each input row
// as one 16-byte row. A kernel row's operand is then 64 consecutive 16-byte rows starting at input
// row h = kh: moving to the next kh moves the descriptor's start 16 bytes, so the copies are made
// once a tile and every (kd, kh) reads them in place (no gather loads, no per-kh copy).
//
// Checks the layout against a float64 convolution on one tile, then measures the rate of the
// chains (23 m64n64k16 wgmmas a column, 8 columns a tile, 4 warpgroups each two columns into two
// accumulator sets), with the copies built once (static) or rebuilt every tile from global memory
// into the second of two buffers while the chains run (the kernel's shape).
// Not part of the build: a standalone measurement on the kernels' own wgmma wrappers:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels -o /tmp/wgmma_row_shift bench/wgmma_row_shift.cu && /tmp/wgmma_row_shift
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/wgmma_half.cuh"

namespace wg = conv3djit::wgmma;

// The reference problem's kernel: 45 kernel rows, 23 k16 slices.
constexpr int C = 3, KD = 3, KH = 5, KW = 7, ROWS = C * KD * KH, SLICES = (ROWS + 1) / 2;
constexpr int N = 64, HR = N + KH - 1;                     // output rows a column, input rows a tile
constexpr int COPY = C * KD * HR * 16;                     // one copy s: C x KD x HR rows of 16 bytes
constexpr int W_BYTES = SLICES * 2048, E_BYTES = 8 * COPY, ZERO_BYTES = HR * 16;
constexpr int IN_D = 64, IN_W = 64, GROUPS = (IN_W - 16) / 8 + 1, TILES = (IN_D - KD + 1) * GROUPS;

// No-swizzle K-major descriptor: core matrices of 8 rows x 16 bytes, the two k halves LBO apart,
// 8-row groups SBO apart.
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo) {
  using u64 = unsigned long long;
  return u64((addr & 0x3FFFF) >> 4) | (u64(lbo >> 4) << 16) | (u64(sbo >> 4) << 32);
}

// Byte offset of kernel row r's operand inside a copy (its first input row, kh).
__host__ __device__ constexpr int row_offset(int r) {
  return ((r / (KD * KH) * KD + r / KH % KD) * HR + r % KH) * 16;
}

// Copies of tile (od, g) into e: copy s, input row (c, kd, h) = x[c][od + kd][h][8g + s + j], slot
// j >= KW zero (so that a non-finite input there meets no zero weight).
__device__ void expand(unsigned char* e, const unsigned short* x, int tile) {
  const int od = tile / GROUPS, g = tile % GROUPS;
  for (int row = threadIdx.x; row < C * KD * HR; row += blockDim.x) {
    const int c = row / (KD * HR), kd = row / HR % KD, h = row % HR;
    const uint4* src = reinterpret_cast<const uint4*>(x + ((size_t(c) * IN_D + od + kd) * HR + h) * IN_W + 8 * g);
    const uint4 lo = __ldg(src), hi = __ldg(src + 1);
    const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      unsigned o[4];
#pragma unroll
      for (int p = 0; p < 4; ++p) o[p] = s % 2 == 0 ? w[s / 2 + p] : __funnelshift_r(w[s / 2 + p], w[s / 2 + p + 1], 16);
      o[3] &= 0x0000FFFFu;  // slot 7 (KW = 7)
      *reinterpret_cast<uint4*>(e + s * COPY + row * 16) = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

// A register the compiler cannot see through: keeps it from precomputing every slice's descriptor
// (46 of 64 bits) ahead of the loop, where they spill.
__device__ __forceinline__ unsigned long long opaque(unsigned long long v) {
  asm volatile("" : "+l"(v));
  return v;
}

// Two columns of 64 channels x 64 rows a warpgroup: warpgroup q takes copies q and q + 4. A slice's
// descriptors are the column's first ones plus constants (start and LBO fields, in 16-byte units).
__device__ __forceinline__ void chains(float (&d)[2][32], unsigned w_base, unsigned e_base, unsigned zero) {
  const int q = threadIdx.x / 128;
#pragma unroll
  for (int col = 0; col < 2; ++col) {
    const unsigned e = e_base + (q + 4 * col) * COPY;
    const unsigned long long a0 = opaque(desc(w_base, 128, 256)), b0 = opaque(desc(e, 0, 128));
    const unsigned long long last = desc(e + row_offset(ROWS - 1), zero - (e + row_offset(ROWS - 1)), 128);
#pragma unroll
    for (int i = 0; i < SLICES; ++i) {
      const unsigned first = row_offset(2 * i), lbo = 2 * i + 1 < ROWS ? row_offset(2 * i + 1) - first : 0;
      const unsigned long long b = 2 * i + 1 < ROWS ? b0 + (first >> 4) + (static_cast<unsigned long long>(lbo >> 4) << 16) : last;
      wg::mma_half<64, true>(d[col], a0 + i * (2048 >> 4), b, i > 0);
    }
  }
}

template <bool EXPAND, bool CHECK>
__global__ void __launch_bounds__(512, 1) tiles(const unsigned short* x, const unsigned short* w_global, float* out,
                                                int n_tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned char* const w = smem;
  unsigned char* const e0 = smem + W_BYTES;
  unsigned char* const zero = e0 + 2 * E_BYTES;
  for (int i = threadIdx.x; i < W_BYTES / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(w)[i] = reinterpret_cast<const uint4*>(w_global)[i];
  for (int i = threadIdx.x; i < ZERO_BYTES / 16; i += blockDim.x) reinterpret_cast<uint4*>(zero)[i] = uint4{};
  expand(e0, x, blockIdx.x % TILES);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const unsigned w_addr = static_cast<unsigned>(__cvta_generic_to_shared(w));
  const unsigned e_addr = static_cast<unsigned>(__cvta_generic_to_shared(e0));
  const unsigned z_addr = static_cast<unsigned>(__cvta_generic_to_shared(zero));
  float d[2][32];
  float sum = 0.f;
  int buf = 0;
  for (int it = blockIdx.x; it < n_tiles; it += gridDim.x, buf ^= 1) {
    wg::fence();
    chains(d, w_addr, e_addr + (EXPAND ? buf * E_BYTES : 0), z_addr);
    wg::commit();
    if (EXPAND && it + gridDim.x < n_tiles) expand(e0 + (buf ^ 1) * E_BYTES, x, (it + gridDim.x) % TILES);
    wg::wait<0>();
    wg::settle(d[0]);
    wg::settle(d[1]);
    if constexpr (CHECK) {  // the checked tile: out[channel][oh][ow]
      const int q = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
#pragma unroll
      for (int col = 0; col < 2; ++col)
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int j = i / 4, e = i % 4;
          const int m = 16 * warp + lane / 4 + 8 * (e / 2), n = 8 * j + 2 * (lane % 4) + e % 2;
          out[(m * N + n) * 8 + q + 4 * col] = d[col][i];
        }
    }
    sum += d[0][0] + d[1][5];
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
  }
  if (sum == 1234.5f) reinterpret_cast<float*>(zero)[threadIdx.x] = sum;  // keeps the chains alive
}

static unsigned short to_bf16(float v) {
  unsigned u;
  std::memcpy(&u, &v, 4);
  return static_cast<unsigned short>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
static double from_bf16(unsigned short b) {
  const unsigned u = unsigned(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int main() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<unsigned short> x(size_t(C) * IN_D * HR * IN_W), wt(64 * ROWS * KW), wsm(W_BYTES / 2, 0);
  for (auto& v : x) v = to_bf16(uni(rng));
  for (auto& v : wt) v = to_bf16(uni(rng));
  // The weights as A: slice i, channel m, term k (kernel row 2i + k / 8, slot k % 8) at
  // i * 2048 + (m / 8) * 256 + (k / 8) * 128 + (m % 8) * 16 + (k % 8) * 2 (LBO 128, SBO 256).
  for (int i = 0; i < SLICES; ++i)
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k) {
        const int r = 2 * i + k / 8, kw = k % 8;
        if (r < ROWS && kw < KW)
          wsm[(i * 2048 + (m / 8) * 256 + (k / 8) * 128 + (m % 8) * 16 + (k % 8) * 2) / 2] = wt[(m * ROWS + r) * KW + kw];
      }
  unsigned short *dx, *dw;
  float* dout;
  cudaMalloc(&dx, x.size() * 2);
  cudaMalloc(&dw, wsm.size() * 2);
  cudaMalloc(&dout, 64 * N * 8 * 4);
  cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, wsm.data(), wsm.size() * 2, cudaMemcpyHostToDevice);
  const int smem = W_BYTES + 2 * E_BYTES + ZERO_BYTES;
  for (auto kernel : {tiles<false, true>, tiles<false, false>, tiles<true, false>})
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);

  // The check: tile 0 (od = 0, ow 0..7) against float64.
  tiles<false, true><<<1, 512, smem>>>(dx, dw, dout, 1);
  std::vector<float> out(64 * N * 8);
  cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
  double err = 0, ref2 = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n)
      for (int s = 0; s < 8; ++s) {
        double acc = 0;
        for (int r = 0; r < ROWS; ++r)
          for (int kw = 0; kw < KW; ++kw) {
            const int c = r / (KD * KH), kd = r / KH % KD, kh = r % KH;
            acc += from_bf16(wt[(m * ROWS + r) * KW + kw]) *
                   from_bf16(x[((size_t(c) * IN_D + kd) * HR + n + kh) * IN_W + s + kw]);
          }
        const double diff = out[(m * N + n) * 8 + s] - acc;
        err += diff * diff, ref2 += acc * acc;
      }
  std::printf("check: rel-L2 %.3g (%s)\n", std::sqrt(err / ref2), cudaGetErrorString(cudaGetLastError()));

  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  std::printf("| copies | TFLOP/s (slots) | TFLOP/s (terms) | status |\n| --- | --- | --- | --- |\n");
  for (int variant = 0; variant < 2; ++variant) {
    auto kernel = variant == 0 ? tiles<false, false> : tiles<true, false>;
    const int n_tiles = sms * 300;
    kernel<<<sms, 512, smem>>>(dx, dw, nullptr, sms * 4);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start);
    kernel<<<sms, 512, smem>>>(dx, dw, nullptr, n_tiles);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start, stop);
    const double slots = 2.0 * 64 * N * 16 * SLICES * 8.0 * n_tiles;
    std::printf("| %s | %.0f | %.0f | %s |\n", variant == 0 ? "static" : "rebuilt a tile", slots / ms / 1e9,
                slots * (C * KD * KH * KW) / (SLICES * 16.0) / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
  }
}
