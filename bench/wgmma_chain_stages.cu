// Which part of igemm_sm90_k16's tile loop keeps its wgmma chain below the tensor cores' rate: the
// kernel's chain shape (23 m64n64k16 bf16 wgmmas a tile, A from registers, at most two in flight a
// warpgroup, four warpgroups a block, one block an SM) built up one stage at a time, each row adding
// one thing to the row above it:
//   chain   the 23 wgmmas of a tile back to back, A registers from arithmetic, one B slice,
//           the whole chain waited for at the tile's end (the kernel reads its accumulators there);
//   walk    B walks 23 different 2 KB slices (the kernel's resident weights, 46 KB);
//   loads   A from 4 shared-memory loads a slice, as the gather makes them (a 13 KB tile);
//   barrier a block-wide barrier a tile (the kernel's, after its shifted copy).
// Not part of the build: a standalone measurement on the kernels' own wgmma wrappers:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels -o /tmp/wgmma_chain_stages bench/wgmma_chain_stages.cu && /tmp/wgmma_chain_stages
#include <cuda_runtime.h>

#include <cstdio>

#include "common/wgmma_half.cuh"

constexpr int kSlices = 23, kTileWords = 3328;  // the reference's slices and tile (13 KB)

namespace wg = conv3djit::wgmma;

template <bool WALK, bool LOADS, bool BARRIER>
__global__ void __launch_bounds__(512, 1) tiles(float* out, int n_tiles) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned short* const w = reinterpret_cast<unsigned short*>(smem);  // kSlices x 2 KB
  unsigned* const tile = reinterpret_cast<unsigned*>(smem + kSlices * 2048);
  for (int i = threadIdx.x; i < kSlices * 1024; i += blockDim.x) w[i] = static_cast<unsigned short>(0x3c00 ^ (i & 7));
  for (int i = threadIdx.x; i < kTileWords; i += blockDim.x) tile[i] = 0x3c003c00u ^ (i & 0x00070007u);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // The gather's addresses: position g and g + 8 of the warp, the thread's pair t; kernel row r
  // row_words(r) words in (rows of 72 halves, wrapped inside the tile).
  const unsigned* const lo = tile + ((threadIdx.x >> 5) * 16 + g) / 2 + t;
  const unsigned* const hi = lo + 4;
  const unsigned long long w_desc = wg::descriptor(w);
  float d[32];
  float sum = 0.f;
  for (int it = blockIdx.x; it < n_tiles; it += gridDim.x) {
    if constexpr (BARRIER) __syncthreads();
    unsigned a[2][4];
    auto gather = [&](int s, unsigned (&r)[4]) {
      if constexpr (LOADS) {
        constexpr auto row_words = [](int row) { return row * 36 % 3100; };
        r[0] = lo[row_words(2 * s)];
        r[1] = hi[row_words(2 * s)];
        r[2] = lo[row_words(2 * s + 1)];
        r[3] = hi[row_words(2 * s + 1)];
      } else {
        r[0] = 0x3c003c00u ^ (s + it), r[1] = 0x3f803f80u ^ s, r[2] = lane, r[3] = 0x3c003c00u;
      }
    };
    gather(0, a[0]);
#pragma unroll
    for (int s = 0; s < kSlices; ++s) {
      wg::fence();
      wg::mma_half_regs<64, true>(d, a[s & 1], w_desc + (WALK ? s * 128 : 0), s > 0);
      wg::commit();
      if (s + 1 < kSlices) {
        wg::wait<1>();
        gather(s + 1, a[(s + 1) & 1]);
      }
    }
    wg::wait<0>();
    wg::settle(d);
    sum += d[0];
  }
  for (int i = 0; i < 32; ++i) sum += d[i];
  if (sum == 1234.5f) out[threadIdx.x] = sum;  // keeps the chains alive
}

template <bool WALK, bool LOADS, bool BARRIER>
void rate(const char* name, int sms) {
  auto kernel = tiles<WALK, LOADS, BARRIER>;
  const int smem = kSlices * 2048 + kTileWords * 4 + 4096;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  float* out = nullptr;
  cudaMalloc(&out, 4096);
  const int n_tiles = sms * 400;
  kernel<<<sms, 512, smem>>>(out, sms);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  kernel<<<sms, 512, smem>>>(out, n_tiles);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, start, stop);
  const double flops = 2.0 * 64 * 64 * 16 * kSlices * 4.0 * n_tiles;
  std::printf("| %s | %.0f | %.1f | %s |\n", name, flops / ms / 1e9, ms * 1e3 * 1.755e3 / (n_tiles / sms),
              cudaGetErrorString(cudaGetLastError()));
  cudaFree(out);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  std::printf("| stages | TFLOP/s | cycles a tile at 1.755 GHz | status |\n| --- | --- | --- | --- |\n");
  rate<false, false, false>("chain", sms);
  rate<true, false, false>("+ walk", sms);
  rate<true, true, false>("+ loads", sms);
  rate<true, true, true>("+ barrier", sms);
}
