// Whether a K-major, 128-byte-swizzled wgmma operand may start at any 128-byte row of a TMA-style
// swizzled buffer (not only at an 8-row group's start): the operand of kernel column kw would then
// be the same shared-memory box of window origins read kw rows further, so that one box serves a
// kernel row's KW taps. Fills A (64 x 64 halves) and B (80 rows x 64 halves) as a TMA box with the
// 128-byte swizzle stores them (16-byte chunk j of row r at chunk j ^ (r % 8), the buffers
// 1024-byte aligned), multiplies A by rows s .. s + 63 of B for every shift s < 16 with the
// descriptor's base-offset field (bits 49-51) 0 and (start >> 7) % 8, and prints each product's
// largest error against a float64 one. Then asks the driver for im2col maps of 64 channels and
// more than 256 window origins a box (a kernel row's box is the tile's origins and KW - 1 more).
// Not part of the build:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels -o /tmp/wgmma_row_offset \
//     bench/wgmma_row_offset.cu -lcuda && /tmp/wgmma_row_offset
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/wgmma_half.cuh"

namespace wg = conv3djit::wgmma;

constexpr int M = 64, N = 64, K = 64, B_ROWS = N + 16;

__device__ __forceinline__ unsigned long long descriptor(unsigned addr, bool base_offset) {
  return wg::descriptor_sw128(addr) | (base_offset ? static_cast<unsigned long long>((addr >> 7) & 7u) << 49 : 0ull);
}

// One warpgroup: out[mode][s][m][n] = sum_k a[m][k] b[s + n][k].
__global__ void shifted(const unsigned short* a, const unsigned short* b, float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned char* const base = smem + (1024 - static_cast<unsigned>(__cvta_generic_to_shared(smem)) % 1024) % 1024;
  unsigned char* const sa = base;
  unsigned char* const sb = base + M * 128;
  for (int i = threadIdx.x; i < M * 8; i += blockDim.x) {  // 16-byte chunks of A
    const int r = i / 8, j = i % 8;
    *reinterpret_cast<uint4*>(sa + r * 128 + ((j ^ (r % 8)) << 4)) = *reinterpret_cast<const uint4*>(a + r * K + 8 * j);
  }
  for (int i = threadIdx.x; i < B_ROWS * 8; i += blockDim.x) {
    const int r = i / 8, j = i % 8;
    *reinterpret_cast<uint4*>(sb + r * 128 + ((j ^ (r % 8)) << 4)) = *reinterpret_cast<const uint4*>(b + r * K + 8 * j);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const unsigned a0 = static_cast<unsigned>(__cvta_generic_to_shared(sa));
  const unsigned b0 = static_cast<unsigned>(__cvta_generic_to_shared(sb));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int mode = 0; mode < 2; ++mode) {
    for (int s = 0; s < 16; ++s) {
      float acc[N / 2];
      wg::fence();
#pragma unroll
      for (int j = 0; j < K / 16; ++j) {
        wg::mma_half<N, true, false, false>(acc, descriptor(a0 + 32 * j, mode == 1),
                                            descriptor(b0 + s * 128 + 32 * j, mode == 1), j > 0);
      }
      wg::commit();
      wg::wait<0>();
      wg::settle(acc);
      float* const o = out + (mode * 16 + s) * M * N;
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          o[(16 * warp + g + 8 * (e / 2)) * N + 8 * j + 2 * t + e % 2] = acc[4 * j + e];
        }
      }
    }
  }
}

static unsigned short to_bf16(float f, float& rounded) {
  const __nv_bfloat16 h = __float2bfloat16(f);
  rounded = __bfloat162float(h);
  unsigned short bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

int main() {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<unsigned short> ha(M * K), hb(B_ROWS * K);
  std::vector<float> fa(M * K), fb(B_ROWS * K);
  for (int i = 0; i < M * K; ++i) ha[i] = to_bf16(dist(gen), fa[i]);
  for (int i = 0; i < B_ROWS * K; ++i) hb[i] = to_bf16(dist(gen), fb[i]);
  unsigned short *da, *db;
  float* dout;
  cudaMalloc(&da, ha.size() * 2);
  cudaMalloc(&db, hb.size() * 2);
  cudaMalloc(&dout, 2 * 16 * M * N * sizeof(float));
  cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice);
  const int smem = 1024 + (M + B_ROWS) * 128;
  cudaFuncSetAttribute(shifted, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  shifted<<<1, 128, smem>>>(da, db, dout);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("kernel failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  std::vector<float> hout(2 * 16 * M * N);
  cudaMemcpy(hout.data(), dout, hout.size() * 4, cudaMemcpyDeviceToHost);
  for (int mode = 0; mode < 2; ++mode) {
    std::printf("base offset %s:", mode ? "(start >> 7) % 8" : "0");
    for (int s = 0; s < 16; ++s) {
      double worst = 0;
      for (int m = 0; m < M; ++m) {
        for (int n = 0; n < N; ++n) {
          double ref = 0;
          for (int k = 0; k < K; ++k) ref += double(fa[m * K + k]) * fb[(s + n) * K + k];
          worst = std::fmax(worst, std::fabs(ref - hout[((mode * 16 + s) * M + m) * N + n]));
        }
      }
      std::printf(" s%d %.1e", s, worst);
    }
    std::printf("\n");
  }

  // im2col maps: an NDHWC bf16 input 2 x 16 x 56 x 56 x 64, 64 channels a pixel, a box of `pixels`.
  void* input;
  cudaMalloc(&input, 2ull * 16 * 56 * 56 * 64 * 2);
  for (unsigned pixels : {256u, 258u, 262u, 320u, 512u, 1024u, 1025u}) {
    CUtensorMap map;
    const cuuint64_t dims[5] = {64, 56, 56, 16, 2};
    const cuuint64_t strides[4] = {64 * 2, 56 * 64 * 2, 56 * 56 * 64 * 2, 16ull * 56 * 56 * 64 * 2};
    const int lower[3] = {-1, -1, -1}, upper[3] = {1, 1, 1};
    const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    const CUresult r = cuTensorMapEncodeIm2col(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, input, dims, strides, lower,
                                               upper, 64, pixels, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    std::printf("im2col map of %u pixels a box: %s\n", pixels, r == CUDA_SUCCESS ? "ok" : "refused");
  }
  return 0;
}
