#pragma once
// TF32 rounding for the tensor-core kernels.

namespace conv3djit {

// Round to nearest (ties away) to TF32's 10-bit mantissa; the tensor cores would truncate.
// Exact and NaN/Inf-safe, but ptxas expands it to ~4 instructions on sm_90: used where values
// are prepared once (weights), not in the A gather (below).
__device__ __forceinline__ float to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

// The same rounding in one or two integer operations, for operands gathered in the inner loop.
// The tensor cores ignore an operand's low 13 bits, so adding half a TF32 ulp to the bit pattern
// and letting them truncate rounds to nearest (ties away).
//
// tf32_operand: the register to hand to the tensor cores. max(bits + half, bits) as signed
// integers keeps the positive NaNs whose mantissa would carry into the sign bit (CUDA's
// canonical 0x7fffffff); a negative NaN of the form 0xfffffxxx would read as +0.
__device__ __forceinline__ unsigned tf32_operand(float x) {
  const int bits = __float_as_int(x), rounded = static_cast<int>(__float_as_uint(x) + 0x1000u);
  return static_cast<unsigned>(max(rounded, bits));
}

// tf32_big: the rounded value itself (low bits cleared), so that x - big is exact: 3xTF32's
// big part. A NaN may round to a number here, but x - big is then NaN and carries it.
__device__ __forceinline__ float tf32_big(float x) {
  return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}

}  // namespace conv3djit
