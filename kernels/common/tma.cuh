#pragma once
// Hopper bulk copies (TMA, sm_90+) completing on shared-memory mbarriers.
//
// A TensorMap is the driver's 128-byte CUtensorMap (cuTensorMapEncodeTiled on the host), passed
// as a __grid_constant__ kernel parameter: NVRTC sees no cuda.h, so it is opaque here.

namespace conv3djit {

struct alignas(64) TensorMap {
  unsigned long long words[16];
};

namespace tma {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// One arrival (this thread's) per phase; the phase completes when the expected bytes have landed.
__device__ __forceinline__ void init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(bar)) : "memory");
}

// A barrier whose phase completes after `count` plain arrivals (arrive()).
__device__ __forceinline__ void init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// One plain arrival of this thread.
__device__ __forceinline__ void arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// This thread's arrival, announcing the bytes the copies issued next will deliver.
__device__ __forceinline__ void arrive_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// Waits until the phase with this parity (0, 1, 0, ... for consecutive uses) has completed.
__device__ __forceinline__ void wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Box of a 5-D tiled map at (x, y, z, c, n), innermost first. Out-of-bounds elements (negative
// coordinates included) arrive as zeros. x must be a multiple of 4 floats: other origins raised
// CUDA_ERROR_ILLEGAL_INSTRUCTION on the H200 (docs/kernels/igemm_sm90.md).
__device__ __forceinline__ void load_box(void* dst, const TensorMap& map, int x, int y, int z, int c, int n,
                                         unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(z), "r"(c), "r"(n), "r"(smem_addr(bar))
      : "memory");
}

// Pixels of a 5-D im2col map (cuTensorMapEncodeIm2col) from the window origin (x, y, z) of image
// n, channels from c, each read at the origin plus (ox, oy, oz), the tap's offset: the map's
// pixels-per-column origins walked through its bounding box. Elements outside the tensor arrive
// as zeros.
__device__ __forceinline__ void load_im2col(void* dst, const TensorMap& map, int c, int x, int y, int z, int n,
                                            unsigned short ox, unsigned short oy, unsigned short oz,
                                            unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7], {%8, %9, %10};\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c), "r"(x), "r"(y), "r"(z), "r"(n), "r"(smem_addr(bar)),
      "h"(ox), "h"(oy), "h"(oz)
      : "memory");
}

// Box of a 3-D tiled map at (x, y, z), innermost first; out-of-bounds elements arrive as zeros.
__device__ __forceinline__ void load_box(void* dst, const TensorMap& map, int x, int y, int z,
                                         unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
}

// Box of a 2-D tiled map at (x, y), innermost first; out-of-bounds elements arrive as zeros.
__device__ __forceinline__ void load_box(void* dst, const TensorMap& map, int x, int y, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}

// Contiguous global -> shared copy; addresses 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void load_bytes(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Box of a 4-D tiled map at (x, y, z, w), innermost first, from shared memory (128-byte aligned),
// in this thread's current bulk group; elements outside the tensor are not written. Every thread
// that wrote the source must first make it visible to the async proxy (fence_shared_to_async).
__device__ __forceinline__ void store_box(const TensorMap& map, const void* src, int x, int y, int z, int w) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<unsigned long long>(&map)),
               "r"(x), "r"(y), "r"(z), "r"(w), "r"(smem_addr(src))
               : "memory");
}
// The 3-D form of store_box, at (x, y, z).
__device__ __forceinline__ void store_box(const TensorMap& map, const void* src, int x, int y, int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   reinterpret_cast<unsigned long long>(&map)),
               "r"(x), "r"(y), "r"(z), "r"(smem_addr(src))
               : "memory");
}
__device__ __forceinline__ void commit_stores() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's store groups still read their shared-memory source.
template <int N>
__device__ __forceinline__ void wait_store_reads() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_shared_to_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace tma
}  // namespace conv3djit
