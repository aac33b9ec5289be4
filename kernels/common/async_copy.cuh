#pragma once
// cp.async helpers (sm_80+; older archs fall back to a plain load and store).
#include "common/tf32.cuh"

namespace conv3djit {

// BYTES-byte (4 or 16) global -> shared copy that zero-fills when !valid (src is then not read);
// both addresses BYTES-aligned. 16-byte copies skip L1 (.cg), which 4-byte ones may not.
template <int BYTES = 4>
__device__ __forceinline__ void copy_or_zero(float* dst, const float* src, bool valid) {
  static_assert(BYTES == 4 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes; these kernels use 4 and 16");
#if __CUDA_ARCH__ >= 800
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(valid ? 16 : 0));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(addr), "l"(src), "r"(valid ? 4 : 0));
  }
#else
  for (int i = 0; i < BYTES / 4; ++i) dst[i] = valid ? __ldg(src + i) : 0.f;
#endif
}

// Asks L2 for the line holding `p` (a hint: nothing waits for it).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

__device__ __forceinline__ void copies_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N committed copy groups are still in flight (this thread's copies only).
template <int N>
__device__ __forceinline__ void copies_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// 16 bytes from global `src` to shared address `dst`, zero where !valid (src is then not read);
// by cp.async where `vector` (src 16-byte aligned), else by element loads (T's size) and one
// 16-byte store, float32 elements rounded to TF32. sm_80 or newer (the kernels that call it).
template <class T>
__device__ __forceinline__ void copy16(unsigned dst, const void* src, bool valid, bool vector) {
  if (vector) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
  } else {
    unsigned w[4] = {0u, 0u, 0u, 0u};
    if (valid) {
      if constexpr (sizeof(T) == 4) {
        const auto* s = static_cast<const unsigned*>(src);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = __float_as_uint(to_tf32(__uint_as_float(__ldg(s + i))));
      } else {
        const auto* s = static_cast<const unsigned short*>(src);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = unsigned(__ldg(s + 2 * i)) | (unsigned(__ldg(s + 2 * i + 1)) << 16);
      }
    }
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                 "r"(w[3]));
  }
}

}  // namespace conv3djit
