// An NCDHW tensor rewritten channels-last, for igemm_sm90_half, whose A and B rows are one tap's
// channels: the input [N][C][D·H·W] -> [N][D·H·W][C] (Spec::weights 0) or the weight
// [K][C][KD·KH·KW] -> [K][KD·KH·KW][C] (1). Shape-generic: one cubin per element type and tensor.
// C is a multiple of 8 for 16-bit elements and of 4 for float32 ones (the consumer's rule), so
// every output row is whole 16-byte pieces. Float32 values (the tf32 class) are rounded to TF32 on
// the way (the consumer's tensor cores would truncate them).
//
// A block transposes 64 x 64 tiles (channels x positions) through shared memory: reads run along
// positions (one element a lane, 64 consecutive lanes a channel row), writes along channels (16
// bytes a lane: 8 lanes a position's 64 halves, 16 lanes its 64 floats). Arguments as the
// convolution's; `out` is the scratch.
#pragma once
#include "common/element.cuh"
#include "common/tf32.cuh"

namespace conv3djit {

template <class Spec>
__global__ void __launch_bounds__(256)
channels_last(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
              const typename Spec::element* __restrict__, typename Spec::element* __restrict__ out, ConvParams p) {
  constexpr bool kWords = sizeof(typename Spec::element) == 4;
  using Bits = select_t<kWords, unsigned, unsigned short>;
  // An odd word pitch: a channel row a bank apart.
  constexpr int kTile = 64, kPitch = kTile + (kWords ? 1 : 2);
  __shared__ Bits tile[kTile][kPitch];  // [channel][position]
  const auto* src = reinterpret_cast<const Bits*>(Spec::weights ? wt : in);
  const long long batches = Spec::weights ? p.k : p.n;
  const long long c_total = Spec::weights ? p.c_per_group : p.c;
  const long long s_total = Spec::weights ? static_cast<long long>(p.kd) * p.kh * p.kw : p.d * p.h * p.w;
  const long long s_tiles = (s_total + kTile - 1) / kTile, c_tiles = (c_total + kTile - 1) / kTile;
  const long long tiles = batches * c_tiles * s_tiles;
  const int tid = threadIdx.x;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    long long b = t;
    const long long s0 = take_remainder(b, s_tiles) * kTile;
    const long long c0 = take_remainder(b, c_tiles) * kTile;
    {
      const int s = tid & 63;
      const bool s_ok = s0 + s < s_total;
      const Bits* row = src + (b * c_total + c0) * s_total + s0 + s;
#pragma unroll
      for (int i = 0; i < kTile / 4; ++i) {
        const int c = 4 * i + (tid >> 6);
        tile[c][s] = s_ok && c0 + c < c_total ? __ldg(row + c * s_total) : 0;
      }
    }
    __syncthreads();
    // A 16-byte piece a lane: 8 halves (8 lanes a position) or 4 floats (16 lanes), rounded to TF32.
    constexpr int kShift = kWords ? 4 : 3, kLanes = 1 << kShift, kPiece = kTile / kLanes;
    const int piece = tid & (kLanes - 1);
#pragma unroll
    for (int r = 0; r < kTile * kLanes / 256; ++r) {
      const int s = (tid >> kShift) + (256 >> kShift) * r;
      if (s0 + s >= s_total || c0 + kPiece * piece >= c_total) continue;
      unsigned w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kWords) {
          w[e] = __float_as_uint(to_tf32(__uint_as_float(tile[4 * piece + e][s])));
        } else {
          w[e] = unsigned(tile[8 * piece + 2 * e][s]) | (unsigned(tile[8 * piece + 2 * e + 1][s]) << 16);
        }
      }
      *reinterpret_cast<uint4*>(out + ((b * s_total + s0 + s) * c_total + c0 + kPiece * piece)) =
          make_uint4(w[0], w[1], w[2], w[3]);
    }
    __syncthreads();
  }
}

}  // namespace conv3djit
