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
    // A block takes one input row (n, d, h) and 32 of its channels, and walks the row 64 columns
    // at a time through shared memory: it reads the 64 columns' runs of channels (coalesced: whole
    // 128-byte runs where C >= 32, else the columns' few channels as one flat range), then writes
    // each channel's 64 columns, 256 contiguous bytes. (Tiles of 32 x 32 found by a grid-stride
    // loop spent ~100 instructions an element on index arithmetic: 1.5 TB/s.)
    constexpr int kCols = 64;
    __shared__ float tile[kCols][33];  // [column][channel]: a column's channels a bank apart
    const long long dh = p.d * p.h, rows = p.n * dh, pitch = (p.w + 3) / 4 * 4;
    const long long chan_tiles = (p.c + 31) / 32;
    const int tid = threadIdx.x, tx = tid & 31, ty = tid >> 5;
    for (long long b = blockIdx.x; b < rows * chan_tiles; b += gridDim.x) {
      const long long row = b / chan_tiles, c0 = (b - row * chan_tiles) * 32;
      const int cn = static_cast<int>(p.c - c0 < 32 ? p.c - c0 : 32);
      const typename Spec::element* src = in + row * p.w * p.c + c0;
      float* dst = out + ((row / dh * p.c + c0) * dh + row % dh) * pitch;
      for (long long w0 = 0; w0 < pitch; w0 += kCols, src += kCols * p.c, dst += kCols) {
        const int cols = static_cast<int>(p.w - w0 < kCols ? (p.w - w0 > 0 ? p.w - w0 : 0) : kCols);
        if (cn == 32) {
#pragma unroll
          for (int x = ty; x < kCols; x += 8) tile[x][tx] = x < cols ? load_float(src + x * p.c + tx) : 0.f;
        } else {
          for (int f = tid; f < kCols * cn; f += 256) {
            const int x = f / cn, c = f - x * cn;
            tile[x][c] = x < cols ? load_float(src + x * p.c + c) : 0.f;
          }
        }
        __syncthreads();
        for (int c = ty; c < cn; c += 8) {
#pragma unroll
          for (int x = tx; x < kCols; x += 32) {
            if (w0 + x < pitch) dst[c * dh * pitch + x] = tile[x][c];
          }
        }
        __syncthreads();
      }
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
