// Times three ways to copy the reference problem's input (16 x 3 x 64 x 64 rows of W floats) on
// one GPU, best of 20 each: cuMemcpy2DAsync into rows of W rounded up to 4 floats (what the first
// pitched copy used), a plain kernel doing the same (one 16-byte store a thread: what
// the pitch_rows kernel does), and a 1D copy of the same bytes (the bandwidth ceiling). The
// figures in docs/kernels/helpers.md (H200, 2026-12-01) were measured with exactly this program:
//   nvcc -arch=sm_90 -O2 -o /tmp/pitch_copy_methods bench/pitch_copy_methods.cu -lcuda && /tmp/pitch_copy_methods
// Not part of the build: a standalone measurement.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
__global__ void pitch_rows(const float* __restrict__ in, float* __restrict__ out, long long rows, int w, int p) {
  const long long groups = rows * (p / 4);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < groups; i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / (p / 4);
    const int c = static_cast<int>(i % (p / 4)) * 4;
    const float* src = in + r * w + c;
    float4 v;
    v.x = c < w ? __ldg(src) : 0.f;
    v.y = c + 1 < w ? __ldg(src + 1) : 0.f;
    v.z = c + 2 < w ? __ldg(src + 2) : 0.f;
    v.w = c + 3 < w ? __ldg(src + 3) : 0.f;
    reinterpret_cast<float4*>(out + r * p)[c / 4] = v;
  }
}
int main() {
  for (int w : {66, 63, 45, 110}) {
    const int p = (w + 3) / 4 * 4;
    const long long rows = 16LL * 3 * 64 * 64;
    float *in, *out;
    cudaMalloc(&in, rows * w * 4 + 16); cudaMalloc(&out, rows * p * 4);
    cudaMemset(in, 0, rows * w * 4);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int mode = 0; mode < 3; ++mode) {
      float best = 1e9;
      for (int it = 0; it < 20; ++it) {
        cudaEventRecord(a);
        if (mode == 0) {
          CUDA_MEMCPY2D m{}; m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
          m.srcDevice = (CUdeviceptr)in; m.srcPitch = m.WidthInBytes = w * 4; m.dstDevice = (CUdeviceptr)out; m.dstPitch = p * 4; m.Height = rows;
          cuMemcpy2DAsync(&m, 0);
        } else if (mode == 1) {
          pitch_rows<<<132 * 8, 256>>>(in, out, rows, w, p);
        } else {
          cudaMemcpyAsync(out, in, rows * w * 4, cudaMemcpyDeviceToDevice);
        }
        cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); if (ms < best) best = ms;
      }
      printf("W=%d %s: %.1f us (%.2f TB/s)\n", w, mode == 0 ? "cuMemcpy2DAsync" : mode == 1 ? "kernel" : "1D memcpy", best * 1e3,
             (rows * (w + p) * 4.0) / (best * 1e-3) / 1e12);
    }
    cudaFree(in); cudaFree(out);
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
