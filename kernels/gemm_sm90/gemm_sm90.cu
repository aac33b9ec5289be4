// Pointwise convolutions (1 x 1 x 1 windows, unit strides, no padding, one group) as the GEMMs
// they are, on Hopper's warpgroup MMA (wgmma, sm_90a): bf16 / fp16 with the output in the input
// type or float32 (Spec::out_element), and float32 in the tf32 class; NCDHW and NDHWC. With
// Spec::im2col, 16-bit layers of any window, stride, dilation and zero padding as implicit GEMMs:
// a chunk is one tap's 64 channels (or Spec::chunk: 32 or 16, 64- or 32-byte rows, for 32 or 48
// input channels), its input box the tile's window origins read at the tap's offset by TMA's
// im2col mode (zeros where a window reaches into the padding) from the NDHWC input,
// or from an NCDHW input's channels-last copy; there the box is B, K-major (its rows are
// positions), and the NCDHW store takes output positions that end mid-run (any OD·OH·OW).
//
// GEMM view, image by image: out[n] (K x P, P = D·H·W positions) = W (K x C) · in[n] (C x P).
// 16-bit: the weight is wgmma's A as stored (K-major: a row of C channels an output channel); the
// input is B in N-major order (P contiguous), which wgmma reads transposed, so neither operand is
// copied and the accumulators hold pairs of adjacent positions of one output channel: NCDHW's
// order. tf32 has no transposed operands: there the input is A, loaded from its boxes into
// registers by the threads (positions as M, any order), and the weight B (K-major: its rows are
// wgmma's N); each warpgroup multiplies its own positions by all of the tile's channels. NDHWC is
// the plain GEMM: the batch's positions are rows of C channels, A by descriptor as the weight is
// B, for both element types.
//
// Warp-specialised and persistent: one block an SM walks tiles t = blockIdx.x, + gridDim.x, ...
// of Spec::bm (128 or 256) output channels x Spec::bn positions of one image (NDHWC: rows of the
// whole batch), channel blocks fastest, so that the blocks running together read the same input
// boxes from L2. Its producer warpgroup gives its registers to the consumers (setmaxnreg), and one
// of its threads issues, a chunk of one 128-byte row of input channels at a time (64 halves, 32
// floats), one TMA box of the weight (the chunk's channels x BM rows) and the input's boxes
// (NCDHW: a 128-byte row of positions x the chunk's channels each; NDHWC: BN rows x the chunk's
// channels) into a ring of Spec::stages stages, each stage guarded by a full mbarrier (its bytes
// have landed) and an empty one (the consumer warps have finished reading it). Its two consumer
// warpgroups multiply their part of every tile (NCDHW 16-bit: BM / 2 output channels each;
// otherwise BN / 2 positions each; four wgmma k-steps a chunk; every stage but the last one's
// released as soon as the next chunk's products are issued) and store it from the accumulators,
// while the producer already loads the next tile's chunks; or, with Spec::split (NCDHW 16-bit),
// each warpgroup takes every other tile whole (BM = 128), so that one stores its tile while the
// other multiplies, each with a half of the ring of its own: a barrier's waiters must never be
// more than one phase behind it, which a warpgroup that skipped the other's chunks in a shared
// ring would be.
// Out-of-range channels, rows and positions arrive as the boxes' zeros; the stores skip them.
#pragma once
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "common/wgmma_half.cuh"
#include "gemm_sm90/geometry.cuh"

namespace conv3djit {

namespace gemm_sm90_detail {

// Regrouping 4 lanes' values of one channel's consecutive positions: participant s (lanes lane0 +
// stride k, k = 0..3) holds 32-bit words x0 (unit s) and x1 (unit s + 4), a unit being a position
// or a packed pair of them; afterwards it holds units 2s and 2s + 1 (.x, .y), which participants
// 2 (s % 2) and 2 (s % 2) + 1 held as their word s / 2. Participant s sends x_(s % 2), then
// x_(1 - s % 2). Every lane of the warp calls it (two shuffles).
__device__ __forceinline__ uint2 regroup(unsigned x0, unsigned x1, int s, int lane0, int stride) {
  const int high = s >> 1, odd = s & 1;
  const unsigned first = __shfl_sync(0xffffffffu, odd ? x1 : x0, lane0 + stride * (2 * odd + high));
  const unsigned second = __shfl_sync(0xffffffffu, odd ? x0 : x1, lane0 + stride * (2 * odd + 1 - high));
  return high ? make_uint2(second, first) : make_uint2(first, second);
}

// The residual's first `count` of four 16-bit elements at `offset` .. + 3, zeros past them: one
// 8-byte read where all four are read and lie on 8 bytes, else one at a time. `count` is 0 or 4
// unless PARTIAL (NDHWC's last channels).
template <class Spec, bool PARTIAL>
__device__ __forceinline__ void residual_four(long long offset, int count, const ConvParams& p, float (&r)[4]) {
  using Out = typename Spec::out_element;
  const Out* const at = reinterpret_cast<const Out*>(p.residual) + offset;
  if (count == 4 && reinterpret_cast<unsigned long long>(at) % 8 == 0) {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(at));
    unpack_pair<Out>(w.x, r[0], r[1]);
    unpack_pair<Out>(w.y, r[2], r[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) r[e] = epilogue::residual<Spec, float>(offset + e, PARTIAL ? e < count : count == 4, p);
  }
}

// The first `count` of four consecutive 16-bit outputs, packed pairs w.x, w.y, at dst: one 8-byte
// store where all four are stored and dst lies on 8 bytes, else one at a time. `count` is 0 or 4
// unless PARTIAL.
template <class Out, bool PARTIAL>
__device__ __forceinline__ void store_four(Out* dst, uint2 w, int count) {
  const bool whole = count == 4 && reinterpret_cast<unsigned long long>(dst) % 8 == 0;
  if (whole) *reinterpret_cast<uint2*>(dst) = w;
  if constexpr (PARTIAL) {
    if (!whole) {
      if (count > 0) dst[0].bits = static_cast<unsigned short>(w.x & 0xffffu);
      if (count > 1) dst[1].bits = static_cast<unsigned short>(w.x >> 16);
      if (count > 2) dst[2].bits = static_cast<unsigned short>(w.y & 0xffffu);
      if (count > 3) dst[3].bits = static_cast<unsigned short>(w.y >> 16);
    }
  } else if (count == 4 && !whole) {
    dst[0].bits = static_cast<unsigned short>(w.x & 0xffffu);
    dst[1].bits = static_cast<unsigned short>(w.x >> 16);
    dst[2].bits = static_cast<unsigned short>(w.y & 0xffffu);
    dst[3].bits = static_cast<unsigned short>(w.y >> 16);
  }
}

// Row boxes (Schedule::HALO > 0) count output positions along rows of OW + HALO: position v of an
// image is output (v / (OW + HALO), v % (OW + HALO)) of its OD·OH rows of OW, or none in a row's
// last HALO. The first `count` of four 16-bit outputs from v (packed pairs w) at their places in
// `image`: one store_four where the four are one row's, else one at a time (a rolled loop: unrolled
// in each of the epilogue's unrolled steps, the rare case doubled the compile).
template <class Out>
__device__ __forceinline__ void store_four_rows(Out* image, uint2 w, int v, int count, int ow, int halo) {
  const int width = ow + halo, r = v / width, x = v - r * width;
  if (count == 4 && x + 4 <= ow) {  // (row_box_output of the four: one row's, consecutive)
    store_four<Out, true>(image + static_cast<long long>(r) * ow + x, w, 4);
    return;
  }
#pragma unroll 1
  for (int e = 0; e < count; ++e) {
    const long long at = gemm_sm90_geometry::row_box_output(v + e, ow, halo);
    const unsigned word = e < 2 ? w.x : w.y;
    if (at >= 0) image[at].bits = static_cast<unsigned short>(word >> (16 * (e & 1)));
  }
}
// The same for one float32 output.
__device__ __forceinline__ void store_float_rows(float* image, float value, int v, int ow, int halo) {
  const long long at = gemm_sm90_geometry::row_box_output(v, ow, halo);
  if (at >= 0) image[at] = value;
}

// A block's walk over the tiles, worked out by each side after its setmaxnreg (values live across
// it were spilled): tile t = blockIdx.x + n gridDim.x is output channel block t % k_tiles, position
// block t / k_tiles % p_tiles, image t / (k_tiles p_tiles); a tile is `chunks` chunks of CHUNK
// input channels (Spec::chunk: a 128-byte row, or with im2col boxes a 64- or 32-byte one,
// ROW_BYTES, 64-, 32-byte swizzled), an even count for NCDHW tf32 (its consumers take chunks in
// pairs; a chunk past C is the boxes' zeros).
template <class Spec>
struct Schedule {
  static constexpr int STAGES = Spec::stages, HALF = STAGES / 2, E = sizeof(typename Spec::element);
  static constexpr int CHUNK = Spec::chunk, ROW_BYTES = CHUNK * E;
  static_assert(ROW_BYTES == 128 || (Spec::im2col != 0 && (ROW_BYTES == 64 || ROW_BYTES == 32)),
                "chunks of a 128-byte row, or with im2col boxes of a 64- or 32-byte one");
  // Spec::rowbox: a chunk is one kernel row's KW taps (ROW_TAPS weight boxes) on one input box of
  // the tile's window origins and HALO more, tap kw reading it kw·DW rows further; output
  // positions are then counted along rows of OW + HALO, the last HALO of each computed and dropped.
  static constexpr int ROW_TAPS = Spec::rowbox != 0 ? Spec::kw : 1;
  static constexpr int HALO = Spec::rowbox != 0 ? gemm_sm90_geometry::row_reach(Spec::kw, Spec::dw) : 0;
  static constexpr int STAGE = gemm_sm90_geometry::stage_bytes(Spec::bm, Spec::bn, E, ROW_TAPS, HALO, ROW_BYTES);
  // The bytes a stage's boxes bring (short of the stage's whole 1024 bytes).
  static constexpr int LOADED =
      (ROW_TAPS * Spec::bm + gemm_sm90_geometry::input_rows(Spec::bn, E, HALO)) * ROW_BYTES;
  // Chunks of a step (Spec::im2col: the window's taps, or with row boxes its kernel rows, one after
  // the other, each its channels).
  static constexpr int PER_TAP = (Spec::cg + CHUNK - 1) / CHUNK, STEPS = Spec::kd * Spec::kh * Spec::kw / ROW_TAPS;
  int positions, k_tiles, p_tiles, chunks;
  long long tiles;
  // NDHWC: the images' output positions are one run of N·OD·OH·OW rows (one "image").
  static constexpr bool ROWS = Spec::ndhwc != 0, PAIRS = !ROWS && E == 4;
  __device__ explicit Schedule(const ConvParams& p)
      : positions(static_cast<int>(p.od * p.oh * (p.ow + HALO) * (ROWS ? p.n : 1))),
        k_tiles(static_cast<int>((p.k + Spec::bm - 1) / Spec::bm)),
        p_tiles(static_cast<int>((static_cast<long long>(positions) + Spec::bn - 1) / Spec::bn)),
        chunks(static_cast<int>((p.c + CHUNK - 1) / CHUNK + (PAIRS ? (p.c + CHUNK - 1) / CHUNK % 2 : 0)) * STEPS),
        tiles(static_cast<long long>(k_tiles) * p_tiles * (ROWS ? 1 : p.n)) {}
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

// The ring in dynamic shared memory: stages of STAGE bytes from a 1024-byte boundary (the
// swizzle's groups), then the full and the empty mbarriers and the producer's 16 bytes.
struct Ring {
  unsigned base;  // shared-memory address of stage 0
  char* ptr;      // the same, generic
  unsigned long long* full;
  unsigned long long* empty;
};

// The producer's im2col tile origin (x, y, z, n) at shared-memory address `at`, 16 bytes after the
// mbarriers: stored once a tile, loaded again each chunk (volatile, so never kept in registers).
__device__ __forceinline__ void store_origin(unsigned at, int x, int y, int z, int n) {
  asm volatile("st.shared.v4.s32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(x), "r"(y), "r"(z), "r"(n) : "memory");
}
__device__ __forceinline__ int4 load_origin(unsigned at) {
  int4 o;
  asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];\n" : "=r"(o.x), "=r"(o.y), "=r"(o.z), "=r"(o.w) : "r"(at) : "memory");
  return o;
}

// Whether the output (and the residual) lie on the bytes of a pair of elements, so that pairs at
// even offsets are stored (and read) with one instruction.
template <class Spec>
__device__ __forceinline__ bool pairs_aligned(const typename Spec::out_element* out, const ConvParams& p) {
  return ((reinterpret_cast<unsigned long long>(out) | (Spec::residual != 0 ? p.residual : 0ull)) &
          (2 * sizeof(typename Spec::out_element) - 1)) == 0;
}

// After a chunk's wgmmas are issued: commits them, waits until the chunk before is done and gives
// its stage back (one arrival a warp); `previous` becomes this chunk's stage s.
__device__ __forceinline__ void chunk_issued(const Ring& ring, int lane, int q, int s, int& previous) {
  wgmma::commit();
  wgmma::wait<1>();
  if (q > 0 && lane == 0) tma::arrive(ring.empty + previous);
  previous = s;
}

// After a tile's last chunk: waits for all its products, gives the last stage back, and hands the
// accumulators to ordinary code.
template <int MB, int R>
__device__ __forceinline__ void tile_done(const Ring& ring, int lane, int previous, float (&acc)[MB][R]) {
  wgmma::wait<0>();
  if (lane == 0) tma::arrive(ring.empty + previous);
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) wgmma::settle(acc[mb]);
}

// A quad's two steps of 8 consecutive 16-bit outputs (NCDHW positions or NDHWC channels): lane t4's
// values v (units 2 t4, 2 t4 + 1 and 8 further) become the packed words of units 4 t4 .. 4 t4 + 3,
// with the residual of those `count` at `offset` added (count 0 or 4 unless PARTIAL): the floats regrouped (four
// shuffles) and the four residuals read at once; without a residual the packed pairs (two).
// Every lane of the warp calls it.
template <class Spec, bool PARTIAL>
__device__ __forceinline__ uint2 finish_quad(const float (&v)[4], int t4, int lane, long long offset, int count,
                                             const ConvParams& p) {
  using Out = typename Spec::out_element;
  if constexpr (Spec::residual != 0) {
    const uint2 even = regroup(__float_as_uint(v[0]), __float_as_uint(v[2]), t4, lane & ~3, 1);  // 4 t4, + 2
    const uint2 odd = regroup(__float_as_uint(v[1]), __float_as_uint(v[3]), t4, lane & ~3, 1);   // + 1, + 3
    float f[4] = {__uint_as_float(even.x), __uint_as_float(odd.x), __uint_as_float(even.y), __uint_as_float(odd.y)};
    float r[4];
    residual_four<Spec, PARTIAL>(offset, count, p, r);
#pragma unroll
    for (int e = 0; e < 4; ++e) f[e] = epilogue::finish<Spec>(f[e], r[e], p);
    return make_uint2(pack_pair<Out>(f[0], f[1]), pack_pair<Out>(f[2], f[3]));
  } else {
    return regroup(pack_pair<Out>(v[0], v[1]), pack_pair<Out>(v[2], v[3]), t4, lane & ~3, 1);
  }
}

// A tile's residual into L2, a line at a time, the consumer threads (`index` of `count`) taking
// every count-th run (NCDHW a channel's positions, NDHWC a row's channels) as the tile's products
// begin: the epilogue's reads then hit L2 rather than each wait out DRAM's latency after the
// products, with nothing else to overlap them. (In the producer warp, at 40 registers, it spilled.)
template <class Spec>
__device__ __forceinline__ void prefetch_residual(const ConvParams& p, int positions, long long img, int kt, int p0,
                                                  int index, int count) {
  if constexpr (Spec::residual != 0) {
    constexpr int BM = Spec::bm, BN = Spec::bn;
    constexpr bool NDHWC = Spec::ndhwc != 0;
    const int k0 = kt * BM, channels = min(static_cast<int>(p.k - k0), BM), rows = min(positions - p0, BN);
    const long long step = NDHWC ? p.k : positions;  // elements from a run to the next
    const long long run0 = NDHWC ? static_cast<long long>(p0) * p.k + k0 : (img * p.k + k0) * positions + p0;
#pragma unroll 1
    for (int r = index; r < (NDHWC ? rows : channels); r += count) {
      epilogue::prefetch_residual<Spec>(run0 + r * step, NDHWC ? channels : rows, p);
    }
  }
}

// The producer: one thread loads every chunk of the block's tiles into the ring.
template <class Spec>
__device__ __forceinline__ void produce(const Ring& ring, const ConvParams& p, const TensorMap& weight_map,
                                        const TensorMap& input_map) {
  using namespace gemm_sm90_geometry;
  constexpr int E = sizeof(typename Spec::element), ROW = row_elements(E);
  constexpr int BM = Spec::bm, BN = Spec::bn, NB = boxes(BN, E), STAGE = Schedule<Spec>::STAGE;
  constexpr int KH = Spec::kh, KW = Spec::kw, PER_TAP = Schedule<Spec>::PER_TAP, ROW_TAPS = Schedule<Spec>::ROW_TAPS;
  constexpr int CHUNK = Schedule<Spec>::CHUNK, RB = Schedule<Spec>::ROW_BYTES;
  const Schedule<Spec> w(p);
  for (long long n = 0, t = blockIdx.x; t < w.tiles; ++n, t += gridDim.x) {
    const int kt = static_cast<int>(t % w.k_tiles);
    const long long rest = t / w.k_tiles;
    const int p0 = static_cast<int>(rest % w.p_tiles) * BN, img = static_cast<int>(rest / w.p_tiles);
    if constexpr (Spec::im2col != 0) {
      // The window origin of the tile's first output position, from which its boxes walk the next
      // BN: worked out once a tile and kept in shared memory. Kept in registers across the chunks,
      // it spilled at the producer's 40 registers (8-stage rings); worked out again each chunk, its
      // 64-bit divisions made the one issuing thread slower than 64-channel tiles' products.
      // (32-bit arithmetic: an image's output positions, and NDHWC's rows in all, are fewer than 2^31.)
      const unsigned ow = static_cast<unsigned>(p.ow + Schedule<Spec>::HALO), plane = static_cast<unsigned>(p.oh) * ow;
      const unsigned per_image = static_cast<unsigned>(p.od) * plane, first = static_cast<unsigned>(p0);
      const unsigned at = Schedule<Spec>::ROWS ? first % per_image : first;
      store_origin(ring.base + Spec::stages * STAGE + 16 * kMaxStages, static_cast<int>(at % ow) * Spec::sw - p.pad_w,
                   static_cast<int>(at / ow % static_cast<unsigned>(p.oh)) * Spec::sh - p.pad_h,
                   static_cast<int>(at / plane) * Spec::sd - p.pad_d,
                   Schedule<Spec>::ROWS ? static_cast<int>(first / per_image) : img);
    }
    for (int q = 0; q < w.chunks; ++q) {
      unsigned parity;
      const int s = w.stage_of(n, q, parity);
      tma::wait(ring.empty + s, parity ^ 1u);  // (a fresh barrier's previous phase is complete)
      char* const stage = ring.ptr + s * STAGE;
      tma::arrive_expect(ring.full + s, Schedule<Spec>::LOADED);
      if constexpr (Spec::im2col != 0) {
        // Step q / PER_TAP's chunk of channels: for each of its taps the weight's BM rows at (tap,
        // c0) (columns past the tap's channels meet the input box's zeros there), and the window
        // origins read at its first tap's offset.
        const int tap = q / PER_TAP * ROW_TAPS, c0 = (q - q / PER_TAP * PER_TAP) * CHUNK;
        const int kd = tap / (KH * KW), kh = tap / KW % KH, kw = tap % KW;
#pragma unroll
        for (int i = 0; i < ROW_TAPS; ++i) {
          tma::load_box(stage + i * BM * RB, weight_map, (tap + i) * Spec::cg + c0, kt * BM, ring.full + s);
        }
        const int4 o = load_origin(ring.base + Spec::stages * STAGE + 16 * kMaxStages);
        tma::load_im2col(stage + ROW_TAPS * BM * RB, input_map, c0, o.x, o.y, o.z, o.w,
                         static_cast<unsigned short>(kw * Spec::dw),
                         static_cast<unsigned short>(kh * Spec::dh), static_cast<unsigned short>(kd * Spec::dd),
                         ring.full + s);
        continue;
      }
      tma::load_box(stage, weight_map, q * ROW, kt * BM, ring.full + s);
      if constexpr (Spec::ndhwc != 0) {
        tma::load_box(stage + BM * 128, input_map, q * ROW, p0, ring.full + s);  // BN rows of the chunk's channels
      } else {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
          tma::load_box(stage + (BM + b * ROW) * 128, input_map, p0 + b * ROW, q * ROW, img, ring.full + s);
        }
      }
    }
  }
}

// 16-bit operands: warpgroup wg's WG_ROWS output channels of each tile (or of every other tile), MB
// blocks of 64 rows; the input's positions wgmma's N (transposed boxes, or im2col's K-major rows).
template <class Spec>
__device__ __forceinline__ void consume_half(const Ring& ring, const typename Spec::element* __restrict__ bias,
                                             typename Spec::out_element* __restrict__ out, const ConvParams& p,
                                             int warp, int lane) {
  using namespace gemm_sm90_geometry;
  using T = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr int BM = Spec::bm, BN = Spec::bn, STAGE = Schedule<Spec>::STAGE;
  constexpr int CHUNK = Schedule<Spec>::CHUNK, RB = Schedule<Spec>::ROW_BYTES;
  constexpr bool SPLIT = Spec::split != 0;
  constexpr int ROW_TAPS = Schedule<Spec>::ROW_TAPS, HALO = Schedule<Spec>::HALO;
  constexpr int A_BYTES = ROW_TAPS * BM * RB, R = BN / 2;
  constexpr int WG_ROWS = SPLIT ? BM : BM / 2, MB = WG_ROWS / 64;  // a consumer warpgroup's rows, m64 blocks
  static_assert(BN % 16 == 0 && BN >= 64 && BN <= 256, "a tile of 64 to 256 positions, whole 16-position steps");
  static_assert(!SPLIT || BM == 128 || (BM == 64 && Spec::im2col != 0),
                "a warpgroup's whole tile of two m64 blocks (one of 64 output channels with im2col boxes)");
  static_assert(!SPLIT || (Spec::stages % 2 == 0 && Spec::stages >= 4), "two halves of at least two stages");
  static_assert(HALO == 0 || Spec::residual == 0, "row boxes without a residual");
  const Schedule<Spec> w(p);
  // An image's positions: as the tiles count them (rows of OW + HALO), and its outputs.
  const int positions = w.positions, outputs = static_cast<int>(p.od * p.oh * p.ow);
  const int wg = warp >> 2;
  const int g = lane >> 2, t4 = lane & 3, row = (SPLIT ? 0 : wg * WG_ROWS) + (warp & 3) * 16 + g;
  constexpr bool BF16 = kIsBf16<T>;
  // Pairs of positions stored with one instruction where the output (and residual) lie on a
  // pair's bytes and P is even (a GEMM's P is a multiple of 8; im2col's any): every pair does then.
  // Im2col's P ends runs of four mid-way (PARTIAL stores).
  constexpr bool PARTIAL = Spec::im2col != 0;
  const bool pairs = pairs_aligned<Spec>(out, p) && (!PARTIAL || w.positions % 2 == 0);
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
    prefetch_residual<Spec>(p, positions, img, kt, p0, (SPLIT ? warp & 3 : warp) * 32 + lane, SPLIT ? 128 : 256);
    int previous = 0;  // the stage of the chunk before
#pragma unroll 1
    for (int q = 0; q < w.chunks; ++q) {
      unsigned parity;
      const int s = w.stage_at(use++, SPLIT ? wg : 0, parity);
      tma::wait(ring.full + s, parity);
      const unsigned a = ring.base + static_cast<unsigned>(s * STAGE + (SPLIT ? 0 : wg * WG_ROWS) * RB);
      const unsigned b = ring.base + static_cast<unsigned>(s * STAGE + A_BYTES);
      wgmma::fence();
#pragma unroll
      for (int i = 0; i < ROW_TAPS; ++i) {  // the chunk's taps (one but with row boxes)
#pragma unroll
        for (int j = 0; j < CHUNK / 16; ++j) {
#pragma unroll
          for (int mb = 0; mb < MB; ++mb) {
            if constexpr (Spec::im2col != 0) {  // B: window origins' rows of the chunk's channels (K-major)
              // Tap i of a row box: its weight box, and the input box i·DW rows further (a
              // swizzled operand may start at any row: the swizzle follows the address).
              wgmma::mma_half<BN, BF16, false, false>(
                  acc[mb], wgmma::descriptor_swizzled<RB>(a + i * BM * RB + mb * 64 * RB + 32 * j),
                  wgmma::descriptor_swizzled<RB>(b + i * Spec::dw * RB + 32 * j), q > 0 || i > 0 || j > 0);
            } else {
              wgmma::mma_half<BN, BF16, false, true>(acc[mb], wgmma::descriptor_sw128(a + mb * 64 * 128 + 32 * j),
                                                     wgmma::descriptor_mn_sw128(b + 2048 * j, CHUNK * 128),
                                                     q > 0 || j > 0);
            }
          }
        }
      }
      chunk_issued(ring, lane, q, s, previous);
    }
    tile_done(ring, lane, previous, acc);

    // The epilogue from the accumulators: acc[mb][4j + e] is channel row + 64 mb + 8 (e / 2),
    // position p0 + 8j + 2 t4 + e % 2.
#pragma unroll
    for (int h = 0; h < 2 * MB; ++h) {
      const int mb = h >> 1;
      const long long k = static_cast<long long>(kt) * BM + row + 64 * mb + 8 * (h & 1);
      const bool inside = k < p.k;
      const float bk = p.has_bias && inside ? load_float(bias + k) : 0.f;
      const long long line = (img * p.k + k) * outputs;
      if constexpr (sizeof(Out) == 2) {
        // Two steps of 8 positions at a time, regrouped in the quad so that lane t4 stores
        // positions 4 t4 .. 4 t4 + 3 of the 16, 8 bytes: a store instruction's 8 channels then
        // fill whole 32-byte sectors (pairs of 4 bytes filled half of each, doubling L2's writes).
        // With a residual the floats are regrouped (four shuffles, not two) and the lane reads
        // its four positions' residual at once: read per element, the tile's reads were hoisted
        // together and spilled.
#pragma unroll
        for (int j = 0; j < BN / 8; j += 2) {
          const int mine = p0 + 8 * j + 4 * t4;  // a GEMM's P a multiple of 8: the lane's four whole or none
          const bool ok = inside && mine < positions;
          float v[4];  // positions 8j + 2 t4, + 1, + 8, + 9 of the tile
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            v[e] = epilogue::value<Spec>(acc[mb][4 * (j + (e >> 1)) + 2 * (h & 1) + (e & 1)], bk, p);
          }
          const int count = ok ? (PARTIAL ? min(4, positions - mine) : 4) : 0;
          const uint2 packed = finish_quad<Spec, PARTIAL>(v, t4, lane, line + mine, count, p);
          if constexpr (HALO == 0) {
            store_four<Out, PARTIAL>(out + line + mine, packed, count);
          } else {
            store_four_rows(out + line, packed, mine, count, static_cast<int>(p.ow), HALO);
          }
        }
      } else {
        if (!inside) continue;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int pos = p0 + 8 * j + 2 * t4;
          if (pos >= positions) continue;
          const bool second = !PARTIAL || pos + 1 < positions;
          if constexpr (HALO != 0) {
            store_float_rows(out + line, epilogue::apply_read<Spec>(acc[mb][4 * j + 2 * (h & 1)], bk, 0.f, p), pos,
                             static_cast<int>(p.ow), HALO);
            if (second) {
              store_float_rows(out + line, epilogue::apply_read<Spec>(acc[mb][4 * j + 2 * (h & 1) + 1], bk, 0.f, p),
                               pos + 1, static_cast<int>(p.ow), HALO);
            }
            continue;
          }
          const long long at = line + pos;
          const float r0 = epilogue::residual<Spec, float>(at, true, p);
          const float r1 = epilogue::residual<Spec, float>(at + 1, second, p);
          const float v0 = epilogue::apply_read<Spec>(acc[mb][4 * j + 2 * (h & 1)], bk, r0, p);
          const float v1 = epilogue::apply_read<Spec>(acc[mb][4 * j + 2 * (h & 1) + 1], bk, r1, p);
          store_two(out + at, v0, v1, pairs, second);
        }
      }
    }
  }
}

// tf32 (float32 tensors): warpgroup wg's BN / 2 = 64 positions of each tile (MB = 1 block), by all of
// the tile's BM output channels (wgmma's N). A thread's A rows g and g + 8 of warp w are positions
// 32 (w / 2) + 16 (g / 4) + 8 (w % 2) + (g % 4) and 4 further of its m64 block: the 32 lanes of a
// load then read 32 distinct banks of the box (its rows are the chunk's channels, 128-byte
// swizzled), and the 4 lanes g % 4 = 0..3 hold 8 consecutive positions of each output channel.
template <class Spec>
__device__ __forceinline__ void consume_tf32(const Ring& ring, const float* __restrict__ bias, float* __restrict__ out,
                                             const ConvParams& p, int warp, int lane) {
  using namespace gemm_sm90_geometry;
  constexpr int BM = Spec::bm, BN = Spec::bn, STAGE = stage_bytes(BM, BN, 4), CHUNK = row_elements(4);
  constexpr int MB = BN / 128;  // m64 blocks of positions a warpgroup
  static_assert(BN == 128, "two warpgroups of one m64 block of positions (two spilled: 2 x 64 accumulators and "
                "two sets of A registers)");
  static_assert(Spec::split == 0, "tf32 tiles are shared by the warpgroups");
  const Schedule<Spec> w(p);
  const int positions = w.positions;
  const int wg = warp >> 2, wq = warp & 3, g = lane >> 2, t = lane & 3;
  const int mine = 32 * (wq >> 1) + 16 * (g >> 2) + 8 * (wq & 1) + (g & 3);  // row g's position; g + 8: + 4
  const bool pairs = pairs_aligned<Spec>(out, p);
  float acc[MB][BM / 2];
  unsigned use = 0;
  for (long long tile = blockIdx.x; tile < w.tiles; tile += gridDim.x) {
    const int kt = static_cast<int>(tile % w.k_tiles);
    const long long rest = tile / w.k_tiles;
    const int p0 = static_cast<int>(rest % w.p_tiles) * BN;
    const long long img = rest / w.p_tiles;
    prefetch_residual<Spec>(p, positions, img, kt, p0, warp * 32 + lane, 256);
    const int first = wg * 64 * MB;  // the warpgroup's first position in the tile
    int previous = 0;
    // A chunk: the thread's A fragments for its 4 k8 steps from the boxes, then the products
    // (A in registers is read while the wgmmas run: two sets, a chunk's and the next one's).
    auto chunk = [&](unsigned (&a)[MB][4][4], int q) {
      unsigned parity;
      const int s = w.stage_at(use++, 0, parity);
      tma::wait(ring.full + s, parity);
      const char* const boxes = ring.ptr + s * STAGE + BM * 128;
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) {
#pragma unroll
        for (int j = 0; j < CHUNK / 8; ++j) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int pos = first + 64 * mb + mine + 4 * (r & 1), c = 8 * j + t + 4 * (r >> 1);
            const int at = (pos >> 5) * (CHUNK * 128) + c * 128 + ((((pos & 31) >> 2) ^ (c & 7)) << 4) + (pos & 3) * 4;
            a[mb][j][r] = *reinterpret_cast<const unsigned*>(boxes + at);
          }
        }
      }
      const unsigned b = ring.base + static_cast<unsigned>(s * STAGE);
      wgmma::fence();
#pragma unroll
      for (int j = 0; j < CHUNK / 8; ++j) {
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          wgmma::mma<BM>(acc[mb], a[mb][j], wgmma::descriptor_sw128(b + 32 * j), q > 0 || j > 0);
        }
      }
      chunk_issued(ring, lane, q, s, previous);  // (the chunk before's A set is free then too)
    };
    // Pairs of chunks, each into its own set, with no branch between them: a branch there merged
    // the accumulators' values and ptxas serialised the wgmmas (C7513).
    unsigned a0[MB][4][4], a1[MB][4][4];
#pragma unroll 1
    for (int q = 0; q < w.chunks; q += 2) {
      chunk(a0, q);
      chunk(a1, q + 1);
    }
    tile_done(ring, lane, previous, acc);

    // The epilogue: acc[mb][4j + e] is position first + 64 mb + mine + 4 (e / 2), output channel
    // 8j + 2t + e % 2 of the tile. The 4 lanes g % 4 regroup each channel's 8 positions so that
    // lane g % 4 = s stores positions 2s, 2s + 1 of them: 8 bytes, a store's 8 runs whole sectors.
    const int run = p0 + first + 32 * (wq >> 1) + 16 * (g >> 2) + 8 * (wq & 1);  // + 64 mb
    const int s = g & 3;
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) {
      const int start = run + 64 * mb;
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
        for (int c2 = 0; c2 < 2; ++c2) {
          const long long k = static_cast<long long>(kt) * BM + 8 * j + 2 * t + c2;
          const bool ok = k < p.k && start < positions;  // P a multiple of 8: the run whole or none
          const float bk = p.has_bias && k < p.k ? load_float(bias + k) : 0.f;
          const float v0 = epilogue::value<Spec>(acc[mb][4 * j + c2], bk, p);
          const float v1 = epilogue::value<Spec>(acc[mb][4 * j + 2 + c2], bk, p);
          const uint2 both = regroup(__float_as_uint(v0), __float_as_uint(v1), s, lane - 4 * s, 4);
          const long long at = (img * p.k + k) * positions + start + 2 * s;
          const float r0 = epilogue::residual<Spec, float>(at, ok, p);
          const float r1 = epilogue::residual<Spec, float>(at + 1, ok, p);
          if (ok) {
            store_two(out + at, epilogue::finish<Spec>(__uint_as_float(both.x), r0, p),
                      epilogue::finish<Spec>(__uint_as_float(both.y), r1, p), pairs, true);
          }
        }
      }
    }
  }
}

// NDHWC (both element types): the positions are rows of C channels, K-major like the weight, so
// both operands are read by descriptor: warpgroup wg's BN / 2 rows of each tile (MB blocks of 64)
// are M, the tile's BM output channels N. A thread's accumulators hold pairs of adjacent output
// channels of one position: NDHWC's order.
template <class Spec>
__device__ __forceinline__ void consume_rows(const Ring& ring, const typename Spec::element* __restrict__ bias,
                                             typename Spec::out_element* __restrict__ out, const ConvParams& p,
                                             int warp, int lane) {
  using namespace gemm_sm90_geometry;
  using T = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr int E = sizeof(T), BM = Spec::bm, BN = Spec::bn, STAGE = Schedule<Spec>::STAGE;
  constexpr int ROW_TAPS = Schedule<Spec>::ROW_TAPS, HALO = Schedule<Spec>::HALO, RB = Schedule<Spec>::ROW_BYTES;
  constexpr int MB = BN / 128;  // m64 blocks of rows a warpgroup
  static_assert(BN == 128 || BN == 256, "two warpgroups of one or two m64 blocks of rows");
  static_assert(MB * BM / 2 <= 128, "at most 128 accumulators a thread");
  static_assert(Spec::split == 0, "NDHWC tiles are shared by the warpgroups");
  static_assert(HALO == 0 || Spec::residual == 0, "row boxes without a residual");
  const Schedule<Spec> w(p);
  const int rows = w.positions;  // N·D·H·W (with row boxes, rows of OW + HALO)
  const long long k_total = p.k;
  const int k_out = static_cast<int>(p.k);
  const int wg = warp >> 2, g = lane >> 2, t4 = lane & 3;
  // Float32 pairs of channels stored with one instruction where every pair lies on 8 bytes: the
  // output (and residual) does and K is even.
  const bool pairs = pairs_aligned<Spec>(out, p) && k_total % 2 == 0;
  float acc[MB][BM / 2];
  unsigned use = 0;
  for (long long tile = blockIdx.x; tile < w.tiles; tile += gridDim.x) {
    const int kt = static_cast<int>(tile % w.k_tiles);
    const int p0 = static_cast<int>(tile / w.k_tiles) * BN;
    prefetch_residual<Spec>(p, rows, 0, kt, p0, warp * 32 + lane, 256);
    int previous = 0;
#pragma unroll 1
    for (int q = 0; q < w.chunks; ++q) {
      unsigned parity;
      const int s = w.stage_at(use++, 0, parity);
      tma::wait(ring.full + s, parity);
      const unsigned b = ring.base + static_cast<unsigned>(s * STAGE);  // the weight's BM rows (a tap's)
      const unsigned a = b + static_cast<unsigned>((ROW_TAPS * BM + wg * 64 * MB) * RB);  // this warpgroup's rows
      wgmma::fence();
#pragma unroll
      for (int i = 0; i < ROW_TAPS; ++i) {  // the chunk's taps: tap i's weight box, the rows i·DW further
#pragma unroll
        for (int j = 0; j < RB / 32; ++j) {  // k steps of 32 bytes: 16 halves or 8 floats
#pragma unroll
          for (int mb = 0; mb < MB; ++mb) {
            const unsigned long long da = wgmma::descriptor_swizzled<RB>(a + (i * Spec::dw + mb * 64) * RB + 32 * j);
            const unsigned long long db = wgmma::descriptor_swizzled<RB>(b + i * BM * RB + 32 * j);
            if constexpr (E == 2) {
              wgmma::mma_half<BM, kIsBf16<T>, false, false>(acc[mb], da, db, q > 0 || i > 0 || j > 0);
            } else {
              wgmma::mma_tf32<BM>(acc[mb], da, db, q > 0 || i > 0 || j > 0);
            }
          }
        }
      }
      chunk_issued(ring, lane, q, s, previous);
    }
    tile_done(ring, lane, previous, acc);

    // The epilogue: acc[mb][4j + e] is row p0 + wg·64·MB + 64 mb + 16 (warp % 4) + g + 8 (e / 2),
    // output channel kt·BM + 8j + 2 t4 + e % 2.
#pragma unroll
    for (int h = 0; h < 2 * MB; ++h) {
      const int mb = h >> 1;
      int row = p0 + wg * 64 * MB + 64 * mb + 16 * (warp & 3) + g + 8 * (h & 1);
      bool inside = row < rows;
      if constexpr (HALO != 0) {  // the output row of a row of OW + HALO, none in its last HALO
        const long long output = gemm_sm90_geometry::row_box_output(row, static_cast<int>(p.ow), HALO);
        inside = inside && output >= 0;
        row = static_cast<int>(output);
      }
      const long long line = static_cast<long long>(row) * k_total + static_cast<long long>(kt) * BM;
      if constexpr (sizeof(Out) == 2) {
        // Two steps of 8 channels at a time, regrouped in the quad: lane t4 stores channels
        // 4 t4 .. 4 t4 + 3 of the 16 (whole 32-byte sectors), those past K one at a time.
#pragma unroll
        for (int j = 0; j < BM / 8; j += 2) {
          const int first = kt * BM + 8 * j;  // the 16 channels' first (K < 2^31)
          float v[4];  // channels 8j + 2 t4, + 1, + 8, + 9 of the tile
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int k = first + 8 * (e >> 1) + 2 * t4 + (e & 1);
            const float bk = p.has_bias && k < k_out ? load_float(bias + k) : 0.f;
            v[e] = epilogue::value<Spec>(acc[mb][4 * (j + (e >> 1)) + 2 * (h & 1) + (e & 1)], bk, p);
          }
          const int count = inside ? min(4, max(0, k_out - (first + 4 * t4))) : 0;
          const long long at = line + 8 * j + 4 * t4;
          store_four<Out, true>(out + at, finish_quad<Spec, true>(v, t4, lane, at, count, p), count);
        }
      } else {
        // Float32: a quad's 8 channels are one 32-byte sector already.
        if (!inside) continue;
#pragma unroll
        for (int j = 0; j < BM / 8; ++j) {
          const long long k = static_cast<long long>(kt) * BM + 8 * j + 2 * t4;
          if (k >= k_total) continue;
          const bool second = k + 1 < k_total;
          const long long at = line + 8 * j + 2 * t4;
          const float r0 = epilogue::residual<Spec, float>(at, true, p);
          const float r1 = epilogue::residual<Spec, float>(at + 1, second, p);
          const float b0 = p.has_bias ? load_float(bias + k) : 0.f;
          const float b1 = p.has_bias && second ? load_float(bias + k + 1) : 0.f;
          const float v0 = epilogue::apply_read<Spec>(acc[mb][4 * j + 2 * (h & 1)], b0, r0, p);
          const float v1 = epilogue::apply_read<Spec>(acc[mb][4 * j + 2 * (h & 1) + 1], b1, r1, p);
          store_two(out + at, v0, v1, pairs, second);
        }
      }
    }
  }
}

}  // namespace gemm_sm90_detail

template <class Spec>
__global__ void __launch_bounds__(gemm_sm90_geometry::kThreads, 1)
gemm_sm90(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
          const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out,
          ConvParams p, const __grid_constant__ TensorMap weight_map, const __grid_constant__ TensorMap input_map) {
  using namespace gemm_sm90_geometry;
  using T = typename Spec::element;
  constexpr int STAGES = Spec::stages, STAGE = gemm_sm90_detail::Schedule<Spec>::STAGE;
  static_assert(Spec::bm == 128 || Spec::bm == 256 || (Spec::bm == 64 && Spec::split != 0),
                "tiles of 128 or 256 output channels, or 64 a warpgroup's whole tile");
  static_assert(STAGES >= 2 && STAGES <= kMaxStages, "a ring of 2 to kMaxStages stages");
  static_assert(Spec::im2col == 0 || (sizeof(T) == 2 && Spec::bn % 64 == 0 && Spec::pad_mode == 0),
                "im2col boxes: 16-bit inputs (NCDHW ones' channels-last copies), whole 64-row boxes, zero padding");
  static_assert(Spec::im2col != 0 || (Spec::kd * Spec::kh * Spec::kw == 1 && Spec::sd * Spec::sh * Spec::sw == 1),
                "tiled boxes: a 1 x 1 x 1 window, unit strides");
  static_assert(Spec::rowbox == 0 || (Spec::im2col != 0 && Spec::sw == 1 && Spec::kw > 1),
                "row boxes: im2col boxes, unit stride along W, a kernel row of two taps or more");

  extern __shared__ uint4 shared_gemm_ring[];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(shared_gemm_ring));
  gemm_sm90_detail::Ring ring;
  ring.base = (base + 1023u) & ~1023u;
  ring.ptr = reinterpret_cast<char*>(shared_gemm_ring) + (ring.base - base);
  ring.full = reinterpret_cast<unsigned long long*>(ring.ptr + STAGES * STAGE);
  ring.empty = ring.full + kMaxStages;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      tma::init(ring.full + s);
      tma::init(ring.empty + s, Spec::split != 0 ? 4 : 8);  // one arrival a warp of the chunk's consumers
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // initialised before any thread waits; no block-wide barrier follows

  if (warp >= 8) {  // the producer warpgroup: one thread issues the loads
    // Its registers go to the consumers (every warp of a warpgroup takes part).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    if (warp == 8 && lane == 0) gemm_sm90_detail::produce<Spec>(ring, p, weight_map, input_map);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  if constexpr (Spec::ndhwc != 0) {
    gemm_sm90_detail::consume_rows<Spec>(ring, bias, out, p, warp, lane);
  } else if constexpr (sizeof(T) == 2) {
    gemm_sm90_detail::consume_half<Spec>(ring, bias, out, p, warp, lane);
  } else {
    gemm_sm90_detail::consume_tf32<Spec>(ring, bias, out, p, warp, lane);
  }
}

}  // namespace conv3djit
