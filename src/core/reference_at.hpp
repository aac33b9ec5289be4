#pragma once
// One output of the float64 reference, for checks that sample a large output instead of
// computing all of it (tune/: every candidate's accuracy).
#include <cstdint>
#include <functional>

#include "core/problem.hpp"

namespace conv3djit::detail {

enum class RefTensor { Input, Weight, Bias, Residual };

/// Element `i` of a tensor, in the description's layout (the weight: K x C/g x KD x KH x KW for
/// NCDHW, K x KD x KH x KW x C/g for NDHWC), as a double.
using TensorReader = std::function<double(RefTensor tensor, int64_t i)>;

/// Output element `index` (in the description's layout) of prob, epilogue included, exactly as
/// reference_conv3d computes it.
double reference_at(const Problem& prob, const TensorReader& read, int64_t index);

}  // namespace conv3djit::detail
