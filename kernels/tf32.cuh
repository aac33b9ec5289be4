#pragma once
// TF32 rounding for the tensor-core kernels.

namespace conv3djit {

// Round to nearest (ties away) to TF32's 10-bit mantissa; the tensor cores would truncate.
__device__ __forceinline__ float to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

}  // namespace conv3djit
