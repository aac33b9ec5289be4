#pragma once
// Tensor-memory-accelerator (TMA) tile loads with an mbarrier per destination (sm_90+): one
// thread asks for a whole box of a tensor described by a TensorMap (encoded on the host); boxes
// that reach outside the tensor are filled with zeros, which is exactly convolution padding.
#include "common.cuh"

namespace conv3djit::tma {

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned smem(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem(bar)));
}

// Makes the barriers' initialisation visible to the TMA unit.
__device__ __forceinline__ void fence_init() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Loads the box at (x, y, z, w) (innermost first; may be negative) into dst, whose barrier then
// completes once `bytes` have landed.
__device__ __forceinline__ void load_4d(float* dst, const TensorMap& map, int x, int y, int z, int w,
                                        unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem(bar)), "r"(bytes) : "memory");
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem(dst)),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(smem(bar))
      : "memory");
}

// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem(bar)),
      "r"(parity)
      : "memory");
}
#endif

}  // namespace conv3djit::tma
