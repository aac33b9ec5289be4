// An input copied as float32 into NCDHW rows of W rounded up to a multiple of 4 floats, for
// igemm_sm90's TMA boxes: a tensor map's strides must be 16-byte multiples (the map then leaves
// the extra columns out; NCDHW copies write them as zeros), and the kernel stages floats whatever
// the input's type (bf16 and fp16 widen exactly) and layout (an NDHWC input is transposed here).
// Shape-generic: one cubin an element type and layout serves every layer. Arguments as the
// convolution's; `out` is the scratch copy.
#pragma once
#include "common/element.cuh"
#include "pitch_rows/geometry.cuh"

namespace conv3djit {

template <class Spec>
__global__ void __launch_bounds__(256)
pitch_rows(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__,
           const typename Spec::element* __restrict__, float* __restrict__ out, ConvParams p) {
  if constexpr (Spec::ndhwc != 0) {
    // Image n's positions are one run of D x H x W, each holding its C channels. A block takes
    // consecutive steps of 64 positions of one image (pitch_rows_steps of them) and 32 of its
    // channels (all of them where C <= 32), a step at a time through shared memory: it reads the
    // positions' channels as one flat range where it has every channel, else as 128-byte runs,
    // and writes each channel's 64 positions, contiguous unless rows are padded to the pitch.
    // Those columns past W are left unwritten: the tensor map's extent is W, and cp.async staging
    // and the border passes read columns below W only. (Tiles of 32 x 32 found by a grid-stride
    // loop spent ~100 instructions an element on index arithmetic: 1.5 TB/s.)
    constexpr int kStep = 64;
    __shared__ float tile[kStep][33];  // [position][channel]: a position's channels a bank apart
    const long long positions = p.d * p.h * p.w, pitch = (p.w + 3) / 4 * 4;
    const long long span_positions = kStep * pitch_rows_steps(p.n, p.c, positions);
    const long long chan_tiles = (p.c + 31) / 32, spans = (positions + span_positions - 1) / span_positions;
    const int tid = threadIdx.x, tx = tid & 31, ty = tid >> 5, w = static_cast<int>(p.w);
    for (long long b = blockIdx.x; b < p.n * chan_tiles * spans; b += gridDim.x) {
      const long long span = b % spans, image = b / spans, n = image / chan_tiles;
      const long long c0 = (image - n * chan_tiles) * 32;
      const int cn = static_cast<int>(p.c - c0 < 32 ? p.c - c0 : 32);
      const float inv = 1.f / static_cast<float>(cn);  // f / cn below, exact for f < 2^11
      const typename Spec::element* src = in + n * positions * p.c + c0;
      float* dst = out + (n * p.c + c0) * (p.d * p.h) * pitch;
      for (long long s0 = span * span_positions; s0 < (span + 1) * span_positions && s0 < positions; s0 += kStep) {
        const int count = static_cast<int>(positions - s0 < kStep ? positions - s0 : kStep);
        const typename Spec::element* from = src + s0 * p.c;
        if (cn == p.c) {  // the positions' channels: one flat range
          for (int f = tid; f < count * cn; f += 256) {
            const int x = static_cast<int>((static_cast<float>(f) + 0.5f) * inv), c = f - x * cn;
            tile[x][c] = load_float(from + f);
          }
        } else {
#pragma unroll
          for (int x = ty; x < kStep; x += 8) {
            if (x < count && tx < cn) tile[x][tx] = load_float(from + x * p.c + tx);
          }
        }
        __syncthreads();
        for (int c = ty; c < cn; c += 8) {
          float* plane = dst + c * (p.d * p.h) * pitch;
#pragma unroll
          for (int x = tx; x < kStep; x += 32) {
            if (x >= count) continue;
            const int at = static_cast<int>(s0) + x;  // (the planner keeps an image's positions below 2^31)
            plane[pitch == w ? at : static_cast<long long>(at / w) * pitch + at % w] = tile[x][c];
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
