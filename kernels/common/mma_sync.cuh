#pragma once
// Warp-level tensor-core operations of 16-bit operands (mma.sync, ldmatrix; sm_80 or newer),
// shared by the kernels that stage their operands in shared memory a warp at a time.
#include "common/element.cuh"

namespace conv3djit {

// d += a * b on one m16n8k16 tile, T (bf16 or fp16) products summed in float32.
template <class T>
__device__ __forceinline__ void mma_half(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  if constexpr (kIsBf16<T>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Four 8 x 8 matrices of 16-bit elements from shared memory: lane l gives the (shared-window)
// address of row l % 8 of matrix l / 8 and receives its part of each.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  ldmatrix_x4(r, static_cast<unsigned>(__cvta_generic_to_shared(row)));
}

}  // namespace conv3djit
