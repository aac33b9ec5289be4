#pragma once
/// The float64 CPU reference conv3djit is measured against, and the accuracy classes' tolerances.
#include <cstdint>

#include "conv3djit/conv3d.hpp"
#include "conv3djit/export.hpp"

namespace conv3djit {

/// Exact (float64 accumulation) conv3d of host tensors laid out as Conv3dTensors describes, with
/// the description's epilogue in float64; bias may be null when desc.bias is false, residual when
/// desc.epilogue.residual is false. output holds N x K x OD x OH x OW doubles. Uses all cores.
/// Throws Error(InvalidArgument) for an invalid description or a missing tensor.
CONV3DJIT_API void reference_conv3d(const Conv3dDesc& desc, const float* input, const float* weight,
                                    const float* bias, const float* residual, double* output);
/// The same for a description without a residual.
CONV3DJIT_API void reference_conv3d(const Conv3dDesc& desc, const float* input, const float* weight,
                                    const float* bias, double* output);
/// The same for every element type and layout: input, weight and bias hold desc.dtype elements
/// (floats, or the 16-bit patterns of half.hpp), the residual output_dtype(desc) elements, all in
/// desc.layout's order; output holds the doubles in desc.layout's order. Half inputs are taken
/// exactly, so the result is what the kernels' float32 sums approximate.
CONV3DJIT_API void reference_conv3d(const Conv3dDesc& desc, const void* input, const void* weight,
                                    const void* bias, const void* residual, double* output);

/// Thresholds of an accuracy class (docs/design.md, Accuracy classes).
struct Tolerance {
  double rel_l2;        ///< ||got - ref|| / ||ref||
  double atol, rtol;    ///< elementwise: |got - ref| <= atol + rtol * |ref|; negative = not checked
};
CONV3DJIT_API Tolerance tolerance(Precision precision) noexcept;
/// The class of a description: its precision's for float32 inputs; for half inputs their type's,
/// rel-L2 <= 4e-3 (bf16 output) or 5e-4 (fp16 output), about twice what rounding the exact result
/// to the type costs, and 1e-5 for a float32 output.
CONV3DJIT_API Tolerance tolerance(const Conv3dDesc& desc) noexcept;

/// How far a float result is from the reference.
struct Comparison {
  double rel_l2 = 0;
  double max_abs_error = 0;
  int64_t outside_tolerance = 0;  ///< elements failing the elementwise check
  int64_t non_finite = 0;         ///< NaN or Inf in the result (never written, or overflow)
  bool passed = false;            ///< all of the class's checks hold
};
CONV3DJIT_API Comparison compare(const float* got, const double* reference, int64_t count, Tolerance tol);
/// The same for count elements of `type` at got.
CONV3DJIT_API Comparison compare(const void* got, DataType type, const double* reference, int64_t count,
                                 Tolerance tol);

}  // namespace conv3djit
