// An NCDHW input copied as float32 into rows of W rounded up to a multiple of 4 floats, for
// igemm_sm90's TMA boxes: a tensor map's strides must be 16-byte multiples (the map then leaves
// the extra columns out; they are written as zeros), and the kernel stages floats whatever the
// input's type (bf16 and fp16 widen exactly). Shape-generic: one cubin an element type serves
// every layer. A thread writes 16 bytes of one row, reading its (up to) four elements one by one,
// since a row of the input starts wherever W puts it. Arguments as the convolution's; `out` is
// the scratch copy.
#pragma once
#include "common/element.cuh"

namespace conv3djit {

template <class Spec>
__global__ void __launch_bounds__(256)
pitch_rows(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__,
           const typename Spec::element* __restrict__, float* __restrict__ out, ConvParams p) {
  const long long quads = (p.w + 3) / 4, total = p.n * p.c * p.d * p.h * quads;
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < total; i += gridDim.x * 256LL) {
    long long row = i;
    const int x = 4 * static_cast<int>(take_remainder(row, quads));
    const typename Spec::element* src = in + row * p.w + x;
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = x + e < p.w ? load_float(src + e) : 0.f;
    reinterpret_cast<float4*>(out)[i] = make_float4(v[0], v[1], v[2], v[3]);
  }
}

}  // namespace conv3djit
