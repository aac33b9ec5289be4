// Which part of igemm_sm90_k16's tile loop keeps its wgmma chain below the tensor cores' rate: the
// kernel's chain shape (23 m64n64k16 bf16 wgmmas a tile, A from registers, at most two in flight a
// warpgroup, four warpgroups a block, one block an SM) built up one stage at a time, each row adding
// one thing to the row above it:
//   chain   the 23 wgmmas of a tile back to back, A registers from arithmetic, one B slice,
//           the whole chain waited for at the tile's end (the kernel reads its accumulators there);
//   walk    B walks 23 different 2 KB slices (the kernel's resident weights, 46 KB);
//   loads   A from 4 shared-memory loads a slice, as the gather makes them (a 13 KB tile);
//   barrier a block-wide barrier a tile (the kernel's, after its shifted copy).
// Not part of the build: a standalone measurement, with its own instructions so that it depends on
// nothing in the library:
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_chain_stages bench/wgmma_chain_stages.cu && /tmp/wgmma_chain_stages
#include <cuda_runtime.h>

#include <cstdio>

constexpr int kSlices = 23, kTileWords = 3328;  // the reference's slices and tile (13 KB)

#define D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
__device__ __forceinline__ void mma(float (&d)[32], const unsigned (&a)[4], unsigned long long b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, "
      "%34, %35}, %36, p, 1, 1, 1;\n}\n"
      : D8(0), D8(8), D8(16), D8(24)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ unsigned long long descriptor(const void* p) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16) |
         ((unsigned long long)(256 >> 4) << 32);
}

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
  const unsigned long long w_desc = descriptor(w);
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
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      mma(d, a[s & 1], w_desc + (WALK ? s * 128 : 0), s > 0);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      if (s + 1 < kSlices) {
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        gather(s + 1, a[(s + 1) & 1]);
      }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
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
