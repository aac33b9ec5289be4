// Pointwise convolutions of bf16 / fp16 NCDHW tensors (1 x 1 x 1 windows, unit strides, no
// padding, one group) as the GEMMs they are, on Hopper's warpgroup MMA (wgmma, sm_90a), output in
// the input type or float32 (Spec::out_element).
//
// GEMM view, image by image: out[n] (K x P, P = D·H·W positions) = W (K x C) · in[n] (C x P). The
// weight is A as stored (K-major: a row of C channels an output channel); the input is B in N-major
// order (P contiguous), which wgmma reads transposed, so neither operand is copied and the
// accumulators hold pairs of adjacent positions of one output channel: NCDHW's order.
//
// Warp-specialised and persistent: one block an SM walks tiles t = blockIdx.x, + gridDim.x, ...
// of Spec::bm (128 or 256) output channels x Spec::bn positions of one image (channel blocks fastest, so that the
// blocks running together read the same input boxes from L2). Its producer warp issues, a chunk
// of 64 input channels at a time, one TMA box of the weight (64 channels x BM rows) and the
// input's boxes (64 positions x 64 channels each) into a ring of Spec::stages stages, each stage
// guarded by a full mbarrier (its bytes have landed) and an empty one (the eight consumer warps
// have finished reading it). Its two consumer warpgroups multiply BM / 2 output channels each of
// every tile (four wgmma k16 a chunk and 64 rows, every stage but the last one's released as soon
// as the next chunk's products are issued) and store their tile from the accumulators, while the
// producer already loads the next tile's chunks; or, with Spec::split, each warpgroup takes every
// other tile whole (BM = 128), so that one stores its tile while the other multiplies, each with a
// half of the ring of its own: a barrier's waiters must never be more than one phase behind it,
// which a warpgroup that skipped the other's chunks in a shared ring would be.
// Out-of-range channels, rows and positions arrive as the boxes' zeros; the stores skip them.
#pragma once
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/tma.cuh"
#include "common/wgmma_half.cuh"
#include "gemm_sm90/geometry.cuh"

namespace conv3djit {

// Lane t4 of a quad holds packed pairs w0 (positions 2 t4, 2 t4 + 1 of a 16-position run of one
// channel) and w1 (the same 8 further); stores positions 4 t4 .. 4 t4 + 3 of the run at `dst`
// (the run's start + 4 t4) where `ok`: one 8-byte store where dst lies on 8 bytes, else four. Every
// lane of the warp calls it (two shuffles). Positions 4 t4 .. are in lanes 2 (t4 % 2) and
// 2 (t4 % 2) + 1 of the quad, as their word t4 / 2: lane s sends w_(s % 2), then w_(1 - s % 2).
template <class Out>
__device__ __forceinline__ void store_quad(Out* dst, unsigned w0, unsigned w1, bool ok, int lane) {
  const int t4 = lane & 3, quad = lane & ~3, high = t4 >> 1;
  const unsigned first = __shfl_sync(0xffffffffu, (t4 & 1) ? w1 : w0, quad + 2 * (t4 & 1) + high);
  const unsigned second = __shfl_sync(0xffffffffu, (t4 & 1) ? w0 : w1, quad + 2 * (t4 & 1) + 1 - high);
  const unsigned lo = high ? second : first, hi = high ? first : second;
  const bool whole = ok && reinterpret_cast<unsigned long long>(dst) % 8 == 0;
  if (whole) *reinterpret_cast<uint2*>(dst) = make_uint2(lo, hi);
  if (ok && !whole) {
    dst[0].bits = static_cast<unsigned short>(lo & 0xffffu);
    dst[1].bits = static_cast<unsigned short>(lo >> 16);
    dst[2].bits = static_cast<unsigned short>(hi & 0xffffu);
    dst[3].bits = static_cast<unsigned short>(hi >> 16);
  }
}

template <class Spec>
__global__ void __launch_bounds__(gemm_sm90_geometry::kThreads, 1)
gemm_sm90(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
          const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out,
          ConvParams p, const __grid_constant__ TensorMap weight_map, const __grid_constant__ TensorMap input_map) {
  using namespace gemm_sm90_geometry;
  using T = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr int BM = Spec::bm, BN = Spec::bn, STAGES = Spec::stages, NB = boxes(BN), STAGE = stage_bytes(BM, BN);
  constexpr bool SPLIT = Spec::split != 0;
  constexpr int A_BYTES = BM * 128, R = BN / 2;
  constexpr int WG_ROWS = SPLIT ? BM : BM / 2, MB = WG_ROWS / 64;  // a consumer warpgroup's rows, m64 blocks
  static_assert(sizeof(T) == 2, "16-bit operands: tf32 wgmma reads K-major operands only");
  static_assert(BN % 16 == 0 && BN >= 64 && BN <= 256, "a tile of 64 to 256 positions, whole 16-position steps");
  static_assert(BM == 128 || BM == 256, "two consumer warpgroups of one or two m64 blocks");
  static_assert(!SPLIT || BM == 128, "a warpgroup's whole tile of two m64 blocks");
  static_assert(STAGES >= 2 && STAGES <= kMaxStages, "a ring of 2 to kMaxStages stages");
  static_assert(!SPLIT || (STAGES % 2 == 0 && STAGES >= 4), "two halves of at least two stages");
  constexpr int HALF = STAGES / 2;

  extern __shared__ uint4 shared_gemm_ring[];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(shared_gemm_ring));
  const unsigned ring = (base + 1023u) & ~1023u;
  char* const ring_ptr = reinterpret_cast<char*>(shared_gemm_ring) + (ring - base);
  auto* const full = reinterpret_cast<unsigned long long*>(ring_ptr + STAGES * STAGE);
  auto* const empty = full + kMaxStages;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int positions = static_cast<int>(p.d * p.h * p.w), channels = static_cast<int>(p.c);
  const int k_tiles = static_cast<int>((p.k + BM - 1) / BM);
  const int p_tiles = (positions + BN - 1) / BN;
  const long long tiles = static_cast<long long>(k_tiles) * p_tiles * p.n;
  const int chunks = (channels + kChunk - 1) / kChunk;
  // The stage of the block's n-th tile's chunk q and the parity of that stage's use: chunks in
  // order through the ring, or with SPLIT through the half of the warpgroup that takes tile n.
  auto stage_of = [&](long long n, int q, unsigned& parity) {
    if constexpr (SPLIT) {
      const unsigned u = static_cast<unsigned>(n >> 1) * static_cast<unsigned>(chunks) + static_cast<unsigned>(q);
      parity = (u / HALF) & 1u;
      return static_cast<int>(n & 1) * HALF + static_cast<int>(u % HALF);
    } else {
      const unsigned u = static_cast<unsigned>(n) * static_cast<unsigned>(chunks) + static_cast<unsigned>(q);
      parity = (u / STAGES) & 1u;
      return static_cast<int>(u % STAGES);
    }
  };

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      tma::init(full + s);
      tma::init(empty + s, SPLIT ? 4 : 8);  // one arrival a warp of the chunk's consumers
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // initialised before any thread waits; no block-wide barrier follows

  if (warp == 8) {  // the producer
    if (lane == 0) {
      for (long long n = 0, t = blockIdx.x; t < tiles; ++n, t += gridDim.x) {
        const int kt = static_cast<int>(t % k_tiles);
        const long long rest = t / k_tiles;
        const int p0 = static_cast<int>(rest % p_tiles) * BN, img = static_cast<int>(rest / p_tiles);
        for (int q = 0; q < chunks; ++q) {
          unsigned parity;
          const int s = stage_of(n, q, parity);
          tma::wait(empty + s, parity ^ 1u);  // (a fresh barrier's previous phase is complete)
          char* const stage = ring_ptr + s * STAGE;
          tma::arrive_expect(full + s, STAGE);
          tma::load_box(stage, weight_map, q * kChunk, kt * BM, full + s);
#pragma unroll
          for (int b = 0; b < NB; ++b) {
            tma::load_box(stage + A_BYTES + b * (kBox * 128), input_map, p0 + b * kBox, q * kChunk, img, full + s);
          }
        }
      }
    }
    return;
  }

  // A consumer: warpgroup wg's WG_ROWS output channels of each tile (or of every other tile), MB
  // blocks of 64 rows.
  const int wg = warp >> 2;
  const int g = lane >> 2, t4 = lane & 3, row = (SPLIT ? 0 : wg * WG_ROWS) + (warp & 3) * 16 + g;
  constexpr bool BF16 = kIsBf16<T>;
  // Pairs of positions stored with one instruction where the output (and residual) lie on a
  // pair's bytes: positions and P are even, so every pair does then.
  const bool pairs = ((reinterpret_cast<unsigned long long>(out) | (Spec::residual != 0 ? p.residual : 0ull)) &
                      (2 * sizeof(Out) - 1)) == 0;
  float acc[MB][R];
  // The block's n-th tile is t = blockIdx.x + n * gridDim.x.
  for (long long n = SPLIT ? wg : 0, t = blockIdx.x + n * gridDim.x; t < tiles;
       n += SPLIT ? 2 : 1, t = blockIdx.x + n * gridDim.x) {
    const int kt = static_cast<int>(t % k_tiles);
    const long long rest = t / k_tiles;
    const int p0 = static_cast<int>(rest % p_tiles) * BN;
    const long long img = rest / p_tiles;
    int previous = 0;  // the stage of the chunk before
#pragma unroll 1
    for (int q = 0; q < chunks; ++q) {
      unsigned parity;
      const int s = stage_of(n, q, parity);
      tma::wait(full + s, parity);
      const unsigned a = ring + static_cast<unsigned>(s * STAGE + (SPLIT ? 0 : wg * WG_ROWS) * 128);
      const unsigned b = ring + static_cast<unsigned>(s * STAGE + A_BYTES);
      wgmma::fence();
#pragma unroll
      for (int j = 0; j < kChunk / 16; ++j) {
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          wgmma::mma_half<BN, BF16, false, true>(acc[mb], wgmma::descriptor_sw128(a + mb * 64 * 128 + 32 * j),
                                                 wgmma::descriptor_mn_sw128(b + 2048 * j, kBox * 128), q > 0 || j > 0);
        }
      }
      wgmma::commit();
      wgmma::wait<1>();  // the previous chunk's products are done: its stage goes back
      if (q > 0 && lane == 0) tma::arrive(empty + previous);
      previous = s;
    }
    wgmma::wait<0>();
    if (lane == 0) tma::arrive(empty + previous);
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) wgmma::settle(acc[mb]);

    // The epilogue from the accumulators: acc[mb][4j + e] is channel row + 64 mb + 8 (e / 2),
    // position p0 + 8j + 2 t4 + e % 2.
#pragma unroll
    for (int h = 0; h < 2 * MB; ++h) {
      const int mb = h >> 1;
      const long long k = static_cast<long long>(kt) * BM + row + 64 * mb + 8 * (h & 1);
      const bool inside = k < p.k;
      const float bk = p.has_bias && inside ? load_float(bias + k) : 0.f;
      const long long line = (img * p.k + k) * positions;
      if constexpr (sizeof(Out) == 2) {
        // Two steps of 8 positions at a time, regrouped in the quad so that lane t4 stores
        // positions 4 t4 .. 4 t4 + 3 of the 16, 8 bytes: a store instruction's 8 channels then
        // fill whole 32-byte sectors (pairs of 4 bytes filled half of each, doubling L2's writes).
#pragma unroll
        for (int j = 0; j < BN / 8; j += 2) {
          const int pos = p0 + 8 * j + 2 * t4;  // and pos + 8 (P a multiple of 8: both pairs whole)
          float v[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int at_pos = pos + 8 * (e >> 1) + (e & 1);
            const float r = epilogue::residual<Spec, float>(line + at_pos, inside && at_pos < positions, p);
            v[e] = epilogue::apply_read<Spec>(acc[mb][4 * (j + (e >> 1)) + 2 * (h & 1) + (e & 1)], bk, r, p);
          }
          store_quad<Out>(out + line + p0 + 8 * j + 4 * t4, pack_pair<Out>(v[0], v[1]), pack_pair<Out>(v[2], v[3]),
                          inside && p0 + 8 * j + 4 * t4 < positions, lane);
        }
      } else {
        if (!inside) continue;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int pos = p0 + 8 * j + 2 * t4;
          if (pos >= positions) continue;
          const long long at = line + pos;
          const float r0 = epilogue::residual<Spec, float>(at, true, p);
          const float r1 = epilogue::residual<Spec, float>(at + 1, true, p);
          const float v0 = epilogue::apply_read<Spec>(acc[mb][4 * j + 2 * (h & 1)], bk, r0, p);
          const float v1 = epilogue::apply_read<Spec>(acc[mb][4 * j + 2 * (h & 1) + 1], bk, r1, p);
          store_two(out + at, v0, v1, pairs, true);
        }
      }
    }
  }
}

}  // namespace conv3djit
