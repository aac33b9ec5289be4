// An NCDHW tensor rewritten channels-last, for igemm_sm90_half, whose A and B rows are one tap's
// channels: the input [N][C][D·H·W] -> [N][D·H·W][C] (Spec::weights 0) or the weight
// [K][C][KD·KH·KW] -> [K][KD·KH·KW][C] (1). Shape-generic: one cubin per element type and tensor.
// C is a multiple of 8 for 16-bit elements and of 4 for float32 ones (the consumer's rule), so
// every output row is whole 16-byte pieces. Float32 values (the tf32 class) are rounded to TF32 on
// the way (the consumer's tensor cores would truncate them).
//
// A block transposes 64 x 64 tiles (channels x positions) through shared memory: reads run along
// positions (one element a lane, 64 consecutive lanes a channel row), writes along channels (16
// bytes a lane: 8 lanes a position's 64 halves, 16 lanes its 64 floats); 16-bit inputs whose
// planes lie on 16 bytes move their tiles as TMA boxes instead (Spec::boxes, channels_last_boxes).
// Arguments as the convolution's, then the boxes' maps; `out` is the scratch.
#pragma once
#include "common/element.cuh"
#include "common/tf32.cuh"
#include "common/tma.cuh"

namespace conv3djit {

namespace channels_last_boxes {

inline constexpr int kTile = 64;                  // channels and positions of a tile
inline constexpr int kTileBytes = kTile * kTile * 2;  // 16-bit elements

/// The input copy by TMA boxes (Spec::boxes: 16-bit elements, D·H·W a multiple of 8, the input on
/// 16 bytes; sm_90): tiles of 64 channels x 64 positions of one image arrive as one box of the
/// input seen as (D·H·W, C, N), rows of a channel's 64 positions, 128-byte swizzled; the warps
/// transpose them by 8 x 8 blocks (ldmatrix .trans, stmatrix) into rows of a position's 64
/// channels, in the same swizzle, which leave as one box of the copy seen as (C, D·H·W, N).
/// Out-of-bounds elements load as zeros and are clipped from the store. Two buffers each way: a
/// block's next tile loads and its last one stores while it transposes this one.
template <int THREADS>
__device__ __forceinline__ void copy(const ConvParams& p, const TensorMap& in_map, const TensorMap& out_map) {
  __shared__ __align__(128) unsigned char raw[4 * kTileBytes + 1024];
  __shared__ unsigned long long full[2];
  unsigned char* const base = raw + ((1024u - (tma::smem_addr(raw) & 1023u)) & 1023u);
  unsigned char* const in_tile = base;                    // [2][channel][64 positions]
  unsigned char* const out_tile = base + 2 * kTileBytes;  // [2][position][64 channels]
  const long long s_tiles = (p.d * p.h * p.w + kTile - 1) / kTile, c_tiles = (p.c + kTile - 1) / kTile;
  const long long tiles = p.n * c_tiles * s_tiles;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
  if (tid == 0) {
    tma::init(full);
    tma::init(full + 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  auto origin = [&](long long t, int& s0, int& c0, int& n) {
    long long b = t;
    s0 = static_cast<int>(take_remainder(b, s_tiles)) * kTile;
    c0 = static_cast<int>(take_remainder(b, c_tiles)) * kTile;
    n = static_cast<int>(b);
  };
  auto load = [&](long long t, int buf) {
    int s0, c0, n;
    origin(t, s0, c0, n);
    tma::arrive_expect(full + buf, kTileBytes);
    tma::load_box(in_tile + buf * kTileBytes, in_map, s0, c0, n, full + buf);
  };
  if (tid == 0 && blockIdx.x < tiles) load(blockIdx.x, 0);
  int i = 0;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x, ++i) {
    const int buf = i & 1;
    if (tid == 0) {
      // The other buffer's last tile was read before the last barrier; this buffer's last store
      // (two tiles ago) must have left it before the warps write it again.
      if (t + gridDim.x < tiles) load(t + gridDim.x, buf ^ 1);
      tma::wait_store_reads<1>();
    }
    __syncthreads();
    tma::wait(full + buf, (i >> 1) & 1);
    // 64 blocks of 8 channels (co) x 8 positions (pj), four an instruction: lane L addresses row
    // L % 8 of block L / 8. A row's 16-byte chunk j lies at j ^ (row % 8) (the 128-byte swizzle).
    const unsigned from = tma::smem_addr(in_tile + buf * kTileBytes), to = tma::smem_addr(out_tile + buf * kTileBytes);
    const int m = lane >> 3, r = lane & 7;
#pragma unroll
    for (int u = warp; u < 16; u += THREADS / 32) {
      const int co = u >> 1, pj = (u & 1) * 4 + m;
      unsigned v[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                   : "r"(from + (co * 8 + r) * 128 + ((pj ^ r) << 4))
                   : "memory");
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                       to + (pj * 8 + r) * 128 + ((co ^ r) << 4)),
                   "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                   : "memory");
    }
    tma::fence_shared_to_async();
    __syncthreads();
    if (tid == 0) {
      int s0, c0, n;
      origin(t, s0, c0, n);
      tma::store_box(out_map, out_tile + buf * kTileBytes, c0, s0, n);
      tma::commit_stores();
    }
  }
  if (tid == 0) tma::wait_store_reads<0>();  // the buffers stay until the last store has read them
}

}  // namespace channels_last_boxes

template <class Spec>
__global__ void __launch_bounds__(Spec::boxes ? 128 : 256)
channels_last(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
              const typename Spec::element* __restrict__, typename Spec::element* __restrict__ out, ConvParams p,
              const __grid_constant__ TensorMap in_map, const __grid_constant__ TensorMap out_map) {
  if constexpr (Spec::boxes != 0) {
    static_assert(sizeof(typename Spec::element) == 2 && Spec::weights == 0, "boxes: 16-bit inputs");
    channels_last_boxes::copy<128>(p, in_map, out_map);
  } else {
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
}

}  // namespace conv3djit
