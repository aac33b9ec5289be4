// Implicit-GEMM convolution of bf16 / fp16 NCDHW tensors with few input channels on Hopper's
// warpgroup MMA (wgmma k16, sm_90a), A gathered into registers from a 16-bit tile, groups == 1.
//
// GEMM view: rows = output positions, columns = output channels, reduction = kernel rows (c, kd,
// kh) x kw slots. A k16 slice is two kernel rows of 8 kw slots (KW 5 to 8; the slots past KW carry
// zero weights), so a thread's A registers (wgmma's 16-bit fragment: terms 2t, 2t + 1 and 2t + 8,
// 2t + 9) each hold a pair of adjacent kw of one kernel row, two adjacent input columns: one
// 32-bit shared-memory load a register, 4 a slice, where igemm_sm90's TF32 gather loads 8 for the
// same products (docs/kernels/igemm_sm90_k16.md).
//
// A block is a persistent worker for one block of BN output channels (its weights, every slice,
// stay in shared memory) walking tiles of WGS x 64 consecutive positions of an (n, od) output
// plane. A tile's input, the C x KD planes x rows x RW box of its output rows' inputs (zeros as
// padding), arrives by one TMA box; the threads then copy it shifted by one element (word w =
// halves 2w + 1, 2w + 2), and each thread reads its pairs from the copy its position's column
// parity aligns. Two stages: the next tile's box loads while this tile computes.
//
// With Spec::planes > 1 (unit stride and dilation along D) a block's item is the same positions of
// `planes` consecutive output planes, and a step is one input plane d (a box of one plane): each
// A fragment gathered from it serves the KD output planes d - kd, KD wgmmas into KD accumulator
// sets, so that A's shared-memory loads, the box and its shifted copy come once an input plane
// instead of KD times. Set i holds output plane d - (KD - 1) + i; after a step set 0 is whole and
// is stored, and the sets move down one. 16-bit outputs
// of planes whose rows of channels lie on 16 bytes leave by TMA: each warpgroup transposes its 64
// positions x BN channels into shared memory (stmatrix) and one thread stores them as a box, so
// that the warpgroup goes on to the next tile at once; a residual arrives in that tile by cp.async
// while the tile computes and is read back in the accumulators' layout (ldmatrix). Other outputs
// leave from registers (common/run_store.cuh).
#pragma once
#include "common/async_copy.cuh"
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/run_store.cuh"
#include "common/tma.cuh"
#include "common/wgmma_half.cuh"
#include "igemm_sm90/geometry.cuh"
#include "igemm_sm90_k16/geometry.cuh"

namespace conv3djit {

template <class Spec>
__global__ void __launch_bounds__(Spec::wgs * 128, 1)
igemm_sm90_k16(const typename Spec::element* __restrict__ /* in: read through `map` */,
               const typename Spec::element* __restrict__ wt,
               const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out,
               ConvParams p, const __grid_constant__ TensorMap map, const __grid_constant__ TensorMap out_map) {
  namespace geo = igemm_sm90_k16_geometry;
  using In = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr bool BF16 = kIsBf16<In>;
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DH = Spec::dh, BN = Spec::bn, WGS = Spec::wgs, RW = Spec::rw, ROWS = Spec::rows;
  constexpr int THREADS = WGS * 128, TP = WGS * 64, NB = BN / 8, R = BN / 2, PLANES = Spec::planes;
  constexpr bool WALK = PLANES > 1;
  // Accumulator sets, the box's planes, the kernel rows (c, kd, kh) a step's slices cover, those
  // slices (for each set).
  constexpr int SETS = WALK ? KD : 1, BKD = geo::box_planes(KD, PLANES), KROWS = CG * BKD * KH;
  constexpr int SS = geo::slices(CG, BKD, KH, KW);
  constexpr geo::Layout L = geo::layout(CG, KD, KH, KW, BN, WGS, ROWS, RW, sizeof(Out), PLANES);
  constexpr int PP = ROWS * RW, CP = BKD * PP;  // halves between the box's planes, channels
  constexpr int TILE_WORDS = L.tile_bytes / 4, BOX_BYTES = CG * BKD * ROWS * RW * 2;
  static_assert(geo::kw_slots(KW) == 8 && KW >= 5, "kernel rows of 8 kw slots: KW 5 to 8");
  static_assert(!WALK || (SD == 1 && Spec::dd == 1), "walking planes: unit stride and dilation along D");
  static_assert(RW % 8 == 0, "box rows of 16-byte multiples");
  static_assert(BN == 64 || BN == 128, "64 or 128 output channels a block");

  extern __shared__ __align__(128) unsigned char smem[];
  unsigned short* const w_s = reinterpret_cast<unsigned short*>(smem);  // [S][NB][2][8][8]
  float* const bias_s = reinterpret_cast<float*>(smem + L.bias_at);
  unsigned long long* const bars = reinterpret_cast<unsigned long long*>(smem + L.bars_at);
  unsigned* const tiles = reinterpret_cast<unsigned*>(smem + L.tiles_at);  // [stage][box, shifted][TILE_WORDS]

  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  // 32-bit extents and tile counts: the planner keeps them below 2^31.
  const int OD = static_cast<int>(p.od), OH = static_cast<int>(p.oh), OW = static_cast<int>(p.ow);
  const int K = static_cast<int>(p.k), k_blocks = (K + BN - 1) / BN, kb = static_cast<int>(blockIdx.x % k_blocks);
  const int plane_tiles = (OH * OW + TP - 1) / TP;
  const int runs = (OD + PLANES - 1) / PLANES;  // runs of output planes an image (OD without WALK)
  const unsigned n_tiles = static_cast<unsigned>(p.n) * runs * plane_tiles;
  const unsigned step = gridDim.x / k_blocks;  // the planner makes the grid a multiple of k_blocks
  const int shift = geo::box_shift(p.pad_w);
  // Output boxes: 16-bit outputs in planes of 16-byte rows (and a residual on 16 bytes, read by
  // 16-byte copies). The host gives the output's map for every 16-bit output of such planes.
  constexpr bool BOXES = sizeof(Out) == 2;
  const bool boxed = BOXES &&
                     sm90_stores_boxed(static_cast<long long>(OH) * OW, reinterpret_cast<unsigned long long>(out), 2) &&
                     (Spec::residual == 0 || p.residual % 16 == 0);
  const int wg = tid >> 7;
  unsigned char* const out_tile =
      smem + L.out_at + ((1024u - (tma::smem_addr(smem + L.out_at) & 1023u)) & 1023u) + wg * L.out_tile_bytes;

  // The weights of channels kb * BN ..., every slice: slot (s, kk) of column n (a step's kernel
  // row 2 (s % SS) + kk / 8 at kd s / SS further, kw kk % 8) in wgmma's K-major core matrices of 8
  // columns x 8 halves.
  for (int i = tid; i < SETS * SS * BN * 16; i += THREADS) {
    const int kk = i % 16, n = i / 16 % BN, s = i / (16 * BN);
    const int row = 2 * (s % SS) + kk / 8, kw = kk % 8, k = kb * BN + n;
    const int c = row / (BKD * KH), kd = row / KH % BKD + s / SS, kh = row % KH;
    unsigned short v = 0;
    if (row < KROWS && kw < KW && k < K) {
      v = wt[((static_cast<long long>(k) * CG * KD + c * KD + kd) * KH + kh) * KW + kw].bits;
    }
    w_s[((s * NB + n / 8) * 2 + kk / 8) * 64 + (n % 8) * 8 + kk % 8] = v;
  }
  for (int i = tid; i < BN; i += THREADS) {
    const int k = kb * BN + i;
    bias_s[i] = p.has_bias && k < K ? load_float(bias + k) : 0.f;
  }
  // Tile `tile`'s image, first output plane, steps (input planes) and first position.
  auto image_of = [&](unsigned tile) { return static_cast<int>(tile / plane_tiles / runs); };
  auto od0_of = [&](unsigned tile) { return static_cast<int>(tile / plane_tiles % runs) * PLANES; };
  auto steps_of = [&](unsigned tile) { return WALK ? min(PLANES, OD - od0_of(tile)) + KD - 1 : 1; };
  auto first_of = [&](unsigned tile) { return static_cast<int>(tile % plane_tiles) * TP; };
  // Thread 0: step j of tile `tile` (its box: the KD planes of its output plane, or input plane
  // od0 + j walking) into stage `stage`.
  auto load = [&](unsigned tile, int j, int stage) {
    tma::arrive_expect(bars + stage, BOX_BYTES);
    tma::load_box(tiles + stage * 2 * TILE_WORDS, map, -p.pad_w - shift, first_of(tile) / OW * SH - p.pad_h,
                  (od0_of(tile) + j) * SD - p.pad_d, 0, image_of(tile), bars + stage);
  };
  const unsigned first_tile = blockIdx.x / k_blocks;
  if (tid == 0) {
    tma::init(bars);
    tma::init(bars + 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    if (first_tile < n_tiles) load(first_tile, 0, 0);
  }
  // The tensor cores read the weights stored above through the async proxy.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const unsigned long long w_desc = wgmma::descriptor(w_s);
  // Slot pairs past KW read real inputs against zero weights: zeroed, so that an infinity there
  // makes no NaN (pair 2t, 2t + 1: whole past KW, or its second half).
  const unsigned mask = 2 * t >= KW ? 0u : 2 * t + 1 >= KW ? 0xffffu : 0xffffffffu;
  // Word offset of a step's kernel row `row` (c, kd, kh) in the box.
  auto row_words = [](int row) {
    const int c = row / (BKD * KH), kd = row / KH % BKD, kh = row % KH;
    return (c * CP + kd * PP + kh * DH * RW) / 2;
  };

  const int q0 = (tid >> 7) * 64 + ((tid >> 5) & 3) * 16;  // the warp's first position of a tile
  // The tile's image, first output plane, steps and first position, and the words (from a stage's
  // start) of this thread's first input pairs of positions q0 + g and q0 + g + 8 (+ t: its k = 2t
  // pair), in the copy that aligns each; positions past the plane read its last one (not stored).
  int n = 0, od0 = 0, steps = 0, first = 0, lo_at = 0, hi_at = 0;
  auto start = [&](unsigned tile) {
    n = image_of(tile), od0 = od0_of(tile), steps = steps_of(tile), first = first_of(tile);
    const int oy0 = first / OW, last = OH * OW - 1;
    auto words_of = [&](int q) {
      const int pos = min(first + q, last), e = (pos / OW - oy0) * SH * RW + pos % OW * SW + shift;
      return ((e & 1) ? TILE_WORDS : 0) + e / 2 + t;
    };
    lo_at = words_of(q0 + g);
    hi_at = words_of(q0 + g + 8);
  };
  // The finished sums of output plane od of the tile, acc[4j + 2h + e]: position q0 + g + 8h,
  // channel kb * BN + 8j + 2t + e.
  auto store_plane = [&](float (&acc)[R], int od) {
    const int lin0 = first + q0, limit = min(16, OH * OW - lin0);
    const long long out_vol = static_cast<long long>(OD) * OH * OW;
    if constexpr (BOXES) {
      if (boxed) {
        // 8 x 8 blocks (j, h): positions g + 8h x channels 8j + ..., a thread's pair of channels a
        // register; stmatrix .trans writes each block's channels as rows of 8 positions (16 bytes)
        // into the warpgroup's tile: row = channel (128 bytes), 16-byte chunk = the position's
        // eighth, swizzled by the channel's row in its group of 8, as the box's 128-byte swizzle
        // reads. ldmatrix .trans from the same addresses gives the residual there in the same
        // registers' layout.
        if constexpr (Spec::residual != 0) {
          copies_wait<0>();
          asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory");  // every copy of the tile is in
        }
        const int m = lane >> 3, row = lane & 7;  // the block and its row this lane addresses
        const int chunk = ((tid >> 5) & 3) * 2 + (m & 1);
#pragma unroll
        for (int jj = 0; jj < NB / 2; ++jj) {
          const int c = 8 * (2 * jj + (m >> 1)) + row;
          const unsigned addr = tma::smem_addr(out_tile + c * 128 + ((chunk ^ row) << 4));
          unsigned res[4] = {0u, 0u, 0u, 0u}, packed[4];
          if constexpr (Spec::residual != 0) {
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(res[0]), "=r"(res[1]), "=r"(res[2]), "=r"(res[3])
                         : "r"(addr)
                         : "memory");
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int j = 2 * jj + i / 2, h = i % 2, c = 8 * j + 2 * t;
            float r0, r1;
            unpack_pair<Out>(res[i], r0, r1);
            packed[i] = pack_pair<Out>(epilogue::apply_read<Spec>(acc[4 * j + 2 * h], bias_s[c], r0, p),
                                       epilogue::apply_read<Spec>(acc[4 * j + 2 * h + 1], bias_s[c + 1], r1, p));
          }
          asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                       "r"(packed[0]), "r"(packed[1]), "r"(packed[2]), "r"(packed[3])
                       : "memory");
        }
        tma::fence_shared_to_async();
        asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory");  // the warpgroup's tile is whole
        if ((tid & 127) == 0) {
          tma::store_box(out_map, out_tile, first + wg * 64, od, kb * BN, n);
          tma::commit_stores();
        }
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int k = kb * BN + 8 * j + 2 * t;
      const long long base = ((static_cast<long long>(n) * K + k) * OD + od) * (OH * OW) + lin0;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        store_run16<Spec>(out, base + e * out_vol, limit, k + e < K, acc[4 * j + e], acc[4 * j + 2 + e],
                          bias_s[8 * j + 2 * t + e], p, g, t);
      }
    }
  };

  float acc[SETS][R];
  unsigned tile = first_tile;
  if (tile < n_tiles) start(tile);
  int it = 0, j = 0;  // steps of the block, and of the tile
#pragma unroll 1
  for (; tile < n_tiles; ++it) {
    const int stage = it & 1;
    tma::wait(bars + stage, (it >> 1) & 1);
    const unsigned* const box = tiles + stage * 2 * TILE_WORDS;
    unsigned* const shifted = tiles + (stage * 2 + 1) * TILE_WORDS;
    for (int w = tid; w < TILE_WORDS - 1; w += THREADS) shifted[w] = __funnelshift_r(box[w], box[w + 1], 16);
    // The warpgroup's last output box has left its tile in shared memory before anyone writes it.
    if (boxed && (tid & 127) == 0) tma::wait_store_reads<0>();
    // The shifted copy is whole, and every thread is done with the other stage (the last step's):
    // the next step's box may load.
    __syncthreads();
    const bool last_step = j + 1 == steps;
    if (tid == 0) {
      if (!last_step) {
        load(tile, j + 1, stage ^ 1);
      } else if (tile + step < n_tiles) {
        load(tile + step, 0, stage ^ 1);
      }
    }
    // The output plane this step finishes (set 0's); walking, the first KD - 1 steps finish none.
    const int od = od0 + j - (SETS - 1);
    const bool finishes = j >= SETS - 1;
    if constexpr (BOXES && Spec::residual != 0) {
      // The warpgroup's residual, 16 bytes (8 positions of a channel) a copy, into its output tile
      // where the box store reads them (the last box has left it: the barrier above). Chunks past
      // the plane or past K are not read: their outputs are outside the box.
      if (boxed && finishes) {
        const Out* const res = reinterpret_cast<const Out*>(p.residual);
        const int pos0 = first + wg * 64;
#pragma unroll
        for (int i = tid & 127; i < BN * 8; i += 128) {
          const int c = i / 8, chunk = i % 8, k = kb * BN + c, pos = pos0 + chunk * 8;
          const bool inside = k < K && pos < OH * OW;
          const long long at = ((static_cast<long long>(n) * K + k) * OD + od) * (OH * OW) + pos;
          copy_or_zero<16>(reinterpret_cast<float*>(out_tile + c * 128 + ((chunk ^ (c & 7)) << 4)),
                           reinterpret_cast<const float*>(inside ? res + at : res), inside);
        }
        copies_commit();
      }
    }
    const unsigned* const lo = box + lo_at;
    const unsigned* const hi = box + hi_at;
    // Slice s: the step's kernel rows 2s and 2s + 1 (an odd count of rows leaves the last slice's
    // second empty: zero weights and zero A).
    auto gather = [&](int s, unsigned (&a)[4]) {
      const int r0 = 2 * s, r1 = 2 * s + 1;
      a[0] = lo[row_words(r0)] & mask;
      a[1] = hi[row_words(r0)] & mask;
      a[2] = r1 < KROWS ? lo[row_words(r1)] & mask : 0u;
      a[3] = r1 < KROWS ? hi[row_words(r1)] & mask : 0u;
    };
    unsigned a[2][4];
    gather(0, a[0]);
#pragma unroll
    for (int s = 0; s < SS; ++s) {
      wgmma::fence();
#pragma unroll
      for (int u = 0; u < SETS; ++u) {
        // kd = u: output plane od0 + j - u, set SETS - 1 - u, which kd = 0 starts. Walking, the
        // sets of planes before the run and past it take products too, never stored: a branch
        // around a wgmma makes ptxas fence the accumulators at each.
        wgmma::mma_half_regs<BN, BF16>(acc[SETS - 1 - u], a[s & 1],
                                       w_desc + static_cast<unsigned long long>((u * SS + s) * NB * 256 / 16),
                                       s > 0 || u > 0);
      }
      wgmma::commit();
      if (s + 1 < SS) {
        wgmma::wait<1>();  // slice s - 1 is done with the registers slice s + 1 fills
        gather(s + 1, a[(s + 1) & 1]);
      }
    }
    wgmma::wait<0>();
#pragma unroll
    for (int u = 0; u < SETS; ++u) wgmma::settle(acc[u]);
    if (finishes) store_plane(acc[0], od);
    if constexpr (WALK) {
#pragma unroll
      for (int u = 0; u + 1 < SETS; ++u) {
#pragma unroll
        for (int i = 0; i < R; ++i) acc[u][i] = acc[u + 1][i];
      }
    }
    if (last_step) {
      tile += step;
      j = 0;
      if (tile < n_tiles) start(tile);
    } else {
      ++j;
    }
  }
  // Shared memory outlives the block's last output box only until the block exits.
  if (boxed && (tid & 127) == 0) tma::wait_store_reads<0>();
}

}  // namespace conv3djit
