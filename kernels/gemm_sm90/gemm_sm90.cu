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

// Regrouping a quad's 16 consecutive positions of one channel: lane t4 holds 32-bit words x0 (of
// positions 2 t4, 2 t4 + 1) and x1 (the same 8 further), a packed pair each or one of the pair's
// floats; afterwards it holds the words of positions 4 t4 and 4 t4 + 2 (.x, .y), which lanes
// 2 (t4 % 2) and 2 (t4 % 2) + 1 held as their word t4 / 2. Lane s sends x_(s % 2), then
// x_(1 - s % 2). Every lane of the warp calls it (two shuffles).
__device__ __forceinline__ uint2 regroup(unsigned x0, unsigned x1, int lane) {
  const int t4 = lane & 3, quad = lane & ~3, high = t4 >> 1;
  const unsigned first = __shfl_sync(0xffffffffu, (t4 & 1) ? x1 : x0, quad + 2 * (t4 & 1) + high);
  const unsigned second = __shfl_sync(0xffffffffu, (t4 & 1) ? x0 : x1, quad + 2 * (t4 & 1) + 1 - high);
  return high ? make_uint2(second, first) : make_uint2(first, second);
}

// The residual's four 16-bit elements at `offset` .. + 3 (zeros where !ok): one 8-byte read where
// they lie on 8 bytes, else four.
template <class Spec>
__device__ __forceinline__ void residual_four(long long offset, bool ok, const ConvParams& p, float (&r)[4]) {
  using Out = typename Spec::out_element;
  const Out* const at = reinterpret_cast<const Out*>(p.residual) + offset;
  if (ok && reinterpret_cast<unsigned long long>(at) % 8 == 0) {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(at));
    unpack_pair<Out>(w.x, r[0], r[1]);
    unpack_pair<Out>(w.y, r[2], r[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) r[e] = epilogue::residual<Spec, float>(offset + e, ok, p);
  }
}

// Four consecutive 16-bit outputs, packed pairs w.x, w.y, at dst where ok: one 8-byte store where
// dst lies on 8 bytes, else four.
template <class Out>
__device__ __forceinline__ void store_four(Out* dst, uint2 w, bool ok) {
  const bool whole = ok && reinterpret_cast<unsigned long long>(dst) % 8 == 0;
  if (whole) *reinterpret_cast<uint2*>(dst) = w;
  if (ok && !whole) {
    dst[0].bits = static_cast<unsigned short>(w.x & 0xffffu);
    dst[1].bits = static_cast<unsigned short>(w.x >> 16);
    dst[2].bits = static_cast<unsigned short>(w.y & 0xffffu);
    dst[3].bits = static_cast<unsigned short>(w.y >> 16);
  }
}

// A block's walk over the tiles, worked out by each side after its setmaxnreg (values live across
// it were spilled): tile t = blockIdx.x + n gridDim.x is output channel block t % k_tiles, position
// block t / k_tiles % p_tiles, image t / (k_tiles p_tiles); a tile is `chunks` chunks of kChunk
// input channels.
template <class Spec>
struct Schedule {
  static constexpr int STAGES = Spec::stages, HALF = STAGES / 2;
  int positions, k_tiles, p_tiles, chunks;
  long long tiles;
  __device__ explicit Schedule(const ConvParams& p)
      : positions(static_cast<int>(p.d * p.h * p.w)),
        k_tiles(static_cast<int>((p.k + Spec::bm - 1) / Spec::bm)),
        p_tiles((positions + Spec::bn - 1) / Spec::bn),
        chunks(static_cast<int>((p.c + gemm_sm90_geometry::kChunk - 1) / gemm_sm90_geometry::kChunk)),
        tiles(static_cast<long long>(k_tiles) * p_tiles * p.n) {}
  // The stage of the use-th chunk through a ring (the whole ring, or with Spec::split half `side`
  // of it, the half of the warpgroup that takes the tile) and the parity of that stage's use.
  __device__ static int stage_at(unsigned use, int side, unsigned& parity) {
    constexpr unsigned LENGTH = Spec::split != 0 ? HALF : STAGES;
    parity = (use / LENGTH) & 1u;
    return side * HALF + static_cast<int>(use % LENGTH);
  }
  // The same for the block's n-th tile's chunk q: with Spec::split, tile n goes to half n % 2.
  __device__ int stage_of(long long n, int q, unsigned& parity) const {
    const long long tile = Spec::split != 0 ? n >> 1 : n;
    const unsigned use = static_cast<unsigned>(tile) * static_cast<unsigned>(chunks) + static_cast<unsigned>(q);
    return stage_at(use, Spec::split != 0 ? static_cast<int>(n & 1) : 0, parity);
  }
};

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

  extern __shared__ uint4 shared_gemm_ring[];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(shared_gemm_ring));
  const unsigned ring = (base + 1023u) & ~1023u;
  char* const ring_ptr = reinterpret_cast<char*>(shared_gemm_ring) + (ring - base);
  auto* const full = reinterpret_cast<unsigned long long*>(ring_ptr + STAGES * STAGE);
  auto* const empty = full + kMaxStages;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      tma::init(full + s);
      tma::init(empty + s, SPLIT ? 4 : 8);  // one arrival a warp of the chunk's consumers
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // initialised before any thread waits; no block-wide barrier follows

  if (warp >= 8) {  // the producer warpgroup: one thread issues the loads
    // Its registers go to the consumers (every warp of a warpgroup takes part).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    if (warp == 8 && lane == 0) {
      const Schedule<Spec> w(p);
      for (long long n = 0, t = blockIdx.x; t < w.tiles; ++n, t += gridDim.x) {
        const int kt = static_cast<int>(t % w.k_tiles);
        const long long rest = t / w.k_tiles;
        const int p0 = static_cast<int>(rest % w.p_tiles) * BN, img = static_cast<int>(rest / w.p_tiles);
        for (int q = 0; q < w.chunks; ++q) {
          unsigned parity;
          const int s = w.stage_of(n, q, parity);
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
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const Schedule<Spec> w(p);
  const int positions = w.positions;
  const int wg = warp >> 2;
  const int g = lane >> 2, t4 = lane & 3, row = (SPLIT ? 0 : wg * WG_ROWS) + (warp & 3) * 16 + g;
  constexpr bool BF16 = kIsBf16<T>;
  // Pairs of positions stored with one instruction where the output (and residual) lie on a
  // pair's bytes: positions and P are even, so every pair does then.
  const bool pairs = ((reinterpret_cast<unsigned long long>(out) | (Spec::residual != 0 ? p.residual : 0ull)) &
                      (2 * sizeof(Out) - 1)) == 0;
  float acc[MB][R];
  // The block's n-th tile is t = blockIdx.x + n * gridDim.x; with SPLIT this warpgroup takes n = wg,
  // wg + 2, ... The running count of the warpgroup's chunks gives their stages (one counter: the
  // tile index alone kept one value more live, which spilled at 128 accumulators).
  unsigned use = 0;
  for (long long t = blockIdx.x + (SPLIT ? wg : 0) * static_cast<long long>(gridDim.x); t < w.tiles;
       t += (SPLIT ? 2 : 1) * static_cast<long long>(gridDim.x)) {
    const int kt = static_cast<int>(t % w.k_tiles);
    const long long rest = t / w.k_tiles;
    const int p0 = static_cast<int>(rest % w.p_tiles) * BN;
    const long long img = rest / w.p_tiles;
    int previous = 0;  // the stage of the chunk before
#pragma unroll 1
    for (int q = 0; q < w.chunks; ++q) {
      unsigned parity;
      const int s = w.stage_at(use++, SPLIT ? wg : 0, parity);
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
        // With a residual the floats are regrouped (four shuffles, not two) and the lane reads
        // its four positions' residual at once: read per element, the tile's reads were hoisted
        // together and spilled.
#pragma unroll
        for (int j = 0; j < BN / 8; j += 2) {
          const int mine = p0 + 8 * j + 4 * t4;  // P a multiple of 8: the lane's four whole or none
          const bool ok = inside && mine < positions;
          float v[4];  // positions 8j + 2 t4, + 1, + 8, + 9 of the tile
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            v[e] = epilogue::value<Spec>(acc[mb][4 * (j + (e >> 1)) + 2 * (h & 1) + (e & 1)], bk, p);
          }
          uint2 words;
          if constexpr (Spec::residual != 0) {
            const uint2 even = regroup(__float_as_uint(v[0]), __float_as_uint(v[2]), lane);  // mine, mine + 2
            const uint2 odd = regroup(__float_as_uint(v[1]), __float_as_uint(v[3]), lane);   // mine + 1, mine + 3
            float f[4] = {__uint_as_float(even.x), __uint_as_float(odd.x), __uint_as_float(even.y),
                          __uint_as_float(odd.y)};
            float r[4];
            residual_four<Spec>(line + mine, ok, p, r);
#pragma unroll
            for (int e = 0; e < 4; ++e) f[e] = epilogue::finish<Spec>(f[e], r[e], p);
            words = make_uint2(pack_pair<Out>(f[0], f[1]), pack_pair<Out>(f[2], f[3]));
          } else {
            words = regroup(pack_pair<Out>(v[0], v[1]), pack_pair<Out>(v[2], v[3]), lane);
          }
          store_four(out + line + mine, words, ok);
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
