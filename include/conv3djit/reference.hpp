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

/// Thresholds of an accuracy class (docs/design.md, Accuracy classes).
struct Tolerance {
  double rel_l2;        ///< ||got - ref|| / ||ref||
  double atol, rtol;    ///< elementwise: |got - ref| <= atol + rtol * |ref|; negative = not checked
};
CONV3DJIT_API Tolerance tolerance(Precision precision) noexcept;

/// How far a float result is from the reference.
struct Comparison {
  double rel_l2 = 0;
  double max_abs_error = 0;
  int64_t outside_tolerance = 0;  ///< elements failing the elementwise check
  int64_t non_finite = 0;         ///< NaN or Inf in the result (never written, or overflow)
  bool passed = false;            ///< all of the class's checks hold
};
CONV3DJIT_API Comparison compare(const float* got, const double* reference, int64_t count, Tolerance tol);

}  // namespace conv3djit
