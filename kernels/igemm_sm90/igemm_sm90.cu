// Implicit-GEMM convolution on Hopper's warpgroup tensor cores (wgmma, sm_90a), groups == 1.
//
// GEMM view: rows = output positions, columns = output channels, reduction = (c, kd, kh, kw). A
// block is a persistent worker walking items (spatial tile, block of BN channels): tiles of TH x
// TW outputs of one (n, od), or with ROW = OW > 0 of TH x TW consecutive positions of its OH x OW
// plane (row tiles: the input is whole rows, so no column is wasted where OW is no multiple of 8,
// and a channel's outputs are one contiguous run), or with ACROSS of TH rows of all N x OH rows of
// a pointwise layer planned 8 columns wide (tiles across images, geometry.cuh). With the weights
// resident a block keeps one channel block; streamed, its items may change channel block, so that
// every resident block takes a share. The reduction runs CC channels at a time: a work item is
// (tile, chunk).
// Each item's input (CC x KD x rows x columns; outside the input, the padding mode's values) is
// copied into one of G.stages buffers while an earlier item is computed (the copies of the next
// stages - 1 items are in flight, stages - 2 for tf32 items that run without a drain; geometry.cuh
// says how many stages): with TMA = 1 as one tensor box (a single
// instruction from one thread, completing on the buffer's mbarrier; the box starts up to 3 columns
// early so that its origin is 16-byte aligned, and the gather reads `shift` columns in; padding
// modes other than zeros overwrite the box's zeros, fill_border below), else
// element by element with cp.async by all threads. Items start with a block-wide barrier, except
// TMA tiles of one chunk: there the last warp done with a buffer refills it, and warpgroups run
// apart. The weights go to shared
// memory rounded to TF32 (and split into big + small for 3xTF32) in wgmma's layout: when the whole
// reduction is one chunk (CC == CG) the block converts them itself, once; with several chunks,
// igemm_sm90_weights (below, launched just before on the same stream) has written every chunk in that
// form to a workspace, `wt` points there, and each item's chunk is a plain copy (one bulk copy
// with TMA, else 16-byte cp.async) into the item's buffer, next to the input. Where one TF32
// product takes float32 weights in chunks of whole 128-byte rows (RAW, sm90_raw_weights), each
// item's chunk comes straight from the weight tensor instead: TMA boxes of BN rows x 32 terms
// (`w_map`), rounded to TF32 as they land, stored 128-byte swizzled (wgmma's K-major B with
// descriptor_sw128), and no step runs before the kernel.
//
// The im2col gather is what run-time specialisation buys: a thread's A fragment for reduction
// slice s is four shared-memory loads at (its output position's base) + (the slice's offsets for
// its k = t and t + 4), and those offsets come from a per-block table built from compile-time
// constants (one word a slice and t: the two offsets in floats, 16 bits each, so that a warp's
// table load is one shared-memory wavefront, not the two of 8-byte entries), so C = 3 packs densely (315 terms = 40 slices of 8, the 5 padding terms read an
// all-zero plane after the channels). The planner picks the tile pitches RP, PP, CP so that these
// loads hit distinct banks. With PL > 1, where one kd's terms are translates of a small box
// (sm90_pattern: the reference's 3 x 5 x 1 along kw), the slices are unrolled and a load is the
// thread's register for its box cell plus the slice's constant: no table and no address
// arithmetic (H200, tf32 reference: 0.596 -> 0.569 ms, although the box's rows put 1.75
// wavefronts on a load where the table's order had 1.0; docs/kernels/igemm_sm90.md). Where the
// pattern's translates step along kw by one output column (sm90_paired; TMA boxes), a thread's two
// A rows are the adjacent positions p, p + 1 instead of p, p + 8: translate o at p is translate o - 1 at
// p + 1, so a slice after its kernel row's first loads only its p + 1 half (32 loads a plane, not
// 56), and a channel's two positions leave in one 8-byte store (H200, tf32 reference: 0.571 ->
// 0.547 ms; with 4-byte stores, each half-filling its sectors, 0.99 ms; docs/kernels/igemm_sm90.md). With unit
// stride along W and TMA boxes (sm90_pair_loads) the thread loads translate o's two columns
// p + o, p + o + 1 as one 8-byte pair where it is aligned (every other translate, by the parity
// PARITY of the box shift) and each pair serves two slices (0.500 -> 0.464 ms, docs/kernels/igemm_sm90.md).
//
// Outputs: tf32 row tiles and 256-column TH x TW tiles stage them (G.store_channels > 0): each
// warp fills a box of its 16 positions x PL planes x some channels in shared memory, and one lane
// stores it with a TMA tensor store (where the output has no tensor map, the warp copies the box
// out itself, or with the plain epilogue TH x TW tiles store from registers); elsewhere each
// thread stores its accumulators (8-byte stores for paired rows).
// These kernels are bound by shared-memory bandwidth, so the box's stores avoid bank conflicts.
//
// SPLIT = 1 (fp32 class): 3xTF32, x = big + small with big = tf32(x), small = tf32(x - big); per
// slice small*big, big*small, then big*big into the same accumulator. Tensor cores add with
// truncation, so one long chain drifts (2-4e-6 rel-L2 measured with mma.sync): the chain restarts
// every two groups (2 x CHAIN slices, scale-d = 0) and is added to a running sum with a
// round-to-nearest FADD; past 512 terms that sum joins a separate total every 512 terms (blocked
// summation: without it a 13824-term reduction reached 7.4e-7 rel-L2 and failed allclose on
// near-zero outputs).
// SPLIT = 0 (tf32 class): one TF32 product, one chain. The gather rounds each operand to TF32
// (tf32_operand) unless it arrives rounded: a TMA box of the TFLOAT32 map type with zero padding
// (the TMA rounds as it loads; other padding modes rewrite border cells from the input), or a
// half layer's values (exact in TF32).
// bf16 and fp16 layers (sm90_split_of: SPLIT = 0, their values are exact in TF32, so every product
// is exact and sums in fp32 as the half kernels' do) read a float32 copy of the input that
// pitch_rows makes on every call, and the weights and bias converted as they are loaded; outputs
// leave in Spec::out_element.
// NDHWC layers (Spec::ndhwc) read the same copy, pitch_rows transposing the input into NCDHW
// rows; their weights are read in (kd, kh, kw, c) order (weight_term) and their outputs leave
// from registers, never staged: a thread's two channels of a position are adjacent there.
//
// PL > 1 (tf32 class, one chunk, unit stride and dilation along D): a tile is the same positions
// of PL consecutive output planes, with PL sets of accumulators. The gather walks the tile's
// PL + KD - 1 input planes, and each plane's A fragments feed the wgmmas of every output plane
// that reads it, with that plane's kd of the weights: on the reference problem (KD = 3, PL = 2)
// 6 wgmma slices of work per 4 gathered, and half the tiles' fixed costs (drain, epilogue
// arithmetic, next tile's start) per output. The price: each kd's (c, kh, kw) terms are padded to
// whole slices (105 -> 112 on the reference, against 315 -> 320 packed densely). H200, reference
// problem: 0.658 -> 0.601 ms (docs/kernels/igemm_sm90.md).
#pragma once
#include "common/async_copy.cuh"
#include "common/epilogue.cuh"
#include "common/padding.cuh"
#include "common/run_store.cuh"
#include "common/tf32.cuh"
#include "igemm_sm90/geometry.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"

namespace conv3djit {

// Where weight (column n, reduction term r) of one chunk goes: core matrix (slice r / 8, column
// block n / 8, k half), row n % 8, element r % 4 (see wgmma.cuh).
__device__ __forceinline__ int sm90_weight_index(int n, int r, int nb) {
  return (((r / 8 * nb + n / 8) * 2 + (r % 8) / 4) * 8 + n % 8) * 4 + r % 4;
}

// A thread's two outputs of one staging box row: positions p, p + 1 (paired rows) or p, p + 8.
template <bool PAIRED, class T>
__device__ __forceinline__ void sm90_box_store(T* dst, float lo, float hi) {
  if (PAIRED) {
    store_pair(dst, lo, hi);
  } else {
    store_float(dst, lo);
    store_float(dst + 8, hi);
  }
}

template <class Spec>
__global__ void __launch_bounds__(Spec::th * Spec::tw * 2, sm90_geometry_of<Spec>().min_blocks)
igemm_sm90(const float* __restrict__ in, const typename Spec::element* __restrict__ wt,
           const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out, ConvParams p,
           const __grid_constant__ TensorMap map, const __grid_constant__ TensorMap out_map,
           const __grid_constant__ TensorMap w_map) {
  using Out = typename Spec::out_element;
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, TH = Spec::th, TW = Spec::tw;
  constexpr int BN = Spec::bn, CC = Spec::cc, RP = Spec::rp, PP = Spec::pp, CP = Spec::cp, SPLIT = sm90_split_of<Spec>();
  constexpr int TMA = Spec::tma, ROW = Spec::rows, PL = Spec::planes, PARITY = Spec::parity;
  constexpr bool NDHWC = Spec::ndhwc != 0, ACROSS = Spec::across != 0;
  constexpr Sm90Geometry G = sm90_geometry_of<Spec>();
  // Weights read raw by TMA, 128-byte swizzled (sm90_raw_weights): else copied as prepared.
  constexpr bool RAW = sm90_raw_weights_of<Spec>();
  constexpr int KVOL = KD * KH * KW, KRED = CG * KVOL, S = G.slices, THREADS = G.threads, NB = BN / 8;
  constexpr int PARTS = SPLIT ? 2 : 1, CHUNKS = G.chunks, STAGES = G.stages;
  // A group's slices come from one input plane z (PL = 1: one plane, all slices): S1 slices and
  // GROUPS1 groups a plane, PLANES planes and GROUPS groups an item. With several planes, an empty
  // group evens out a plane's groups, so that every plane starts on the same fragment registers.
  constexpr int S1 = G.plane_slices, PLANES = PL > 1 ? G.in_d : 1;
  // A gather pattern (geometry.cuh) replaces the table: its slices are unrolled, each reading
  // at (the thread's register for its group) + (the slice's constant offset).
  constexpr Sm90Pattern PAT = sm90_pattern(CC, KH, KW, PL);
  constexpr bool PATTERN = PAT.groups > 0;
  // Paired rows (sm90_paired): a thread's A rows are positions p and p + STEP.
  constexpr bool PAIRED = sm90_paired(CC, KH, KW, SW, DW, ROW, PL, TMA);
  // A operands that need no rounding in the gather (SPLIT = 0 above).
  constexpr bool ROUNDED =
      !SPLIT && (sizeof(typename Spec::element) == 2 || (TMA && Spec::pad_mode == padding::kZeros));
  constexpr int STEP = PAIRED ? 1 : 8;
  // ... and where they load their inputs in pairs (sm90_pair_loads), PARITY is the box shift's.
  constexpr bool PAIR_LOADS = sm90_pair_loads(CC, KH, KW, SW, DW, ROW, PL, TMA);
  // Slices per wgmma group. PL > 1: 2, paired rows 1 (with 4, or 2 with paired rows' carried
  // inputs, ptxas serialised the wgmmas of two accumulator sets for want of registers, C7512).
  constexpr int CHAIN = SPLIT ? (BN > 64 ? 1 : 2) : PL > 1 ? (PAIRED ? 1 : 2) : 4;
  constexpr int GROUPS1 = PL > 1 ? (S1 + 2 * CHAIN - 1) / (2 * CHAIN) * 2 : (S1 + CHAIN - 1) / CHAIN;
  constexpr int GROUPS = PLANES * GROUPS1;
  constexpr int BLOCK_CHAINS = 512 / (2 * CHAIN * 8);  // 3xTF32 chains per blocked total
  constexpr int R = BN / 2;                                 // accumulators per thread
  // NDHWC outputs of 256 columns with an activation, scaling or residual: their register
  // epilogue runs in rolled rounds of NDHWC_OCTETS channel octets (unrolled, a tf32 4 -> 256
  // 1 x 7 x 7 layer with a residual compiled in over a second on the build machine).
  constexpr int NDHWC_OCTETS = 8;
  constexpr bool NDHWC_ROLLED = NDHWC && !SPLIT && !epilogue::plain<Spec> && NB >= 32;
  constexpr int W_ELEMS = S * 8 * BN, WARPS = THREADS / 32;
  static_assert(TW % 8 == 0 && (TH * TW) % 64 == 0, "a warp's 8 + 8 rows lie in tile rows of 8");
  static_assert(RP >= G.in_w && PP >= G.in_h * RP && (ACROSS || CP >= G.in_d * PP), "tile pitches too small");
  // Across images: rows of CC channels of 8 columns, each read by TMA; no padding slot (its zero
  // channel has no place in such rows), no padding.
  static_assert(!ACROSS || (TMA && ROW == 0 && PL == 1 && KVOL == 1 && SD == 1 && SH == 1 && SW == 1 && TW == 8 &&
                            !NDHWC && !G.zero_channel && RP == CC * TW && CP == TW),
                "tiles across images: a pointwise NCDHW layer, 8 columns, TMA, rows of whole slices");
  // Floats of an item's input box: CC channels of CP (across: TH rows of CC channels of CP).
  constexpr int BOX_FLOATS = (ACROSS ? TH : 1) * CC * CP;
  static_assert(G.tile_floats <= 65536, "gather offsets are 16 bits");
  static_assert(PL == 1 || (!SPLIT && CHUNKS == 1 && SD == 1 && DD == 1 && KD >= PL),
                "several planes: tf32, one chunk, unit stride and dilation along D, KD >= PL");

  extern __shared__ float4 shared4[];
  // [buffers][PARTS][S][NB][2][8][4], or raw: [buffers][S / 4][BN][32] swizzled, from a 1024-byte
  // boundary.
  float* const w_s = reinterpret_cast<float*>(shared4) + (RAW ? (1024 - tma::smem_addr(shared4) % 1024) % 1024 / 4 : 0);
  unsigned* const table = reinterpret_cast<unsigned*>(w_s + G.weight_buffers * G.weight_floats);  // [S1][4]
  float* const bias_s = reinterpret_cast<float*>(table + G.table_ints);                            // [BN]
  unsigned long long* const bars = reinterpret_cast<unsigned long long*>(w_s + G.bars_at);  // TMA: [STAGES] + counts
  float* const tiles = w_s + G.tiles_at;                                                   // [STAGES][tile_floats]
  float* const staging = w_s + G.store_at;  // [WARPS][store_channels][PL][16 positions]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  // 32-bit extents and tile counts: the planner keeps each below 2^31.
  const int N = static_cast<int>(p.n), D = static_cast<int>(p.d), H = static_cast<int>(p.h), W = static_cast<int>(p.w);
  // Floats between input rows: half and NDHWC inputs are read from pitch_rows' float32 NCDHW copy,
  // in rows of W rounded up to 4 (the TMA map's pitch; cp.async staging reads the same copy), and
  // so are float inputs with TMA boxes where W % 4 != 0.
  const int WP = sizeof(typename Spec::element) == 2 || Spec::tma || NDHWC ? (W + 3) / 4 * 4 : W;
  const int OD = static_cast<int>(p.od), OH = static_cast<int>(p.oh), OW = static_cast<int>(p.ow);
  const int K = static_cast<int>(p.k), k_blocks = (K + BN - 1) / BN;
  // A plane's tiles: TH x TW blocks, or runs of TH x TW positions of the OH x ROW plane (1 x tiles_w).
  const unsigned tiles_h = ROW ? 1 : (OH + TH - 1) / TH;
  const unsigned tiles_w = ROW ? (OH * ROW + TH * TW - 1) / (TH * TW) : (OW + TW - 1) / TW;
  const int od_groups = (OD + PL - 1) / PL;  // a tile's output planes od0 .. od0 + PL - 1
  // Rows the tiles walk: a plane's, or across images all N x OH (row r: image r / OH, row r % OH).
  const int tile_rows = ACROSS ? N * OH : OH;
  const unsigned n_tiles = ACROSS ? (tile_rows + TH - 1) / TH
                                  : static_cast<unsigned>(p.n) * od_groups * tiles_h * tiles_w;
  // Items (tile, channel block): the block's are blockIdx.x, + gridDim.x, ..., item i being tile
  // i / k_blocks of channel block i % k_blocks (32 bits: the planner keeps them below 2^31). With
  // resident weights (CHUNKS == 1) the grid is a multiple of k_blocks: kb never changes.
  const unsigned n_items = n_tiles * static_cast<unsigned>(k_blocks);
  int kb = static_cast<int>(blockIdx.x % k_blocks);

  if (CHUNKS == 1) {
    // Element (n, r) of channels kb * BN ...: warp w converts rows n = w, w + WARPS, ..., its
    // lanes terms r = lane, lane + 32, ...
    for (int n = warp; n < BN; n += WARPS) {
      for (int r = lane; r < S * 8; r += 32) {
        const int term = sm90_slot_weight(r, CC, KD, KH, KW, PL);
        const bool ok = kb * BN + n < K && term >= 0;
        const float x =
            ok ? load_float(wt + static_cast<long long>(kb * BN + n) * KRED + weight_term(term, CG, KVOL, NDHWC))
               : 0.f;
        const int at = sm90_weight_index(n, r, NB);
        const float big = to_tf32(x);
        w_s[at] = big;
        if (SPLIT) w_s[W_ELEMS + at] = to_tf32(x - big);
      }
    }
  }
  // One chunk of prepared weights, contiguous in the workspace, copied 16 bytes at a time.
  auto copy_weights = [&](int block, int chunk, int buffer) {
    const float* src = reinterpret_cast<const float*>(wt) + static_cast<long long>(block * CHUNKS + chunk) * G.weight_floats;
    float* dst = w_s + buffer * G.weight_floats;
    for (int i = tid * 4; i < G.weight_floats; i += THREADS * 4) copy_or_zero<16>(dst + i, src + i, true);
  };
  // Tile offset (floats) of every term of a chunk; padding terms read the zero plane.
  for (int r = tid; r < (PATTERN ? 0 : S1 * 8); r += THREADS) {
    const int off = sm90_term_offset(r, CC, KD, KH, KW, DH, DW, RP, PP, CP, PL);
    reinterpret_cast<unsigned short*>(table + r / 8 * 4 + r % 4)[(r % 8) / 4] = static_cast<unsigned short>(off);
  }
  auto load_bias = [&] {
    for (int i = tid; i < BN; i += THREADS) {
      const int k = kb * BN + i;
      bias_s[i] = p.has_bias && k < K ? load_float(bias + k) : 0.f;
    }
  };
  load_bias();
  if constexpr (G.zero_channel) {
    constexpr int Z = G.zero_floats;
    for (int i = tid; i < STAGES * Z; i += THREADS) tiles[i / Z * G.tile_floats + CC * CP + i % Z] = 0.f;
  }
  const unsigned long long w_desc = RAW ? wgmma::descriptor_sw128(tma::smem_addr(w_s)) : wgmma::descriptor(w_s);

  // This thread's two A rows: positions pa and pa + STEP of its warpgroup's 64.
  const int pa = (tid >> 7) * 64 + ((tid >> 5) & 3) * 16 + (PAIRED ? 2 * g : g);
  const int shift = TMA ? sm90_tma_shift(p.pad_w) : 0;
  // Paired rows store both positions at once where they are 8-byte aligned: an even output width
  // (then pa + 1 lies in pa's row, and every run of a channel starts even) and an aligned `out`.
  const bool pairs_vec =
      !NDHWC && PAIRED && OW % 2 == 0 && reinterpret_cast<unsigned long long>(out) % (2 * sizeof(Out)) == 0;
  // Half outputs of tiles whose warps' 16 positions are one run (row tiles, or TW a multiple of
  // 16) store pairs of positions after a shuffle (store_run16, below).
  constexpr bool RUNS16 = sizeof(Out) == 2 && !NDHWC && !PAIRED && (ROW > 0 || TW % 16 == 0);
  // Tiles with output staging store through the output's tensor map where it exists (the host
  // encodes it under the same test, sm90_stores_staged), else copy their boxes out.
  constexpr bool STAGED = G.store_channels > 0;
  static_assert(!STAGED || !SPLIT, "staged outputs come from the tf32 accumulators");
  static_assert(!ACROSS || (!STAGED && !RUNS16 && !PAIRED), "tiles across images store each position from registers");
  const bool bulk = STAGED && sm90_stores_staged(ROW, TW, OW, static_cast<long long>(OH) * OW,
                                                 reinterpret_cast<unsigned long long>(out), sizeof(Out));

  // A tile's image and (first) plane, its first output row and column (row tiles: the first row they
  // touch, column 0) and, for row tiles, the plane position of its first output.
  struct Origin {
    int n, od, oh0, ow0, first;
  };
  auto origin = [&](unsigned tile) {
    if constexpr (ACROSS) return Origin{0, 0, static_cast<int>(tile) * TH, 0, 0};  // oh0: of all N x OH rows
    const unsigned plane = tile / tiles_w / tiles_h;
    const int n = static_cast<int>(plane / od_groups), od = static_cast<int>(plane % od_groups) * PL;
    if constexpr (ROW > 0) {  // (constexpr: ROW = 0 would divide by zero below)
      const int first = static_cast<int>(tile % tiles_w) * (TH * TW);
      return Origin{n, od, first / ROW, 0, first};
    }
    return Origin{n, od, static_cast<int>(tile / tiles_w % tiles_h) * TH, static_cast<int>(tile % tiles_w) * TW, 0};
  };
  // Output row and column of tile position pos.
  auto position = [&](const Origin& o, int pos) {
    return ROW ? make_int2((o.first + pos) / ROW, (o.first + pos) % ROW)
               : make_int2(o.oh0 + pos / TW, o.ow0 + pos % TW);
  };
  // Where an output's first input lies in the tile, in floats.
  auto tile_offset = [&](const Origin& o, int2 at) {
    return (at.x - o.oh0) * SH * RP + (at.y - o.ow0) * SW + shift;
  };
  // A warp copies whole tile rows, a lane the columns lane, lane + 32, ...: which of those lie
  // inside the input (and, for other padding modes than zeros, where they read) is the same for
  // every row, so it is worked out once per item (bit k of `inside`, cols[k]), and each row only
  // adds its own bounds and one 64-bit row address. Positions outside the input are zero-filled
  // from a valid address (the row start, or `in`).
  constexpr int ROWS = CC * G.in_d * G.in_h, XS = (G.in_w + 31) / 32, MODE = Spec::pad_mode;
  auto stage = [&](const Origin& o, int chunk, int buf) {
    const int id0 = o.od * SD - p.pad_d, ih0 = o.oh0 * SH - p.pad_h, iw0 = o.ow0 * SW - p.pad_w;
    const float* in_n = in + static_cast<long long>(o.n) * CG * D * H * WP;
    float* dst = tiles + buf * G.tile_floats + lane;
    unsigned inside = 0;
    int cols[XS];
#pragma unroll
    for (int k = 0; k < XS; ++k) {
      const int x = lane + 32 * k;
      cols[k] = MODE == padding::kZeros ? iw0 + x : padding::source<MODE>(iw0 + x, W);
      if (x < G.in_w && (MODE != padding::kZeros || static_cast<unsigned>(iw0 + x) < static_cast<unsigned>(W))) {
        inside |= 1u << k;
      }
    }
    for (int row = warp; row < ROWS; row += WARPS) {
      const int y = row % G.in_h, z = row / G.in_h % G.in_d, c = row / (G.in_h * G.in_d), cg = chunk * CC + c;
      const int id = padding::source<MODE>(id0 + z * DD, D), ih = padding::source<MODE>(ih0 + y, H);
      const bool row_ok = (CG % CC == 0 || cg < CG) && id >= 0 && ih >= 0;
      const float* src = row_ok ? in_n + (static_cast<long long>(cg * D + id) * H + ih) * WP : in;
      float* d = dst + c * CP + z * PP + y * RP;
#pragma unroll
      for (int k = 0; k < XS; ++k) {
        if (k == XS - 1 && lane + 32 * k >= G.in_w) break;
        const bool ok = row_ok && (inside >> k & 1u);
        copy_or_zero(d + 32 * k, src + (ok ? cols[k] : 0), ok);
      }
    }
  };

  // A TMA box fills what lies outside the input with zeros. With another padding mode the threads
  // then overwrite the cells the gather reads there (columns shift .. shift + in_w - 1) with the
  // mode's source: the tile's own cell where the source lies in the tile (replicate and reflect
  // within the kernel's reach), else the input in global memory (circular). Two passes, each
  // reading only cells inside the input, so that neither waits for the other: the columns outside
  // along W of every row, a thread a cell; and the columns inside of the rows outside along D or
  // H, copied from their source rows 16 bytes at a time where aligned. A thread's first cell of
  // each pass is worked out once a tile (Border), so that a tile's chunks mostly just copy.
  // (The border's geometry: sm90_border and its passes, geometry.cuh.)
  struct Cell {
    int c, dst, src;  // channel (-1: none), offset, the source's offset (-1: from the input)
    bool vec;         // 16 bytes
  };
  struct Border : Sm90Border {
    Cell column, row;  // this thread's first cell of each pass
  };
  // Where cell (z, y, x) reads: its offset in the tile, or -1 where that lies outside the tile.
  auto source_offset = [&](const Sm90Border& b, int z, int y, int x) {
    const int dz = padding::source<MODE>(b.id0 + z * DD, D) - b.id0, ys = padding::source<MODE>(b.ih0 + y, H) - b.ih0;
    const int xs = padding::source<MODE>(b.iw0 + x, W) - b.iw0;
    const bool held = dz >= 0 && dz % DD == 0 && dz / DD < G.in_d && ys >= 0 && ys < G.in_h && xs >= 0 && xs < RP;
    return held ? dz / DD * PP + ys * RP + xs : -1;
  };
  auto offset_of = [&](const Sm90BorderCell& x) { return x.c * CP + x.z * PP + x.y * RP + x.x; };
  // A column cell reads its own source; a row unit its row's source row (at column lo) shifted.
  auto column_cell = [&](const Sm90Border& b, int i) {
    const Sm90BorderCell x = sm90_border_column(b, i, shift, G.in_d, G.in_h, G.in_w);
    const int src = source_offset(b, x.z, x.y, x.x);
    return Cell{x.c, offset_of(x), src >= 0 ? x.c * CP + src : -1, false};
  };
  auto row_cell = [&](const Sm90Border& b, int i) {
    const Sm90Span w = sm90_border_span(b, shift, G.in_w);
    const Sm90BorderCell x = sm90_border_row(b, w, i, G.in_d, G.in_h);
    const int from = source_offset(b, x.z, x.y, w.lo);
    return Cell{x.c, offset_of(x), from >= 0 ? x.c * CP + from - w.lo + x.x : -1, x.vec};
  };
  auto column_cells = [&](const Sm90Border& b) { return ROWS * (b.left + b.right); };
  auto row_cells = [&](const Sm90Border& b) {
    return CC * sm90_border_rows(b, G.in_d, G.in_h) * sm90_border_span(b, shift, G.in_w).units;
  };
  auto border_of = [&](const Origin& o) {
    Border b;
    static_cast<Sm90Border&>(b) = sm90_border(o.od * SD - p.pad_d, o.oh0 * SH - p.pad_h, o.ow0 * SW - p.pad_w - shift,
                                              shift, DD, G.in_d, G.in_h, G.in_w, D, H, W);
    b.column = tid < column_cells(b) ? column_cell(b, tid) : Cell{-1, 0, 0, false};
    b.row = tid < row_cells(b) ? row_cell(b, tid) : Cell{-1, 0, 0, false};
    return b;
  };
  auto has_border = [&](const Border& b) { return sm90_border_any(b, G.in_d, G.in_h); };
  auto fill_border = [&](const Border& b, int n, int chunk, int buf) {
    const float* in_n = in + static_cast<long long>(n) * CG * D * H * WP;
    float* tile = tiles + buf * G.tile_floats;
    // A cell's value from the input (its source outside the tile): decoded from its offset.
    auto from_input = [&](int dst) {
      const int c = dst / CP, z = dst % CP / PP, y = dst % PP / RP, x = dst % RP;
      const int id = padding::source<MODE>(b.id0 + z * DD, D), ih = padding::source<MODE>(b.ih0 + y, H);
      const int iw = padding::source<MODE>(b.iw0 + x, W);
      return in_n[(static_cast<long long>(chunk * CC + c) * D + id) * H * WP + static_cast<long long>(ih) * WP + iw];
    };
    auto copy = [&](const Cell& cell) {
      if (cell.c < 0 || (CG % CC != 0 && chunk * CC + cell.c >= CG)) return;  // (channels past C stay zero)
      if (cell.vec && cell.src >= 0) {
        *reinterpret_cast<float4*>(tile + cell.dst) = *reinterpret_cast<const float4*>(tile + cell.src);
      } else {
#pragma unroll 1
        for (int e = 0; e < (cell.vec ? 4 : 1); ++e) {
          tile[cell.dst + e] = cell.src >= 0 ? tile[cell.src + e] : from_input(cell.dst + e);
        }
      }
    };
    copy(b.column);
    copy(b.row);
#pragma unroll 1
    for (int i = tid + THREADS; i < column_cells(b); i += THREADS) copy(column_cell(b, i));
#pragma unroll 1
    for (int i = tid + THREADS; i < row_cells(b); i += THREADS) copy(row_cell(b, i));
    // The buffer's next box is written through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  };

  constexpr bool BLOCKED = SPLIT && KRED > 512;
  float acc[PL][R], sum[R], total[BLOCKED ? R : 1];  // acc[PL - 1 - d]: output plane od0 + d (below)
  int chains = 0;  // since the last blocked total
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int d = 0; d < PL; ++d) acc[d][i] = 0.f;
    sum[i] = 0.f;
  }
  // Several planes keep their accumulator sets in named PTX registers (wgmma.cuh), out of NVVM's
  // sight; acc then holds them only for the epilogue.
  constexpr bool NAMED = PL > 1;
  static_assert(!NAMED || (BN == 64 && PL <= 3), "named sets: 64 columns, at most 3 planes");
  if constexpr (NAMED) wgmma::declare_sets();
  auto settle_all = [&] {
    if constexpr (NAMED) {
      wgmma::read_sets(acc);
    } else {
#pragma unroll
      for (int d = 0; d < PL; ++d) wgmma::settle(acc[d]);
    }
  };
  // Pattern: the byte offsets of this thread's box cells 8q + t and 8q + t + 4 (group q).
  constexpr int NG = PATTERN ? PAT.groups : 1;
  int cell_lo[NG], cell_hi[NG];
#pragma unroll
  for (int q = 0; q < NG; ++q) {
    auto offset = [&](int cell) {
      return cell < PAT.cells ? 4 * sm90_term_at(sm90_pattern_cell(PAT, cell, KH, KW, false), DH, DW, RP, PP, CP) : 0;
    };
    cell_lo[q] = offset(8 * q + t);
    cell_hi[q] = offset(8 * q + t + 4);
  }
  // PL > 1: a thread's k = t and k = t + 4 of a plane's last slice (pattern: of its last group's
  // slices) may be padding slots, whose fragments are zero (the gather reads offset 0 for them; a
  // finite weight of 0 times an inf there would make a NaN the convolution does not have).
  constexpr int LAST_SLOTS = PATTERN ? 8 * (NG - 1) : 8 * (S1 - 1), REAL_SLOTS = PATTERN ? PAT.cells : CC * KH * KW;
  constexpr bool PADDED = PL > 1 && REAL_SLOTS % 8 != 0;
  const bool pad_lo = LAST_SLOTS + t >= REAL_SLOTS, pad_hi = LAST_SLOTS + t + 4 >= REAL_SLOTS;
  unsigned a[2][CHAIN][PARTS][4];  // A fragments of two groups: one gathered while the other runs
  float carry[NG][2];              // paired rows: inputs at pa + 1 of each box group's last slice
  float2 pairs[NG][2];             // pair loads: the pairs at k = t and t + 4 of each box group's
                                   // last aligned translate (or the one after it)

  // Items are (tile, chunk) pairs in order: item j is chunk j % CHUNKS of the block's (j /
  // CHUNKS)-th (tile, channel block), in buffer j % STAGES. A tf32 chain runs on across a tile's
  // chunks, so with 3 or more stages an item does not wait for its last wgmmas (the tensor cores
  // keep running into the next item, whose first wait<1> covers them): its buffer is free one item
  // later, and its copies run one item less far ahead.
  constexpr bool DRAIN = SPLIT || CHUNKS == 1 || STAGES < 3;
  constexpr int LEAD = DRAIN ? STAGES - 1 : STAGES - 2;
  auto item_of = [&](int j) { return blockIdx.x + static_cast<unsigned>(j / CHUNKS) * gridDim.x; };
  // TMA: item j's box (and chunk of weights) by one thread, completing on the buffer's mbarrier.
  auto load_item = [&](int j) {
    const unsigned item = item_of(j);
    if (item >= n_items) return;
    const Origin o = origin(item / k_blocks);
    const int chunk = j % CHUNKS, buf = j % STAGES, block = static_cast<int>(item % k_blocks);
    unsigned long long* bar = bars + buf;
    float* const dst = tiles + buf * G.tile_floats;
    tma::arrive_expect(bar, (BOX_FLOATS + (CHUNKS > 1 ? G.weight_floats : 0)) * 4);
    if constexpr (ACROSS) {
      // Rows oh0 .. oh0 + TH - 1 of all N x OH: one box of TH rows where they lie in one image (or
      // run past the last, into zeros), else one box a row from `out_map`, the one-row map.
      const int n0 = o.oh0 / OH, y0 = o.oh0 % OH;
      if (y0 + TH <= OH || n0 == N - 1) {
        tma::load_box(dst, map, 0, chunk * CC, y0, 0, n0, bar);
      } else {
#pragma unroll 1
        for (int r = 0; r < TH; ++r) {
          const int row = o.oh0 + r;
          tma::load_box(dst + r * RP, out_map, 0, chunk * CC, row % OH, 0, row / OH, bar);
        }
      }
    } else {
      tma::load_box(dst, map, o.ow0 * SW - p.pad_w - shift, o.oh0 * SH - p.pad_h, o.od * SD - p.pad_d, chunk * CC,
                    o.n, bar);
    }
    if constexpr (RAW) {
      // Rows block * BN .. of the K x CG·KVOL weight, 32 terms (one 128-byte row) a box; rows
      // past K and terms past the last chunk arrive as zeros (`w_map`).
#pragma unroll 1
      for (int a = 0; a < G.kred / 32; ++a) {
        tma::load_box(w_s + buf * G.weight_floats + a * 32 * BN, w_map, chunk * G.kred + 32 * a, block * BN, bar);
      }
    } else if (CHUNKS > 1) {
      tma::load_bytes(w_s + buf * G.weight_floats,
                      reinterpret_cast<const float*>(wt) + static_cast<long long>(block * CHUNKS + chunk) * G.weight_floats,
                      G.weight_floats * 4, bar);
    }
  };
  // TMA, one chunk (an item is a tile): a warp done with item j's gathers counts itself out of its
  // buffer, and the last warp out loads item j + STAGES into it. No block-wide barrier: a
  // warpgroup's epilogue (stores) overlaps the others' wgmmas, and the next box loads meanwhile.
  constexpr bool DECOUPLED = TMA && CHUNKS == 1;
  unsigned* const done = reinterpret_cast<unsigned*>(bars + STAGES);  // [STAGES], counts only up
  auto release = [&](int j) {
    __syncwarp();  // the warp's reads of the buffer come before its count
    if (lane == 0) {
      unsigned before;
      asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n"
                   : "=r"(before)
                   : "r"(tma::smem_addr(done + j % STAGES))
                   : "memory");
      if ((before + 1) % WARPS == 0) load_item(j + STAGES);
    }
  };
  // Otherwise every item starts with a barrier, after which item `fetched` (LEAD ahead) is copied:
  // by every thread with cp.async (one commit group each, empty past the last item), or by one
  // thread with TMA.
  int fetched = 0;
  auto fetch = [&] {
    if (TMA) {
      if (tid == 0) load_item(fetched);
    } else if (item_of(fetched) < n_items) {
      const unsigned item = item_of(fetched);
      stage(origin(item / k_blocks), fetched % CHUNKS, fetched % STAGES);
      if (CHUNKS > 1) copy_weights(static_cast<int>(item % k_blocks), fetched % CHUNKS, fetched % STAGES);
    }
    copies_commit();
    ++fetched;
  };
  if (TMA && tid == 0) {
    for (int b = 0; b < STAGES; ++b) {
      tma::init(bars + b);
      done[b] = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Code that runs once a block or on the rare path stays rolled: NVRTC's time grows with the
  // code it unrolls (the tf32 reference kernel: 8 % less work with these loops and the copy-out's
  // rolled; docs/kernels/igemm_sm90.md).
  if (DECOUPLED) {
    if (tid == 0) {
#pragma unroll 1
      for (int j = 0; j < STAGES; ++j) load_item(j);
    }
  } else {
#pragma unroll 1
    for (int i = 0; i < LEAD; ++i) fetch();
  }
  // The tensor cores read the weights stored above through the async proxy.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  // The tile's residual (its runs of positions, each channel and plane) goes to L2 as the tile
  // starts: the epilogue's reads, a batch at a time, then hit L2 rather than DRAM.
  auto prefetch_residual = [&](const Origin& o) {
    constexpr int RUN = ROW ? TH * TW : TW, RUNS = BN * PL * (ROW ? 1 : TH);
    const long long plane = static_cast<long long>(OH) * OW;
    if constexpr (NDHWC) {  // each position's BN channels, one run
      const Out* res = reinterpret_cast<const Out*>(p.residual);
      constexpr int LINE = 128 / sizeof(Out), LINES = (BN + LINE - 1) / LINE;  // (elements a cache line)
#pragma unroll 1
      for (int r = tid; r < TH * TW * PL * LINES; r += THREADS) {
        const int q = r / LINES, d = q / (TH * TW), k = min(kb * BN + r % LINES * LINE, K - 1);
        const int2 at = position(o, q % (TH * TW));
        if (at.x >= OH || at.y >= OW || o.od + d >= OD) continue;
        prefetch_l2(res + ((static_cast<long long>(o.n) * OD + o.od + d) * plane + at.x * OW + at.y) * K + k);
      }
    } else {  // each channel's run of positions
#pragma unroll 1
      for (int r = tid; r < RUNS; r += THREADS) {
        const int c = r % BN, d = r / BN % PL, y = r / (BN * PL), k = kb * BN + c;
        const int row = o.oh0 + y, n = ACROSS ? row / OH : o.n;  // (across: of all N x OH rows)
        const int start = ROW ? o.first : (ACROSS ? row % OH : row) * OW + o.ow0;
        const int len = ROW ? min(RUN, OH * OW - o.first) : min(RUN, OW - o.ow0);
        if (k >= K || o.od + d >= OD || (!ROW && row >= tile_rows)) continue;
        epilogue::prefetch_residual<Spec>(((static_cast<long long>(n) * K + k) * OD + o.od + d) * plane + start, len, p);
      }
    }
  };
  int it = 0;  // items so far; item `it` uses buffer it % STAGES
  // A tile's chunks in an inner loop: between them the accumulators are touched by wgmma only, so
  // ptxas keeps them in flight across the loop's back edge (a wait at the tile's end, not per item).
#pragma unroll 1
  for (unsigned item = blockIdx.x; item < n_items; item += gridDim.x) {
    const Origin o = origin(item / k_blocks);
    // A new channel block (streamed weights only): its bias goes to shared memory after the first
    // chunk's barrier (every warp is past the last tile's epilogue then), and the second chunk's
    // barrier puts it before this tile's epilogue.
    const bool new_block = CHUNKS > 1 && static_cast<int>(item % k_blocks) != kb;
    kb = static_cast<int>(item % k_blocks);
    constexpr bool FILLS = TMA && MODE != padding::kZeros;
    Border border{};
    if constexpr (FILLS) border = border_of(o);
    if constexpr (Spec::residual != 0) prefetch_residual(o);
    // The thread's second A row reads its inputs `second` bytes after its first: a compile-time
    // distance in TH x TW tiles (8 columns on, or one row down in tiles 8 wide) and for paired
    // rows (p + 1 lies in p's row: p is even, and so are row tiles' rows), a tile's own in other
    // row tiles (where the run of positions may wrap into the next row).
    const int base_a = tile_offset(o, position(o, pa));
    const int second = PAIRED ? 4 * SW
                       : ROW  ? 4 * (tile_offset(o, position(o, pa + STEP)) - base_a)
                              : 4 * (TW >= 16 ? 8 * SW : SH * RP);
#pragma unroll 1
    for (int chunk = 0; chunk < CHUNKS; ++chunk, ++it) {
      const int buf = it % STAGES;
      if (!DECOUPLED) {
        copies_wait<LEAD - 1>();  // this item's copies (the next LEAD - 1 items' stay in flight)
        // Weights copied with cp.async reach the tensor cores through the async proxy.
        if (CHUNKS > 1 && !TMA) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        // A box's padded cells are rewritten before the barrier, which the gathers then wait for.
        if (FILLS && has_border(border)) {
          tma::wait(bars + buf, it / STAGES & 1);
          fill_border(border, o.n, chunk, buf);
        }
        // This item's copies have landed, and every warp is done with the item whose buffer the
        // next copy refills: one barrier an item.
        __syncthreads();
        fetch();
        if (CHUNKS > 1 && chunk == 0 && new_block) load_bias();
      }
      if (TMA) tma::wait(bars + buf, it / STAGES & 1);  // this buffer's (it / STAGES)-th use
      // Warps that run apart meet at a barrier of their own in tiles with padded cells.
      if (DECOUPLED && FILLS && has_border(border)) {
        fill_border(border, o.n, chunk, buf);
        __syncthreads();
      }

      const char* a_row = reinterpret_cast<const char*>(tiles + buf * G.tile_floats + base_a);
      auto at = [&](int bytes) { return *reinterpret_cast<const float*>(a_row + bytes); };
      // Rounded with integer arithmetic (tf32.cuh): cvt.rna would cost ~4 instructions a value.
      // Group g of input plane z: slices g * CHAIN ... (below S1) of that plane.
      // Paired rows: a slice one translate after slice s - NG of the same kernel row takes k = t and
      // t + 4 at pa from that slice's pa + 1, kept in `carry` for its box group s % NG (with one
      // slice a group, that slice lies NG groups back: its fragment registers hold another's).
      auto gather = [&](int z, int group, unsigned (&frag)[CHAIN][PARTS][4]) {
        const int z_bytes = z * PP * 4, s0 = group * CHAIN;
#pragma unroll
        for (int j = 0; j < CHAIN; ++j) {
          const int s = s0 + j;
          if (s >= S1) break;
          int lo, hi;          // bytes of k = t and k = t + 4
          bool reuse = false;  // paired rows: not the first translate of its kernel row
          if constexpr (PATTERN) {
            const Sm90Term translate = sm90_pattern_cell(PAT, s / NG, KH, KW, true);
            const int f = 4 * sm90_term_at(translate, DH, DW, RP, PP, CP);
            lo = cell_lo[s % NG] + z_bytes + f;
            hi = cell_hi[s % NG] + z_bytes + f;
            reuse = PAIRED && translate.kw > 0;
          } else {
            const unsigned entry = table[s * 4 + t];
            lo = (entry & 0xffffu) * 4 + z_bytes;
            hi = (entry >> 16) * 4 + z_bytes;
          }
          float x[4];
          if constexpr (PAIR_LOADS) {
            // Translate o takes columns p + o, p + o + 1 (second = 4 bytes). An aligned translate
            // reads them as one pair, loaded by the translate before it where there is one; an
            // unaligned one takes the first from that pair (or loads it alone, as o = 0) and loads
            // the next translate's pair for the second (or the second alone, as the last).
            const int o = sm90_pattern_cell(PAT, s / NG, KH, KW, true).kw, q = s % NG;
            auto pair_at = [&](int bytes) { return *reinterpret_cast<const float2*>(a_row + bytes); };
            if (o % 2 == PARITY) {
              if (o == 0) {
                pairs[q][0] = pair_at(lo);
                pairs[q][1] = pair_at(hi);
              }
              x[0] = pairs[q][0].x;
              x[1] = pairs[q][0].y;
              x[2] = pairs[q][1].x;
              x[3] = pairs[q][1].y;
            } else {
              x[0] = o > 0 ? pairs[q][0].y : at(lo);
              x[2] = o > 0 ? pairs[q][1].y : at(hi);
              if (o + 1 < KW) {
                pairs[q][0] = pair_at(lo + 4);
                pairs[q][1] = pair_at(hi + 4);
                x[1] = pairs[q][0].x;
                x[3] = pairs[q][1].x;
              } else {
                x[1] = at(lo + 4);
                x[3] = at(hi + 4);
              }
            }
          } else {
            x[0] = reuse ? carry[s % NG][0] : at(lo);
            x[1] = at(lo + second);
            x[2] = reuse ? carry[s % NG][1] : at(hi);
            x[3] = at(hi + second);
            if (PAIRED) {
              carry[s % NG][0] = x[1];
              carry[s % NG][1] = x[3];
            }
          }
          if (PADDED && 8 * (PATTERN ? s % NG : s) == LAST_SLOTS) {
            if (pad_lo) x[0] = x[1] = 0.f;
            if (pad_hi) x[2] = x[3] = 0.f;
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (SPLIT) {
              const float big = tf32_big(x[e]);
              frag[j][0][e] = __float_as_uint(big);
              frag[j][PARTS - 1][e] = tf32_operand(x[e] - big);
            } else {
              frag[j][0][e] = ROUNDED ? __float_as_uint(x[e]) : tf32_operand(x[e]);
            }
          }
        }
      };
      // A tile's first wgmma starts its chain from zero, so only the running sums need clearing.
      if (SPLIT && chunk == 0) {
#pragma unroll
        for (int i = 0; i < R; ++i) sum[i] = 0.f;
        if (BLOCKED) {
#pragma unroll
          for (int i = 0; i < R; ++i) total[i] = 0.f;
          chains = 0;
        }
      }
      const unsigned long long w_item = w_desc + (CHUNKS > 1 ? buf * (G.weight_floats * 4 >> 4) : 0);
      // One group: its wgmmas on `cur`, then the next group's gather into `next`. The group loop
      // stays rolled (two groups per trip, so the fragment arrays keep fixed registers): NVRTC
      // compiles a fully unrolled 3xTF32 kernel in 1.3 s (BN = 64) to 11 s (BN = 128).
      using Frags = unsigned[CHAIN][PARTS][4];
      // Slice s of tap kd (PL > 1; else slice s of the chunk) in the weights (raw: 32 bytes into
      // its 128-byte rows, of the rows of the slice's 32 terms).
      auto b_desc = [&](int kd, int s) {
        if constexpr (RAW) return w_item + static_cast<unsigned>((s / 4 * BN * 128 + s % 4 * 32) >> 4);
        return w_item + static_cast<unsigned>((kd * S1 + s) * NB * 2 * 128 >> 4);
      };
      // 3xTF32: an even group starts a chain, the odd one after it ends it (so does a last even
      // group); the accumulators are drained into `sum` only then, and the group between overlaps
      // its gather with the chain's first half. TF32: the group of input plane ip.z feeds output
      // planes first .. last, or with first < 0 (an edge plane, below) acc[0] with tap ip.tap.
      // `count` (its slices), `first` and `last` are constants at every call: a wgmma behind a
      // run-time branch makes ptxas fence the accumulators around it (C7519).
      struct InputPlane {
        int z, next, tap;  // next: the plane gathered after this one (-1: none)
      };
      auto run_group = [&](const InputPlane& ip, int first, int last, int group, int count, const Frags& cur,
                           Frags& next, bool odd) {
        const int s0 = group * CHAIN;
        wgmma::fence();
#pragma unroll
        for (int j = 0; j < count; ++j) {
          const int s = s0 + j;
          if (SPLIT) {
            const unsigned long long big_b = b_desc(0, s), small_b = big_b + (W_ELEMS * 4 >> 4);
            wgmma::mma<BN>(acc[0], cur[j][PARTS - 1], big_b, j > 0 || odd);
            wgmma::mma<BN>(acc[0], cur[j][0], small_b, true);
            wgmma::mma<BN>(acc[0], cur[j][0], big_b, true);
          } else if (first < 0) {  // (only with several planes)
            if constexpr (NAMED) wgmma::mma_set<0>(cur[j][0], b_desc(ip.tap, s), s > 0);
          } else {
            // Plane z is tap z - d of output plane d. In order, plane d starts d's chain (tap 0);
            // with two planes the edge planes (below) have started both.
#pragma unroll
            for (int d = first; d <= last; ++d) {
              const bool starts = PL != 2 && ip.z == d;
              const bool accumulate = !starts || s > 0 || chunk > 0;
              if constexpr (NAMED) {
                wgmma::mma_in_set(PL - 1 - d, cur[j][0], b_desc(ip.z - d, s), accumulate);
              } else {
                wgmma::mma<BN>(acc[PL - 1 - d], cur[j][0], b_desc(ip.z - d, s), accumulate);
              }
            }
          }
        }
        wgmma::commit();
        // `next` holds the fragments of the group before this one: wait for it unless it ended a
        // 3xTF32 chain (waited for below).
        if (!SPLIT || odd) wgmma::wait<1>();
        const bool plane_done = group + 1 == GROUPS1;
        if (!plane_done) {
          gather(ip.z, group + 1, next);
        } else if (ip.next >= 0) {
          gather(ip.next, 0, next);
        }
        if (SPLIT && (odd || plane_done)) {
          wgmma::wait<0>();
          wgmma::settle(acc[0]);
#pragma unroll
          for (int i = 0; i < R; ++i) sum[i] += acc[0][i];
          if (BLOCKED && ++chains == BLOCK_CHAINS) {
#pragma unroll
            for (int i = 0; i < R; ++i) {
              total[i] += sum[i];
              sum[i] = 0.f;
            }
            chains = 0;
          }
        }
      };
      // Without a drain, the previous item's last group may still be reading its A fragments from
      // registers: a[1] when the group count is even, else a[0], which the next gather overwrites.
      if (!DRAIN && GROUPS % 2 == 1) wgmma::wait<0>();
      gather(0, 0, a[0]);
      // A plane's groups: pairs of whole groups, then an odd whole group, a short one and the
      // empty one that makes them even (PL > 1: every plane starts on a[0]).
      constexpr int WHOLE = S1 / CHAIN, REST = S1 % CHAIN, REAL = WHOLE + (REST > 0 ? 1 : 0);
      auto run_plane = [&](const InputPlane& ip, int first, int last) {
#pragma unroll(PATTERN ? GROUPS1 : 1)
        for (int group = 0; group + 1 < WHOLE; group += 2) {
          run_group(ip, first, last, group, CHAIN, a[0], a[1], false);
          run_group(ip, first, last, group + 1, CHAIN, a[1], a[0], true);
        }
        if (WHOLE % 2 == 1) run_group(ip, first, last, WHOLE - 1, CHAIN, a[0], a[1], false);
        if (REST > 0) run_group(ip, first, last, WHOLE, REST, a[WHOLE % 2], a[1 - WHOLE % 2], WHOLE % 2 == 1);
        if (REAL < GROUPS1) run_group(ip, first, last, REAL, 0, a[1], a[0], true);
      };
      if constexpr (PL == 1) {
        run_plane(InputPlane{0, -1, 0}, 0, 0);
      } else if constexpr (PL == 2) {
        // Input plane z is tap z - d of output plane d, which accumulates in acc[1 - d]. Planes 0
        // and KD feed one output plane each (tap 0 of plane 0, tap KD - 1 of plane 1): one rolled
        // copy serves both, in set 0, and moves plane 0's sum to set 1 in between (the unrolled
        // code is what NVRTC's time grows with: 15 % of the tf32 reference kernel's a plane copy;
        // docs/kernels/igemm_sm90.md). Planes 1 .. KD - 1 then feed both.
#pragma unroll 1
        for (int e = 0; e < 2; ++e) {
          run_plane(InputPlane{e ? KD : 0, e ? 1 : KD, e ? KD - 1 : 0}, -1, -1);
          if (e == 0) {
            wgmma::wait<0>();
            wgmma::copy_set0_to_set1();
          }
        }
#pragma unroll 1
        for (int z = 1; z < KD; ++z) run_plane(InputPlane{z, z + 1 < KD ? z + 1 : -1, 0}, 0, 1);
      } else {
        // More planes (a forced configuration): in order, the first PL - 1 planes feeding output
        // planes 0 .. z, the last PL - 1 planes
        // z - KD + 1 .. PL - 1, those between all of them.
        auto in_order = [&](int z, int first, int last) {
          run_plane(InputPlane{z, z + 1 < PLANES ? z + 1 : -1, 0}, first, last);
        };
#pragma unroll
        for (int z = 0; z < PL - 1; ++z) in_order(z, 0, z);
#pragma unroll 1
        for (int z = PL - 1; z < KD; ++z) in_order(z, 0, PL - 1);
#pragma unroll
        for (int z = KD; z < KD + PL - 1; ++z) in_order(z, z - KD + 1, PL - 1);
      }
      if (DRAIN) {
        wgmma::wait<0>();
        settle_all();
        if (DECOUPLED) release(it);
      }
    }
    if (!DRAIN) {  // the tile's last item left its wgmmas running
      wgmma::wait<0>();
      settle_all();
    }
    // Each thread stores its accumulators (kernels without staging; plain TH x TW tiles whose
    // boxes TMA cannot store).
    auto store_from_registers = [&] {
#pragma unroll
      for (int d = 0; d < PL; ++d) {  // the tile's outputs, plane by plane
        if (o.od + d >= OD) break;     // (the last group of planes may be short)
#pragma unroll
        for (int i = 0; i < R; ++i) {
          if (!SPLIT) sum[i] = acc[PL - 1 - d][i];
          if (BLOCKED) sum[i] += total[i];
        }
        // Accumulator j * 4 + half * 2 + e: position pa (+ STEP for half 1), channel kb * BN + 8j + 2t + e.
        if constexpr (NDHWC) {
          // A position's channels are adjacent: a thread's two leave in one 8-byte store where K is
          // even and `out` aligned, and a warp's store instruction fills 8 whole 32-byte sectors.
          const bool pairs = K % 2 == 0 && reinterpret_cast<unsigned long long>(out) % (2 * sizeof(Out)) == 0;
          // Channel octet j of the position at `base`: its channels 2t and 2t + 1 hold s0 and s1.
          auto octet = [&](long long base, int j, float s0, float s1) {
            const int k = kb * BN + j * 8 + 2 * t;
            const float2 b = *reinterpret_cast<const float2*>(bias_s + j * 8 + 2 * t);
            const long long at0 = base + k;
            const float r0 = epilogue::residual<Spec, float>(at0, k < K, p);
            const float r1 = epilogue::residual<Spec, float>(at0 + 1, k + 1 < K, p);
            const float v0 = epilogue::apply_read<Spec>(s0, b.x, r0, p);
            const float v1 = epilogue::apply_read<Spec>(s1, b.y, r1, p);
            if (k < K) store_two(out + at0, v0, v1, pairs, k + 1 < K);
          };
          // The first output element of the tile's position at.
          auto position_base = [&](int2 at) {
            return (((static_cast<long long>(o.n) * OD + o.od + d) * OH + at.x) * OW + at.y) * K;
          };
          if constexpr (NDHWC_ROLLED) {
            // NDHWC_OCTETS octets a round, then the next round's accumulators shifted to the
            // front (the accumulators themselves, dead after this: a shifted copy would need
            // registers of its own): the epilogue compiles for one round, not for all NB octets.
            float* const a = acc[PL - 1 - d];
            long long base[2];  // -1: past the plane
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int2 at = position(o, pa + STEP * half);
              base[half] = at.x >= OH || at.y >= OW ? -1 : position_base(at);
            }
#pragma unroll 1
            for (int j0 = 0; j0 < NB; j0 += NDHWC_OCTETS) {
#pragma unroll
              for (int j = 0; j < NDHWC_OCTETS; ++j) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                  if (base[half] >= 0) octet(base[half], j0 + j, a[j * 4 + half * 2], a[j * 4 + half * 2 + 1]);
                }
              }
#pragma unroll
              for (int i = 0; i + 4 * NDHWC_OCTETS < R; ++i) a[i] = a[i + 4 * NDHWC_OCTETS];
            }
          } else {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int2 at = position(o, pa + STEP * half);
              if (at.x >= OH || at.y >= OW) continue;
              const long long base = position_base(at);
#pragma unroll
              for (int j = 0; j < NB; ++j) octet(base, j, sum[j * 4 + half * 2], sum[j * 4 + half * 2 + 1]);
            }
          }
          continue;
        }
        const long long out_vol = static_cast<long long>(OD) * OH * OW;
        // Channel kb * BN + 2t's output at position `at` of plane od0 + d (across: at.x of all N x OH rows).
        auto out_at = [&](int2 at) {
          const int n = ACROSS ? at.x / OH : o.n, y = ACROSS ? at.x % OH : at.x;
          return out + (static_cast<long long>(n) * K + kb * BN + 2 * t) * out_vol + ((o.od + d) * OH + y) * OW + at.y;
        };
        if (pairs_vec) {  // positions pa and pa + 1 of one channel as one 8-byte store
          const int2 at = position(o, pa);
          if (at.x >= OH || at.y >= OW) continue;  // (row tiles: past the plane's last position)
          Out* d0 = out_at(at);
#pragma unroll
          for (int j = 0; j < NB; ++j, d0 += 8 * out_vol) {
            const int k = kb * BN + j * 8 + 2 * t;
            const float2 b = *reinterpret_cast<const float2*>(bias_s + j * 8 + 2 * t);
            const long long at0 = d0 - out, at1 = at0 + out_vol;
            // The residuals first, all four in flight (epilogue.cuh).
            const float r0 = epilogue::residual<Spec, float>(at0, k < K, p);
            const float r1 = epilogue::residual<Spec, float>(at0 + 1, k < K, p);
            const float r2 = epilogue::residual<Spec, float>(at1, k + 1 < K, p);
            const float r3 = epilogue::residual<Spec, float>(at1 + 1, k + 1 < K, p);
            if (k < K) {
              store_pair(d0, epilogue::apply_read<Spec>(sum[j * 4], b.x, r0, p),
                         epilogue::apply_read<Spec>(sum[j * 4 + 2], b.x, r1, p));
            }
            if (k + 1 < K) {
              store_pair(d0 + out_vol, epilogue::apply_read<Spec>(sum[j * 4 + 1], b.y, r2, p),
                         epilogue::apply_read<Spec>(sum[j * 4 + 3], b.y, r3, p));
            }
          }
          continue;
        }
        if constexpr (RUNS16) {
          // Half outputs whose warp's 16 positions are one run in memory: stores of pairs of
          // positions that fill whole sectors (common/run_store.cuh; c3d_conv1 in bf16 took twice
          // its float32-output time with a 2-byte store a lane and position).
          const int2 at0 = position(o, pa - g);  // the warp's first position
          const int lin0 = at0.x * OW + at0.y;
          const int limit = ROW ? min(16, OH * OW - lin0) : at0.x < OH ? min(16, OW - at0.y) : 0;
#pragma unroll
          for (int j = 0; j < NB; ++j) {
            const int k = kb * BN + j * 8 + 2 * t;
            const float2 b = *reinterpret_cast<const float2*>(bias_s + j * 8 + 2 * t);
            // Element offset of position 0 of the warp's run for channel k (+ e).
            const long long base = ((static_cast<long long>(o.n) * K + k) * OD + o.od + d) * (OH * OW) + lin0;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              store_run16<Spec>(out, base + e * out_vol, limit, k + e < K, sum[j * 4 + e], sum[j * 4 + 2 + e],
                                e ? b.y : b.x, p, g, t);
            }
          }
        }
#pragma unroll
        for (int half = 0; half < (RUNS16 ? 0 : 2); ++half) {  // (RUNS16: stored above)
          const int2 at = position(o, pa + STEP * half);
          if (at.x >= tile_rows || at.y >= OW) continue;  // (row tiles: past the plane's last position)
          Out* d0 = out_at(at);
#pragma unroll
          for (int j = 0; j < NB; ++j, d0 += 8 * out_vol) {
            const int k = kb * BN + j * 8 + 2 * t;
            const float2 b = *reinterpret_cast<const float2*>(bias_s + j * 8 + 2 * t);
            const long long at = d0 - out;
            const float r0 = epilogue::residual<Spec, float>(at, k < K, p);
            const float r1 = epilogue::residual<Spec, float>(at + out_vol, k + 1 < K, p);
            if (k < K) store_float(d0, epilogue::apply_read<Spec>(sum[j * 4 + half * 2], b.x, r0, p));
            if (k + 1 < K) store_float(d0 + out_vol, epilogue::apply_read<Spec>(sum[j * 4 + half * 2 + 1], b.y, r1, p));
          }
        }
      }
    };
    // Plain TH x TW tiles stage only for TMA stores: copied out by the warps, such boxes ran slower
    // than register stores (docs/kernels/igemm_sm90.md).
    constexpr bool STAGED_IF_BULK = STAGED && ROW == 0 && epilogue::plain<Spec>;
    if (!STAGED || (STAGED_IF_BULK && !bulk)) {
      store_from_registers();
    } else if constexpr (STAGED) {
      // A warp's 16 consecutive positions leave in rounds of BOXC channels x PL planes: the warp
      // fills its staging box, and one lane stores it with TMA, which clips what lies past the
      // plane, the planes or the channels. (From registers, a store instruction wrote 64-byte
      // pieces of 4 lines, and the stores took a fifth of the tf32 reference's time: docs/kernels/igemm_sm90.md.)
      // Without the output's tensor map the warp copies its box out itself.
      constexpr int BOXC = G.store_channels, BOX = 16 * PL * BOXC, ROUNDS = BN / BOXC;
      // Worked out here from the thread index: hoisted out of the tile loop, they made ptxas spill
      // (the tf32 reference kernel with an odd box shift, at 128 registers).
      unsigned id = threadIdx.x;
      asm volatile("" : "+r"(id));
      // The warp's 16 positions: a run of the plane from `first`, position first + at an output
      // where in_run(at). Row tiles: 16 consecutive positions of the tile's run; TH x TW tiles
      // (TW a multiple of 16): 16 columns of one output row.
      int first, valid = 16;
      if constexpr (ROW > 0) {
        first = o.first + 16 * static_cast<int>(id >> 5);
      } else {
        const int2 at = position(o, 16 * static_cast<int>(id >> 5));
        first = at.x * OW + at.y;
        valid = at.x < OH ? min(16, OW - at.y) : 0;
      }
      auto in_run = [&](int at) { return ROW > 0 ? first + at < OH * OW : at < valid; };
      const bool odd = id & 1;
      float* const box = staging + (id >> 5) * BOX;
      // Half outputs with the plain epilogue fill the box in their own type; other epilogues run
      // over floats, converted afterwards (below).
      constexpr bool HALF_BOX = sizeof(Out) == 2 && epilogue::plain<Spec>;
      auto box_value = [&](int i) {
        if constexpr (HALF_BOX) {
          return to_float(reinterpret_cast<const Out*>(box)[i]);
        } else {
          return box[i];
        }
      };
      // Epilogues other than the plain one take the rounds in a rolled loop: each round's
      // epilogue and residual reads are then emitted once (a tf32 256-column row-tile kernel
      // with a residual: 4792 -> 1968 instructions, 1.0 -> 0.5 s of compile). A round's
      // accumulators are then always the first BOXC / 2 of a plane's, the rest moved down after
      // it. The plain epilogue's rounds stay unrolled, on the accumulators where they are, and so
      // do fewer than 4 rounds (2 rolled spilled 20 bytes at two-plane row tiles' 128 registers).
      constexpr bool ROLLED = !epilogue::plain<Spec> && ROUNDS >= 4;
      // Box row y = c * PL + d holds positions first .. first + 15 of channel k0 + c, plane o.od + d;
      // a lane takes every 32nd box element, in order (conflict-free, and the residual's reads are
      // 64-byte runs), in batches of 8 (the epilogue's code then compiles for 8 elements, not PER).
      constexpr int PER = BOX / 32, BATCH = PER < 8 ? PER : 8;
      static_assert(BOX % 32 == 0 && PER % BATCH == 0, "whole batches of box elements");
      // Where a thread may have more than 128 registers, a round's residuals are all read before the
      // box fills, and in flight while it does (read a batch at a time after it, a 256-column tile
      // waited out 16 memory latencies); else a batch at a time, each batch's reads before any is
      // used (even 8 ahead of the fill made two-plane row tiles at 128 registers spill 80-160 bytes).
      constexpr bool READS = !epilogue::plain<Spec> && Spec::residual != 0, AHEAD = G.threads * G.min_blocks <= 256;
      auto round = [&](int r) {
        // (k0, the round's first channel, is worked out where used: kept across the fill, it
        // made a two-plane row tile spill 8 bytes.)
        auto inside = [&](int i) {
          const int y = i / 16, k0 = kb * BN + r * BOXC;
          return in_run(i % 16) && o.od + y % PL < OD && k0 + y / PL < K;
        };
        float res[!READS ? 1 : AHEAD ? PER : BATCH];
        // The residuals of box elements b0, b0 + 32, .. b0 + 32 (BATCH - 1) to res[slot..].
        auto read_batch = [&](int b0, int slot) {
#pragma unroll
          for (int q = 0; q < BATCH; ++q) {
            const int i = b0 + 32 * q, y = i / 16;
            const long long plane = static_cast<long long>(OH) * OW;
            const int k0 = kb * BN + r * BOXC;
            const long long at = ((static_cast<long long>(o.n) * K + k0 + y / PL) * OD + o.od + y % PL) * plane + first + i % 16;
            res[slot + q] = epilogue::residual<Spec, float>(at, inside(i), p);
          }
        };
        if constexpr (READS && AHEAD) {
#pragma unroll
          for (int batch = 0; batch < PER / BATCH; ++batch) read_batch(lane + 32 * BATCH * batch, BATCH * batch);
        }
        if (lane == 0) tma::wait_store_reads<0>();  // the box's last store has read it
        __syncwarp();
#pragma unroll
        for (int jj = 0; jj < BOXC / 8; ++jj) {
          const int jb = r * BOXC / 8 + jj, j = ROLLED ? jj : jb;  // channels 8jb.., accumulators 4j..
          const float2 b = *reinterpret_cast<const float2*>(bias_s + jb * 8 + 2 * t);
          // Output y = e * PL + d (channel 8jb + 2t + e, plane d), position pa (+ STEP for half 1).
          auto value = [&](int y, int half) {
            const int e = y / PL, d = y % PL, i = j * 4 + half * 2 + e;
            // Other epilogues than the plain one run over the filled box (below): touching the
            // accumulators with more than an add here made ptxas serialise two-plane kernels' wgmmas.
            return epilogue::plain<Spec> ? acc[PL - 1 - d][i] + (e ? b.y : b.x) : acc[PL - 1 - d][i];
          };
#pragma unroll
          for (int y = 0; y < 2 * PL; ++y) {
            // Box rows are 64 bytes: a row's bank half is its parity, y's. Lanes of odd t take
            // output y ^ 1, so that a store's lanes fill both halves.
            const int at = ((8 * jj + 2 * t) * PL + (y ^ (t & 1))) * 16 + (PAIRED ? 2 * g : g);
            const float lo = odd ? value(y ^ 1, 0) : value(y, 0), hi = odd ? value(y ^ 1, 1) : value(y, 1);
            if constexpr (HALF_BOX) {
              sm90_box_store<PAIRED>(reinterpret_cast<Out*>(box) + at, lo, hi);
            } else {
              sm90_box_store<PAIRED>(box + at, lo, hi);
            }
          }
        }
        if constexpr (!epilogue::plain<Spec>) {
          __syncwarp();
#pragma unroll 1
          for (int b0 = lane; b0 < BOX; b0 += 32 * BATCH) {
            if constexpr (READS && !AHEAD) read_batch(b0, 0);
#pragma unroll
            for (int q = 0; q < BATCH; ++q) {
              const int i = b0 + 32 * q;
              if (inside(i)) box[i] = epilogue::apply_read<Spec>(box[i], bias_s[r * BOXC + i / 16 / PL], READS ? res[q] : 0.0f, p);
            }
            if constexpr (READS && AHEAD) {
#pragma unroll
              for (int q = 0; q + BATCH < PER; ++q) res[q] = res[q + BATCH];
            }
          }
          __syncwarp();
        }
        if (bulk) {
          if constexpr (sizeof(Out) == 2 && !HALF_BOX) {
            // The box's floats become the output's type in place, front to back: round q packs
            // elements 64q .. 64q + 63 (bytes 256q on) into bytes 128q on, which only round 0's
            // own reads share (a barrier between its reads and writes).
            __syncwarp();
#pragma unroll 1
            for (int i = 2 * lane; i < BOX; i += 64) {
              const float2 v = *reinterpret_cast<const float2*>(box + i);
              __syncwarp();
              reinterpret_cast<unsigned*>(box)[i / 2] = pack_pair<Out>(v.x, v.y);
            }
          }
          tma::fence_shared_to_async();
          __syncwarp();
          if (lane == 0) {
            if (first < OH * OW && kb * BN + r * BOXC < K) {  // (the last tiles' warps past the plane)
              tma::store_box(out_map, box, first, o.od, kb * BN + r * BOXC, o.n);
            }
            tma::commit_stores();
          }
        } else {
          // Box row y = c * PL + d (channel c of the round, plane d) holds 16 positions, a lane
          // takes v of them: 16 / v lanes a row, 2v rows a warp load (conflict-free), each row one
          // 64-byte run; v = 2 (8-byte stores) where every run starts 8-byte aligned. (Storing the
          // accumulators from registers here instead, a second epilogue, cost the tf32 reference
          // 0.3 s of compile.)
          __syncwarp();
          const int k0 = kb * BN + r * BOXC;
          const long long plane = static_cast<long long>(OH) * OW, channel = OD * plane;
          auto copy_out = [&](int v) {
            const int lanes = 16 / v, at = v * (lane % lanes);
            const bool inside = in_run(at);  // (v = 2: so is at + 1: OH * OW, or OW, even)
            Out* const run = out + (static_cast<long long>(o.n) * K + k0) * channel + o.od * plane + first + at;
#pragma unroll 1
            for (int j = 0; j < BOXC * PL / (2 * v); ++j) {
              const int y = 2 * v * j + lane / lanes, c = y / PL, d = y % PL;
              if (inside && o.od + d < OD && k0 + c < K) {
                Out* const dst = run + c * channel + d * plane;
                if (v == 2) {
                  store_pair(dst, box_value(y * 16 + at), box_value(y * 16 + at + 1));
                } else {
                  store_float(dst, box_value(y * 16 + at));
                }
              }
            }
          };
          if ((ROW > 0 ? plane : OW) % 2 == 0 && reinterpret_cast<unsigned long long>(out) % (2 * sizeof(Out)) == 0) {
            copy_out(2);
          } else {
            copy_out(1);
          }
        }
        if constexpr (ROLLED) {
#pragma unroll
          for (int d = 0; d < PL; ++d) {
#pragma unroll
            for (int i = 0; i + BOXC / 2 < R; ++i) acc[d][i] = acc[d][i + BOXC / 2];
          }
        }
      };
      if constexpr (ROLLED) {
#pragma unroll 1
        for (int r = 0; r < ROUNDS; ++r) round(r);
      } else {
#pragma unroll
        for (int r = 0; r < ROUNDS; ++r) round(r);
      }
    }
  }
  if (STAGED && lane == 0) tma::wait_store_reads<0>();  // shared memory outlives the stores' reads
}

// Rounds (and for 3xTF32 splits) the weights of every (channel block, chunk) of igemm_sm90 with
// the same template arguments into the layout its shared memory wants, chunk after chunk, so
// that the convolution copies each chunk as is. Arguments as the convolution's; `in` and `bias`
// unused, `out` is the workspace (k_blocks x chunks x weight_floats floats). A thread makes one
// 16-byte group of the layout (4 terms of one column), taken in storage order: a warp's stores
// are contiguous, its loads 32-byte runs of 16 weight rows (one term at a time scattered the
// stores instead: 7 us for pointwise_512's 4 MB). One block an SM at least: with the thread
// count alone ptxas held an fp16 1 x 7 x 7 chunk's indexing to 32 registers and spilled 4 bytes
// (36 registers with the bound, no spill).
template <class Spec>
__global__ void __launch_bounds__(256, 1)
igemm_sm90_weights(const typename Spec::element* __restrict__, const typename Spec::element* __restrict__ wt,
                   const typename Spec::element* __restrict__, float* __restrict__ out, ConvParams p) {
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, BN = Spec::bn, CC = Spec::cc;
  constexpr int SPLIT = sm90_split_of<Spec>();
  constexpr bool NDHWC = Spec::ndhwc != 0;
  constexpr Sm90Geometry G = sm90_geometry(CG, KD, KH, KW, 1, 1, 1, 1, 8, 8, BN, CC, 0, SPLIT, 0);
  constexpr int KVOL = KD * KH * KW, KRED = CG * KVOL, NB = BN / 8, W_ELEMS = G.slices * 8 * BN;
  constexpr int GROUPS = W_ELEMS / 4;  // per chunk: (slice, column block, k half, column % 8)
  const long long total = (p.k + BN - 1) / BN * G.chunks * GROUPS;
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < total; i += gridDim.x * 256LL) {
    const int block = static_cast<int>(i / GROUPS), q = static_cast<int>(i % GROUPS);
    const int kb = block / G.chunks, chunk = block % G.chunks;
    const int n = q / 16 % NB * 8 + q % 8, r0 = q / (16 * NB) * 8 + q / 8 % 2 * 4;  // sm90_weight_index(n, r0 + e) = 4q + e
    const long long k = static_cast<long long>(kb) * BN + n;
    float big[4], small[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = r0 + e;
      const bool ok = k < p.k && r < G.kred && chunk * CC + r / KVOL < CG;
      const float x =
          ok ? load_float(wt + k * KRED + weight_term(chunk * G.kred + r, CG, KVOL, NDHWC)) : 0.f;
      big[e] = to_tf32(x);
      small[e] = to_tf32(x - big[e]);
    }
    float* dst = out + static_cast<long long>(block) * G.weight_floats + 4 * q;
    *reinterpret_cast<float4*>(dst) = make_float4(big[0], big[1], big[2], big[3]);
    if (SPLIT) *reinterpret_cast<float4*>(dst + W_ELEMS) = make_float4(small[0], small[1], small[2], small[3]);
  }
}

}  // namespace conv3djit
