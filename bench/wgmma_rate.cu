// The tensor-core rate of bf16 wgmma chains with nothing else in the loop, on every SM: m64nNk16
// with A from registers (RS, as igemm_sm90_k16 issues them) or from shared memory (SS), N = 64 or
// 128, one to four warpgroups a block, each warpgroup keeping at most two groups of CHAIN wgmmas in
// flight (wait 1, as the kernel's chain). What the products alone reach, against which a kernel's
// rate is read. The figures in docs/kernels/igemm_sm90_k16.md (H200, 2026-12-04) were measured
// with exactly this program:
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_rate bench/wgmma_rate.cu && /tmp/wgmma_rate
// Not part of the build: a standalone measurement, with its own instructions so that it depends on
// nothing in the library. The operands' values and layouts do not matter to the rate (fixed bit
// patterns; the descriptors name no particular layout). ptxas serializes the RS chain=1 variant
// (C7515: the accumulators are zeroed by ordinary code), so its figure is a lower bound.
#include <cstdio>
#include <cuda_runtime.h>
__device__ __forceinline__ unsigned long long desc(const void* p) {
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  return (unsigned long long)((a & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16) | ((unsigned long long)(256 >> 4) << 32);
}
#define R8(i) "+f"(d[i]), "+f"(d[i+1]), "+f"(d[i+2]), "+f"(d[i+3]), "+f"(d[i+4]), "+f"(d[i+5]), "+f"(d[i+6]), "+f"(d[i+7])
template <int N, bool RS> __device__ __forceinline__ void mma(float* d, const unsigned* a, unsigned long long ad, unsigned long long b);
template <> __device__ __forceinline__ void mma<64, true>(float* d, const unsigned* a, unsigned long long, unsigned long long b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
    : R8(0), R8(8), R8(16), R8(24) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
template <> __device__ __forceinline__ void mma<64, false>(float* d, const unsigned*, unsigned long long ad, unsigned long long b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;\n"
    : R8(0), R8(8), R8(16), R8(24) : "l"(ad), "l"(b));
}
template <> __device__ __forceinline__ void mma<128, true>(float* d, const unsigned* a, unsigned long long, unsigned long long b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, 1, 1, 1, 1;\n"
    : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
template <> __device__ __forceinline__ void mma<128, false>(float* d, const unsigned*, unsigned long long ad, unsigned long long b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, 1, 1, 1, 0, 0;\n"
    : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56) : "l"(ad), "l"(b));
}
template <int N, bool RS, int CHAIN>
__global__ void probe(float* out, int iters) {
  __shared__ __align__(1024) unsigned short sm[64 * 16 * 8 + 256 * 16 * 8];
  for (int i = threadIdx.x; i < sizeof(sm) / 2; i += blockDim.x) sm[i] = 0x3c00 ^ (i & 7);
  __syncthreads();
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  unsigned a[4] = {threadIdx.x, threadIdx.x * 3u, 7u, 9u};
  unsigned long long ad = desc(sm), bd = desc(sm + 64 * 16 * 8);
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int c = 0; c < CHAIN; ++c) mma<N, RS>(d, a, ad + 2 * c, bd + 2 * c);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  float s = 0; for (int i = 0; i < N / 2; ++i) s += d[i];
  if (s == 1234.5f) out[threadIdx.x] = s;
}
template <int N, bool RS, int CHAIN> void run(int wgs) {
  float* o; cudaMalloc(&o, 4096);
  int iters = 4000, blocks = 132;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  probe<N, RS, CHAIN><<<blocks, wgs * 128>>>(o, 10);
  cudaEventRecord(e0);
  probe<N, RS, CHAIN><<<blocks, wgs * 128>>>(o, iters);
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  double flops = 2.0 * 64 * N * 16 * CHAIN * (double)iters * wgs * blocks;
  printf("N=%3d %s chain=%d wgs=%d: %.1f TFLOP/s (%s)\n", N, RS ? "RS" : "SS", CHAIN, wgs, flops / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
}
int main() {
  for (int w : {1, 2, 4}) { run<64, true, 1>(w); run<64, true, 4>(w); run<64, false, 4>(w); run<128, true, 4>(w); run<128, false, 4>(w); }
}
