// A float32 weight rounded to TF32 for kernels whose tensor cores read it straight from shared
// memory (igemm_sm90_half in the tf32 class), where they would truncate it: each element as
// tf32_operand gives it (half a TF32 ulp added; the truncation then rounds to nearest), in the
// weight's own layout. Shape-generic: one cubin. Arguments as the convolution's; `out` is the
// scratch the convolution then reads as its weight.
#pragma once
#include "common/common.cuh"
#include "common/tf32.cuh"

namespace conv3djit {

template <class Spec>
__global__ void __launch_bounds__(256)
tf32_weights(const float* __restrict__, const float* __restrict__ wt, const float* __restrict__, float* __restrict__ out,
             ConvParams p) {
  const long long count = p.k * p.c_per_group * p.kd * p.kh * p.kw;
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < count; i += gridDim.x * 256ll) {
    out[i] = __uint_as_float(tf32_operand(__ldg(wt + i)));
  }
}

}  // namespace conv3djit
