// An input copied as float32 into NCDHW rows of W rounded up to a multiple of 4 floats, for
// igemm_sm90's TMA boxes: a tensor map's strides must be 16-byte multiples (the map then leaves
// the extra columns out; they are written as zeros), and the kernel stages floats whatever the
// input's type (bf16 and fp16 widen exactly) and layout (an NDHWC input is transposed here).
// Shape-generic: one cubin an element type and layout serves every layer. Arguments as the
// convolution's; `out` is the scratch copy.
#pragma once
#include "common/element.cuh"

namespace conv3djit {

template <class Spec>
__global__ void __launch_bounds__(256)
pitch_rows(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__,
           const typename Spec::element* __restrict__, float* __restrict__ out, ConvParams p) {
  if constexpr (Spec::ndhwc != 0) {
    // A block transposes tiles of 32 columns x 32 channels of one input row (n, d, h) through
    // shared memory: it reads the tile's 32 runs of (up to) 32 channels, each contiguous, as one
    // flat range, and writes each channel's 32 columns, 128 contiguous bytes.
    __shared__ float tile[32][33];  // [column][channel]: a column's channels a bank apart
    const long long rows = p.n * p.d * p.h, pitch = (p.w + 3) / 4 * 4, dh = p.d * p.h;
    const long long col_tiles = (pitch + 31) / 32, chan_tiles = (p.c + 31) / 32;
    const long long tiles = rows * col_tiles * chan_tiles;
    const int tid = threadIdx.x, tx = tid & 31, ty = tid >> 5;
    for (long long i = blockIdx.x; i < tiles; i += gridDim.x) {
      long long row = i;
      const long long c0 = take_remainder(row, chan_tiles) * 32;
      const long long w0 = take_remainder(row, col_tiles) * 32;
      const int cn = static_cast<int>(p.c - c0 < 32 ? p.c - c0 : 32);
      const typename Spec::element* src = in + (row * p.w + w0) * p.c + c0;
      for (int f = tid; f < 32 * cn; f += 256) {
        const int x = f / cn, c = f % cn;
        tile[x][c] = w0 + x < p.w ? load_float(src + static_cast<long long>(x) * p.c + c) : 0.f;
      }
      __syncthreads();
      const long long n = row / dh, plane_row = row % dh;
      for (int c = ty; c < cn; c += 8) {
        if (w0 + tx < pitch) out[((n * p.c + c0 + c) * dh + plane_row) * pitch + w0 + tx] = tile[tx][c];
      }
      __syncthreads();
    }
  } else {
    // A thread writes 16 bytes of one row, reading its (up to) four elements one by one, since a
    // row of the input starts wherever W puts it.
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
}

}  // namespace conv3djit
