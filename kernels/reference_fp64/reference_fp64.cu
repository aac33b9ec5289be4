// Float64 reference on the GPU: one thread per output, double accumulation, every shape
// parameter (the padding mode too) at run time, the epilogue in double; the output doubles in the
// description's layout. Element types and layout are compile-time. Obviously correct rather than fast; the oracle for
// big problems.
#pragma once
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/padding.cuh"

namespace conv3djit {

template <class Spec>
__global__ void reference_fp64(const typename Spec::element* __restrict__ in,
                               const typename Spec::element* __restrict__ wt,
                               const typename Spec::element* __restrict__ bias, double* __restrict__ out,
                               ConvParams p) {
  const long long total = p.n * p.k * p.od * p.oh * p.ow;
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    // idx is the output's own offset in its layout.
    long long t = idx, k;
    if constexpr (Spec::ndhwc != 0) k = take_remainder(t, p.k);
    const long long ow = take_remainder(t, p.ow);
    const long long oh = take_remainder(t, p.oh);
    const long long od = take_remainder(t, p.od);
    if constexpr (Spec::ndhwc == 0) k = take_remainder(t, p.k);
    const long long n = t;
    const long long g = k / p.k_per_group;
    const ActivationStrides is = activation_strides<Spec::ndhwc>(p.c, p.d, p.h, p.w);
    const ActivationStrides ws = weight_strides<Spec::ndhwc>(p.c_per_group, p.kd, p.kh, p.kw);
    double acc = 0.0;
    for (int c = 0; c < p.c_per_group; ++c) {
      for (int kd = 0; kd < p.kd; ++kd) {
        const long long id = padding::source(p.pad_mode, od * p.sd - p.pad_d + (long long)kd * p.dd, p.d);
        if (id < 0) continue;
        for (int kh = 0; kh < p.kh; ++kh) {
          const long long ih = padding::source(p.pad_mode, oh * p.sh - p.pad_h + (long long)kh * p.dh, p.h);
          if (ih < 0) continue;
          for (int kw = 0; kw < p.kw; ++kw) {
            const long long iw = padding::source(p.pad_mode, ow * p.sw - p.pad_w + (long long)kw * p.dw, p.w);
            if (iw < 0) continue;
            const double x = load_float(in + n * is.n + (g * p.c_per_group + c) * is.c + id * is.d + ih * is.h + iw * is.w);
            const double w = load_float(wt + k * ws.n + c * ws.c + kd * ws.d + kh * ws.h + kw * ws.w);
            acc += x * w;
          }
        }
      }
    }
    out[idx] = epilogue::apply<Spec>(acc, p.has_bias ? (double)load_float(bias + k) : 0.0, idx, p);
  }
}

}  // namespace conv3djit
