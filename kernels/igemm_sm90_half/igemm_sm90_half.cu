// Implicit-GEMM convolution of bf16 / fp16 tensors, and of float32 ones in the tf32 class, on
// Hopper's warpgroup MMA (wgmma, sm_90a), output in the input type or float32
// (Spec::out_element). The input and weight are read channels-last (NDHWC); for an NCDHW layer
// they are the channels_last copies the call makes first, and the output and residual are NCDHW
// (Spec::ndhwc 0).
//
// GEMM view: rows M = N * OD * OH * OW output positions, columns = K output channels, reduction
// in the NDHWC weight's order (kd, kh, kw, c), so that B is the weight as stored (K-major). A
// block computes BM x BN outputs with BM / 64 warpgroups of 64 x BN (one wgmma m64nBNk16 each per
// 16 terms, fp32 accumulators in registers), or with Spec::pn, BM / pn warpgroups of pn positions
// whose products take the 64 output channels as M (the weight rows as A, the positions as B).
//
// The reduction advances one chunk at a time: 64 channels of one tap (the last chunk of a tap
// zero-filled past C), 128 bytes a row of A (one output position's channels at that tap, zero
// where the tap reads padding) and of B (one output channel's weights), into a ring of
// Spec::stages stages, 128-byte swizzled as wgmma's K-major operands want them
// (common/wgmma_half.cuh). 16-bit layers of 32 channels a group take chunks of 32 (Spec::chunk):
// 64-byte rows, 64-byte swizzled, two k16 steps a chunk instead of four k16 steps of which two
// would multiply zeros. Both operands arrive as one TMA box a chunk, completing on the stage's
// mbarrier: A from the input's im2col map (the block's BM consecutive window origins, moved by the
// tap's offset; TMA walks them across rows, planes and images and fills padding with zeros), B
// from the weight's tiled map. Chunk q + stages - 2 is in flight while chunk q is multiplied and
// chunk q - 1's wgmmas may still run; a stage is refilled only after every warpgroup has waited
// for the wgmmas that read it (wait<1> before the next barrier).
//
// NCDHW layers whose window is a column along D (Spec::mmajor: KD x 1 x 1, unit strides, zero
// padding along D only; pointwise layers and the temporal convolutions of (2+1)-D networks) read A
// straight from the NCDHW input instead of a channels-last copy: a chunk is 64 channels x BM
// positions of one image at one tap, one tiled box of 64 positions x 64 channels a warpgroup,
// which is A in M-major order (64 positions of a channel in a 128-byte row, the same swizzle) for
// wgmma's transposed A; a block's positions never span two images. A tap kd reads the block's
// positions (kd * DD - pad_d) planes further on, which the box's origin moves by; positions that
// leave the image's planes arrive as zeros, the padding. With a stride along D, output plane od
// reads input plane od * SD + kd * DD - pad_d, so each box must lie in one output plane (the
// planes a whole number of boxes). NCDHW outputs leave through shared memory as 16-byte stores
// along each channel's positions.
//
// Where a map cannot serve, every thread stages that operand's 16-byte pieces instead, by
// cp.async or, off a 16-byte boundary, by ordinary loads and stores: A in kernels built without
// Spec::im2col (padding modes other than zeros, which map each tap's (d, h, w) through
// padding::source; corners or strides past TMA's ranges; the twin for unaligned inputs), B for a
// weight off a 16-byte boundary (geometry.cuh's weight_boxes, on the host and here alike).
//
// Grouped layers (Spec::groups > 1) are one such GEMM a group: a block's BN columns lie in one
// group (each group's K / groups channels in column blocks of their own; the columns of the last
// one past the group are computed and dropped), and its A rows are that group's CG channels of
// the input, from channel group * CG; boxes then need CG to be whole chunks, so that a chunk never
// reaches into the next group's channels (the threads' copies zero them).
//
// Accuracy: float32 outputs of long 16-bit reductions (geometry.cuh's blocked()) keep partial sums
// of 8 chunks (512 terms) apart and add them with a round-to-nearest FADD, as igemm_sm80 does.
//
// Float32 elements (the tf32 class): a chunk is 32 channels, the same 128 bytes a row, and four
// wgmma m64nBNk8 .tf32 a chunk. The tensor cores truncate an operand to TF32, which would cost
// about twice the class's error (rel-L2 6.9e-4 against its 5e-4 bound on random data), so both
// operands arrive rounded to nearest: boxes from maps of the TFLOAT32 type, which the TMA rounds
// as it loads them; NCDHW's channels_last copies, rounded as they are made; pieces the threads
// load into registers (a weight or input off 16 bytes), rounded there; and pieces they copy by
// cp.async (an NDHWC A without im2col boxes), rounded in shared memory by the warpgroup that
// reads them once the chunk has landed.
#pragma once
#include "common/async_copy.cuh"
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/padding.cuh"
#include "common/tf32.cuh"
#include "common/tma.cuh"
#include "common/wgmma_half.cuh"
#include "igemm_sm90_half/geometry.cuh"

namespace conv3djit {
namespace sm90_half {

/// The residual's 16 bytes at offset (16-byte aligned), zeros without a residual.
template <class Spec>
__device__ __forceinline__ uint4 read_run16(long long offset, const ConvParams& p) {
  using Out = typename Spec::out_element;
  if constexpr (Spec::residual != 0) {
    return __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const Out*>(p.residual) + offset));
  } else {
    return make_uint4(0u, 0u, 0u, 0u);
  }
}

/// 16 bytes of outputs at out + offset (16-byte aligned) from the activation's arguments
/// src[0, EPV) (epilogue::argument; EPV = 16 / sizeof(Out)) and the residual's 16 bytes rq read
/// at the same offset: the rest of the epilogue, each output rounded once.
template <class Spec>
__device__ __forceinline__ void finish_run16(typename Spec::out_element* out, long long offset, const float* src,
                                             uint4 rq, const ConvParams& p) {
  using Out = typename Spec::out_element;
  const unsigned rw[4] = {rq.x, rq.y, rq.z, rq.w};
  unsigned ow[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    if constexpr (sizeof(Out) == 2) {
      float r0, r1;
      unpack_pair<Out>(rw[w], r0, r1);
      ow[w] = pack_pair<Out>(epilogue::finish<Spec>(epilogue::activated<Spec>(src[2 * w], p), r0, p),
                             epilogue::finish<Spec>(epilogue::activated<Spec>(src[2 * w + 1], p), r1, p));
    } else {
      ow[w] = __float_as_uint(epilogue::finish<Spec>(epilogue::activated<Spec>(src[w], p), __uint_as_float(rw[w]), p));
    }
  }
  *reinterpret_cast<uint4*>(out + offset) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
}

/// The staged copy-out of 16-byte runs i = tid, tid + THREADS, .. < COUNT: where(i, offset, src)
/// says whether run i is an output and where it goes and comes from. RB runs' residuals are read
/// before any is used, then finished in a rolled loop, the reads shifted down (the epilogue's code
/// compiles once for a run, not for each); with RB = 1 each run is read, then finished.
template <class Spec, int RB, int THREADS, int COUNT, class Where>
__device__ __forceinline__ void finish_runs16(typename Spec::out_element* out, int tid, const ConvParams& p, Where where) {
  if constexpr (RB == 1) {
    for (int i = tid; i < COUNT; i += THREADS) {
      long long offset;
      const float* src;
      if (where(i, offset, src)) finish_run16<Spec>(out, offset, src, read_run16<Spec>(offset, p), p);
    }
  } else {
    for (int i0 = tid; i0 < COUNT; i0 += RB * THREADS) {
      uint4 rq[RB];
#pragma unroll
      for (int u = 0; u < RB; ++u) {
        long long offset;
        const float* src;
        rq[u] = i0 + u * THREADS < COUNT && where(i0 + u * THREADS, offset, src) ? read_run16<Spec>(offset, p)
                                                                                   : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll 1
      for (int u = 0; u < RB; ++u) {
        long long offset;
        const float* src;
        if (i0 + u * THREADS < COUNT && where(i0 + u * THREADS, offset, src)) finish_run16<Spec>(out, offset, src, rq[0], p);
#pragma unroll
        for (int q = 0; q + 1 < RB; ++q) rq[q] = rq[q + 1];
      }
    }
  }
}

// Rounds this warpgroup's 64 rows of A in a stage (8 KB at `rows`) to TF32 in place, 64 bytes a
// thread, and makes them visible to its wgmmas. to_tf32 leaves a value it has rounded as it is
// (the twin's rows arrive rounded), and padding's zeros stay zeros.
__device__ __forceinline__ void round_rows_tf32(unsigned rows, int wg_tid, int wg) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const unsigned at = rows + static_cast<unsigned>((wg_tid + 128 * u) * 16);
    unsigned v[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(at));
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = __float_as_uint(to_tf32(__uint_as_float(v[e])));
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]));
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  // The warpgroup's named barrier (immediate ids: a register id would reserve all 16).
  if (wg == 0) {
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  }
}

}  // namespace sm90_half

template <class Spec>
__global__ void __launch_bounds__(igemm_sm90_half_geometry::threads(Spec::bm, Spec::pn),
                                  CONV3DJIT_BLOCKS_AN_SM(igemm_sm90_half_geometry::blocks_an_sm(
                                      Spec::bn, Spec::cg, Spec::kd * Spec::kh * Spec::kw,
                                      sizeof(typename Spec::out_element) == 4, sizeof(typename Spec::element),
                                      Spec::im2col != 0 || Spec::mmajor != 0)))
igemm_sm90_half(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
                const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out,
                ConvParams p, const __grid_constant__ TensorMap weight_map,
                const __grid_constant__ TensorMap input_map) {
  using namespace igemm_sm90_half_geometry;
  using T = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, GROUPS = Spec::groups;
  constexpr int CIN = GROUPS * CG;  // input channels, the channels-last input's row
  constexpr int SD = Spec::sd, SH = Spec::sh, SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw;
  constexpr int BM = Spec::bm, BN = Spec::bn, STAGES = Spec::stages, MODE = Spec::pad_mode;
  constexpr int ES = sizeof(T), CHUNK = Spec::chunk, PIECE = 16 / ES;  // channels a chunk, a 16-byte piece
  constexpr int ROW = CHUNK * ES, PIECES = ROW / 16;  // bytes of a staged row, its 16-byte pieces
  // Spec::pn > 0: the output channels are the product's M (BN = 64) and a warpgroup's pn positions
  // its N, so that a k16 step reads 2 KB of weights and pn * 32 bytes of positions for 64 x pn
  // products (64 x 64 tiles read as much for a quarter of them at pn = 256).
  constexpr int PN = Spec::pn, WGP = PN > 0 ? PN : 64;  // positions a warpgroup
  constexpr bool SWAP = PN > 0;
  constexpr int THREADS = threads(BM, PN), CPT = chunks_per_tap(CG, CHUNK), KVOL = KD * KH * KW, CHUNKS = CPT * KVOL;
  constexpr int KRED = CG * KVOL, STAGE = stage_bytes(BM, BN, ROW), RING = ring_bytes(BM, BN, STAGES, ROW);
  constexpr int RPP = THREADS / PIECES;  // rows one pass of the threads stages
  // Passes over A's and B's rows (B's last one partial where 96 columns meet 64-row passes).
  constexpr int A_COPIES = BM / RPP, B_COPIES = (BN + RPP - 1) / RPP;
  constexpr int R = (SWAP ? PN : BN) / 2;  // accumulators a thread
  constexpr bool BLOCKED = blocked(CG, KVOL, sizeof(Out) == 4, ES);
  constexpr bool BF16 = kIsBf16<T>, TF32 = ES == 4;
  constexpr bool A_BOX = Spec::im2col != 0, A_MN = Spec::mmajor != 0, A_MAPPED = A_BOX || A_MN;
  static_assert(CG % PIECE == 0, "16-byte pieces of one tap's channels");
  static_assert(ROW == kRowBytes || (ROW == 64 && ES == 2 && !Spec::mmajor), "rows of 128 bytes, or 64 of 16-bit K-major operands");
  static_assert(STAGES >= 3 && STAGES <= kMaxStages, "a stage multiplied, one draining, at least one in flight");
  static_assert(RPP % 8 == 0 && BM % RPP == 0 && BN % 32 == 0, "BM of 64, 128 or 256, BN of 64, 96, 128, 192 or 256");
  static_assert(!BLOCKED || R <= 64, "blocked sums double the accumulators");
  static_assert(!SWAP || (BN == 64 && (PN == 128 || PN == 256) && BM % PN == 0 && !TF32 && !Spec::mmajor),
                "output channels as M: 64 of them, 128 or 256 K-major 16-bit positions a warpgroup");
  static_assert(!A_BOX || MODE == padding::kZeros, "im2col boxes fill padding with zeros");
  static_assert(!A_MN || (!A_BOX && KH * KW == 1 && SH * SW == 1 && Spec::ndhwc == 0 && BM % kMajorBox == 0),
                "M-major boxes: NCDHW layers of KD x 1 x 1 windows, unit strides along H and W");
  static_assert(!TF32 || !A_MN, "tf32 wgmma reads K-major operands only");
  static_assert(GROUPS == 1 || !A_MAPPED || CG % CHUNK == 0, "a group's boxes stay in its channels");

  extern __shared__ uint4 shared_half_ring[];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(shared_half_ring));
  const unsigned ring = (base + 1023u) & ~1023u;
  char* const ring_ptr = reinterpret_cast<char*>(shared_half_ring) + (ring - base);
  // One mbarrier a stage after the ring: its boxes have landed.
  auto* const full = reinterpret_cast<unsigned long long*>(ring_ptr + RING);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = tid >> 7;
  // Column blocks: BN channels of one group each. The block's first channel k0, the end of its
  // group's channels k_end (its columns from there on are dropped), and the group's first input
  // channel c_base. kg and k_end are references so that ungrouped kernels read p.k at each use as
  // they did before groups: a copy held in a register changed their machine code.
  const long long& kg = GROUPS == 1 ? p.k : p.k_per_group;
  const long long group_tiles = (kg + BN - 1) / BN, n_tiles = GROUPS * group_tiles;
  const long long out_vol = p.od * p.oh * p.ow;
  const long long m_total = p.n * out_vol;
  const long long tile = blockIdx.x % n_tiles, group = GROUPS == 1 ? 0 : tile / group_tiles;
  const long long k0 = (tile - group * group_tiles) * BN + group * kg;
  const long long group_end = (group + 1) * kg;
  const long long& k_end = GROUPS == 1 ? p.k : group_end;
  const int c_base = static_cast<int>(group) * CG;
  // The block's first row: position m0 of all N·OD·OH·OW, or with M-major boxes position s0 of
  // image img0 (then m0 is unused).
  long long m0 = (blockIdx.x / n_tiles) * BM, s0 = 0, img0 = 0;
  if constexpr (A_MN) {
    const long long per_image = (out_vol + BM - 1) / BM;
    img0 = blockIdx.x / n_tiles / per_image;
    s0 = (blockIdx.x / n_tiles % per_image) * BM;
  }
  const int D = static_cast<int>(p.d), H = static_cast<int>(p.h), W = static_cast<int>(p.w);
  // M-major boxes: where each warpgroup's box reads the input at the first tap without padding,
  // output plane od's positions in input plane od * SD. Strided along D, a box lies in one output
  // plane (H·W a multiple of a box: the host's rule).
  int box_base[A_MN ? BM / kMajorBox : 1];
  if constexpr (A_MN) {
#pragma unroll
    for (int w = 0; w < BM / kMajorBox; ++w) {
      const int s = static_cast<int>(s0) + w * kMajorBox;
      box_base[w] = SD == 1 ? s : s / (H * W) * SD * (H * W) + s % (H * W);
    }
  }

  // This thread stages piece cj (channels PIECE * cj .. of a chunk) of rows r0 + i * RPP; the
  // rows' swizzled piece is the same for all of them (RPP is a multiple of 8, the swizzles' period).
  const int cj = tid & (PIECES - 1), r0 = tid >> (PIECES == 8 ? 3 : 2);
  const int swizzled = ROW == 128 ? cj ^ (r0 & 7) : cj ^ ((r0 >> 1) & 3);
  const unsigned piece = static_cast<unsigned>(r0 * ROW + (swizzled << 4));
  const T* a_image[A_COPIES];
  int a_d[A_COPIES], a_h[A_COPIES], a_w[A_COPIES];
  bool a_ok[A_COPIES];
#pragma unroll
  for (int i = 0; i < (A_MAPPED ? 0 : A_COPIES); ++i) {
    const long long m = m0 + r0 + i * RPP;
    a_ok[i] = m < m_total;
    a_d[i] = -(1 << 28), a_h[i] = 0, a_w[i] = 0;  // past the last position: every tap fails
    a_image[i] = in;
    if (a_ok[i]) {
      long long n = m;
      const long long s = take_remainder(n, out_vol);
      a_d[i] = static_cast<int>(s / (p.oh * p.ow)) * SD - p.pad_d;
      a_h[i] = static_cast<int>(s / p.ow % p.oh) * SH - p.pad_h;
      a_w[i] = static_cast<int>(s % p.ow) * SW - p.pad_w;
      a_image[i] = in + n * (static_cast<long long>(CIN) * D * H * W) + c_base;
    }
  }
  const T* w_rows = wt + (k0 + r0) * static_cast<long long>(KRED);
  const bool a_vector = (reinterpret_cast<unsigned long long>(in) & 15) == 0;
  const bool b_box = weight_boxes(reinterpret_cast<unsigned long long>(wt));
  // The block's first window origin, from which its im2col boxes walk.
  int x0 = 0, y0 = 0, z0 = 0, n0 = 0;
  if constexpr (A_BOX) {
    long long n = m0;
    const long long s = take_remainder(n, out_vol);
    n0 = static_cast<int>(n);
    z0 = static_cast<int>(s / (p.oh * p.ow)) * SD - p.pad_d;
    y0 = static_cast<int>(s / p.ow % p.oh) * SH - p.pad_h;
    x0 = static_cast<int>(s % p.ow) * SW - p.pad_w;
  }
  if (A_MAPPED || b_box) {
    if (tid == 0) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) tma::init(full + s);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // initialised before any thread waits
  }

  // Chunk q (tap q / CPT, channels from CHUNK * (q % CPT)) into stage s.
  auto load_chunk = [&](int q, int s) {
    const int tap = q / CPT, c0 = (q - tap * CPT) * CHUNK;
    const int kd = tap / (KH * KW), kh = tap / KW % KH, kw = tap % KW;
    const int c = c0 + cj * PIECE;
    const bool c_ok = CG % CHUNK == 0 || c < CG;
    const unsigned a_stage = ring + static_cast<unsigned>(s * STAGE) + piece;
    const unsigned b_stage = a_stage + BM * ROW;
    if constexpr (!A_MAPPED) {
#pragma unroll
      for (int i = 0; i < A_COPIES; ++i) {
        const int id = a_d[i] + kd * DD, ih = a_h[i] + kh * DH, iw = a_w[i] + kw * DW;
        bool ok;
        int at;
        if constexpr (MODE == padding::kZeros) {
          ok = c_ok && static_cast<unsigned>(id) < static_cast<unsigned>(D) &&
               static_cast<unsigned>(ih) < static_cast<unsigned>(H) && static_cast<unsigned>(iw) < static_cast<unsigned>(W);
          at = ((id * H + ih) * W + iw) * CIN + c;
        } else {
          ok = c_ok && a_ok[i];
          at = ((padding::source<MODE>(id, D) * H + padding::source<MODE>(ih, H)) * W + padding::source<MODE>(iw, W)) * CIN + c;
        }
        copy16<T>(a_stage + i * RPP * ROW, ok ? a_image[i] + at : in, ok, a_vector);
      }
    }
    if (!b_box) {
#pragma unroll
      for (int i = 0; i < B_COPIES; ++i) {
        if (BN % RPP != 0 && r0 + i * RPP >= BN) break;  // past the stage's B
        const bool ok = c_ok && k0 + r0 + i * RPP < p.k;
        copy16<T>(b_stage + i * RPP * ROW, ok ? w_rows + i * RPP * KRED + tap * CG + c : wt, ok, false);
      }
    }
    if ((A_MAPPED || b_box) && tid == 0) {
      char* const stage = ring_ptr + s * STAGE;
      tma::arrive_expect(full + s, ((A_MAPPED ? BM : 0) + (b_box ? BN : 0)) * ROW);
      // A warpgroup's 64 positions x 64 channels from c0, M-major: the tap's input positions are
      // the box's base shifted by whole planes (H and W neither padded nor strided), zeros past
      // the image's planes.
      if constexpr (A_MN) {
        const int shift = (kd * DD - p.pad_d) * H * W;
#pragma unroll
        for (int w = 0; w < BM / kMajorBox; ++w) {
          tma::load_box(stage + w * kMajorBox * ROW, input_map, box_base[w] + shift, c_base + c0,
                        static_cast<int>(img0), full + s);
        }
      }
      // BM window origins from the block's first, each read at this tap: 64 channels from c0.
      if constexpr (A_BOX) {
        tma::load_im2col(stage, input_map, c_base + c0, x0, y0, z0, n0, static_cast<unsigned short>(kw * DW),
                         static_cast<unsigned short>(kh * DH), static_cast<unsigned short>(kd * DD), full + s);
      }
      // BN output channels x 64 columns from this chunk's first; columns past the tap's channels
      // meet A's zeros, rows and columns past the weight arrive as zeros.
      if (b_box) tma::load_box(stage + BM * ROW, weight_map, tap * CG + c0, static_cast<int>(k0), full + s);
    }
  };

  float acc[R], total[BLOCKED ? R : 1];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < (BLOCKED ? R : 1); ++i) total[i] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < CHUNKS) load_chunk(s, s);
    copies_commit();
  }
  // The tile's residual goes to L2 kResidualLead chunks before the reduction ends (one tile a
  // block: the copy-out's reads waited on DRAM one after another, behind the whole reduction).
  // Asked for as the block started, the lines gained nothing by the copy-out (c3d_conv3b), and
  // shorter reductions (pointwise layers) lost 1-3 %: they prefetch nothing.
  auto prefetch_residual = [&]() {
    if constexpr (Spec::residual != 0) {
      const long long left = A_MN ? out_vol - s0 : m_total - m0;
      const int valid = static_cast<int>(left < BM ? left : BM);
      const int width = static_cast<int>(k_end - k0 < BN ? k_end - k0 : BN);  // the tile's channels
      if constexpr (Spec::ndhwc != 0) {  // a row of the tile's channels a position
#pragma unroll 1
        for (int row = tid; row < valid; row += THREADS) epilogue::prefetch_residual<Spec>((m0 + row) * p.k + k0, width, p);
      } else {  // a channel's run of positions an image
#pragma unroll 1
        for (int kl = tid; kl < width; kl += THREADS) {
          long long n = A_MN ? img0 : m0;
          long long pos = A_MN ? s0 : take_remainder(n, out_vol);
#pragma unroll 1
          for (int done = 0; done < valid; ++n, pos = 0) {
            const int len = static_cast<int>(out_vol - pos < valid - done ? out_vol - pos : valid - done);
            epilogue::prefetch_residual<Spec>((n * p.k + k0 + kl) * out_vol + pos, len, p);
            done += len;
          }
        }
      }
    }
  };
#pragma unroll 1
  for (int q = 0; q < CHUNKS; ++q) {
    copies_wait<STAGES - 3>();  // this thread's pieces of chunk q are in
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to the wgmmas
    __syncthreads();  // everyone's pieces; every warpgroup is past the wgmmas of chunk q - 2
    if (q + STAGES - 2 < CHUNKS) load_chunk(q + STAGES - 2, (q + STAGES - 2) % STAGES);
    copies_commit();
    if (CHUNKS > kResidualLead && q == CHUNKS - kResidualLead) prefetch_residual();
    const unsigned a_stage = ring + static_cast<unsigned>((q % STAGES) * STAGE) + wg * WGP * ROW;
    const unsigned b_stage = ring + static_cast<unsigned>((q % STAGES) * STAGE) + BM * ROW;
    if (A_MAPPED || b_box) tma::wait(full + q % STAGES, (q / STAGES) & 1);  // chunk q's boxes
    if constexpr (TF32 && Spec::ndhwc != 0 && !A_BOX) sm90_half::round_rows_tf32(a_stage, tid & 127, wg);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < ROW / 32; ++ks) {  // k steps of 32 bytes: k16 of halves, k8 of tf32
      if constexpr (SWAP) {  // the weights as A, the warpgroup's positions as B
        wgmma::mma_half<PN, BF16>(acc, wgmma::descriptor_swizzled<ROW>(b_stage + 32 * ks),
                                  wgmma::descriptor_swizzled<ROW>(a_stage + 32 * ks), true);
      } else if constexpr (TF32) {
        wgmma::mma_tf32<BN>(acc, wgmma::descriptor_sw128(a_stage + 32 * ks), wgmma::descriptor_sw128(b_stage + 32 * ks),
                            true);
      } else {
        wgmma::mma_half<BN, BF16, A_MN>(acc, wgmma::descriptor_swizzled<ROW>(a_stage + (A_MN ? 16 * ROW : 32) * ks),
                                        wgmma::descriptor_swizzled<ROW>(b_stage + 32 * ks), true);
      }
    }
    wgmma::commit();
    wgmma::wait<1>();
    if constexpr (BLOCKED) {
      if ((q + 1) % kBlockedChunks == 0 || q + 1 == CHUNKS) {
        wgmma::wait<0>();
        wgmma::settle(acc);
#pragma unroll
        for (int i = 0; i < R; ++i) total[i] += acc[i], acc[i] = 0.f;
      }
    }
  }
  // d[4j + 2h + e]: product row 16 * (warp % 4) + g + 8h of the warpgroup's 64, column 8j + 2t + e;
  // rows are positions and columns channels, or with SWAP the other way round. channel() is the
  // block's column, position() its row of output positions, and bias_index() the thread's slot of
  // the channel's bias.
  const int g = lane >> 2, t = lane & 3;
  constexpr int JS = (SWAP ? PN : BN) / 8;
  auto channel = [&](int j, int h, int e) { return SWAP ? 16 * (warp & 3) + g + 8 * h : 8 * j + 2 * t + e; };
  auto position = [&](int j, int h, int e) { return wg * WGP + (SWAP ? 8 * j + 2 * t + e : 16 * (warp & 3) + g + 8 * h); };
  auto bias_index = [](int j, int h, int e) { return SWAP ? h : 2 * j + e; };
  // NCDHW outputs (staged in shared memory) of tiles up to 128 columns, and a thread's two
  // channels where they are M: the bias of the thread's columns is read while the last wgmmas
  // run. Where the copy-out read it, each load could wait out its own latency (pointwise layers of
  // 2-8 chunks took 1.2x longer); 64 values a thread (256 columns) spilled beside the threads'
  // copies, and 32 beside an NDHWC epilogue's (8 bytes).
  constexpr bool PLAIN = epilogue::plain<Spec>;
  constexpr bool EARLY_BIAS = (Spec::ndhwc == 0 && BN <= 128) || SWAP;
  float bias_at[EARLY_BIAS ? (SWAP ? 2 : BN / 4) : 1];
#pragma unroll
  for (int j = 0; j < (EARLY_BIAS ? (SWAP ? 1 : BN / 8) : 0); ++j) {
#pragma unroll
    for (int h = 0; h < (SWAP ? 2 : 1); ++h) {
#pragma unroll
      for (int e = 0; e < (SWAP ? 1 : 2); ++e) {
        const long long k = k0 + channel(j, h, e);
        bias_at[bias_index(j, h, e)] = p.has_bias && k < k_end ? load_float(bias + k) : 0.f;
      }
    }
  }
  wgmma::wait<0>();
  wgmma::settle(acc);

  // NCDHW outputs go through shared memory as BN channel rows of BM positions (16 bytes more a
  // row keep the columns' writes off each other's banks), the ring being free once every
  // warpgroup is past its last wgmma, and leave as 16-byte stores along each channel's positions
  // where a run of 16 bytes stays in one image and lies on 16 bytes (element by element where not):
  // from registers, 8 lanes of a warp stored 8 positions of a channel, half-filling each 32-byte
  // sector of 16-bit outputs. The plain convolution's rows hold the outputs; any other epilogue's
  // hold the float32 sums, and the epilogue runs in the copy-out, EPV outputs an iteration of a
  // rolled loop: run on the 128 sums a thread holds in registers, an activation's code was
  // unrolled 128 times (twice the machine code and 0.3 s more compile for a 128 x 256 tile). The
  // residual is read along the same runs as the stores, 16 bytes of outputs at a time, and each
  // output is rounded once, after it. NDHWC outputs with an epilogue go the same way, as BM
  // position rows of BN channels; plain NDHWC outputs leave from registers, below.
  using Staged = select_t<PLAIN, Out, float>;
  constexpr int PITCH = BM + 16 / static_cast<int>(sizeof(Staged)), EPV = 16 / static_cast<int>(sizeof(Out));
  constexpr bool STAGED_FITS = BN * PITCH * sizeof(Staged) <= RING;
  // Residuals read a batch of runs ahead in the copy-out where the tile's residual was prefetched
  // (long reductions: tiles in several waves, copy-outs apart in time, each waiting out one
  // latency a run); reductions of a few chunks read a run at a time: with every block's copy-out
  // at once they are bound by bandwidth, and reads bunched ahead of the stores cost 6-13 %.
  constexpr int RB = Spec::residual != 0 && CHUNKS > kResidualLead ? 8 : 1;
  static_assert(Spec::ndhwc != 0 || STAGED_FITS, "the staged outputs fit the ring");
  if constexpr (Spec::ndhwc == 0) {
    Staged* const staged = reinterpret_cast<Staged*>(ring_ptr);
    __syncthreads();  // every warpgroup's wgmmas are done with the ring
#pragma unroll
    for (int j = 0; j < JS; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        // Wide tiles' bias, read here once a column (SWAP's is early).
        const int column = 8 * j + 2 * t + e;
        const float late_bias = EARLY_BIAS ? 0.f : p.has_bias && k0 + column < k_end ? load_float(bias + k0 + column) : 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int kl = channel(j, h, e), row = position(j, h, e);
          const float b = EARLY_BIAS ? bias_at[bias_index(j, h, e)] : late_bias;
          float v;
          if constexpr (BLOCKED) v = total[4 * j + 2 * h + e];
          else v = acc[4 * j + 2 * h + e];
          if constexpr (PLAIN) staged[kl * PITCH + row] = from_float<Out>(v + b);
          else staged[kl * PITCH + row] = epilogue::argument<Spec>(v, b, p);
        }
      }
    }
    __syncthreads();
    const long long left = A_MN ? out_vol - s0 : m_total - m0;
    const int valid = static_cast<int>(left < BM ? left : BM);
    const Out* const residual = reinterpret_cast<const Out*>(p.residual);
    // 16-byte runs where every run stays in one image and lies on 16 bytes (OD·OH·OW a multiple
    // of a run, the output and residual aligned; valid is a multiple of a run then); else one
    // element a thread, consecutive threads on consecutive positions of a channel.
    const bool runs = (A_MN || out_vol % EPV == 0) && reinterpret_cast<unsigned long long>(out) % 16 == 0 &&
                      (Spec::residual == 0 || reinterpret_cast<unsigned long long>(residual) % 16 == 0);
    if (runs) {
      // Run i: channel kl's positions at .. at + EPV - 1.
      auto where = [&](int i, long long& offset, const Staged*& src) {
        const int kl = i / (BM / EPV), at = i % (BM / EPV) * EPV;
        if (k0 + kl >= k_end || at >= valid) return false;
        long long n = A_MN ? img0 : m0 + at;
        const long long pos = A_MN ? s0 + at : take_remainder(n, out_vol);
        offset = (n * p.k + k0 + kl) * out_vol + pos;
        src = staged + kl * PITCH + at;
        return true;
      };
      if constexpr (PLAIN) {
        for (int i = tid; i < BN * (BM / EPV); i += THREADS) {
          long long offset;
          const Staged* src;
          if (where(i, offset, src)) *reinterpret_cast<uint4*>(out + offset) = *reinterpret_cast<const uint4*>(src);
        }
      } else {
        sm90_half::finish_runs16<Spec, RB, THREADS, BN * (BM / EPV)>(out, tid, p, where);
      }
    } else {
      // The residuals of 8 channels are read before their outputs are stored: loads after a store
      // would wait for it (the residual may be the output), one DRAM round trip each.
      // A thread keeps one position through the channels it stores (THREADS / BM channels apart),
      // or where the block has fewer threads than positions, several (THREADS apart) in turn.
      static_assert(THREADS % BM == 0 || BM % THREADS == 0, "whole passes of the threads over the positions");
      constexpr int STEP = THREADS >= BM ? THREADS / BM : 1, BATCH = 8;
#pragma unroll 1
      for (int at = tid % BM; at < valid; at += THREADS >= BM ? BM : THREADS) {
        long long n = A_MN ? img0 : m0 + at;
        const long long pos = A_MN ? s0 + at : take_remainder(n, out_vol);
        const long long o0 = (n * p.k + k0) * out_vol + pos;  // channel k0
        for (int kl0 = THREADS >= BM ? tid / BM : 0; kl0 < BN; kl0 += BATCH * STEP) {
          float r[BATCH];
#pragma unroll
          for (int u = 0; u < BATCH; ++u) {
            const int kl = kl0 + u * STEP;
            r[u] = epilogue::residual<Spec, float>(o0 + kl * out_vol, kl < BN && k0 + kl < k_end, p);
          }
#pragma unroll
          for (int u = 0; u < BATCH; ++u) {
            const int kl = kl0 + u * STEP;
            if (kl >= BN || k0 + kl >= k_end) break;
            const float v = to_float(staged[kl * PITCH + at]);
            out[o0 + kl * out_vol] =
                from_float<Out>(PLAIN ? v : epilogue::finish<Spec>(epilogue::activated<Spec>(v, p), r[u], p));
          }
        }
      }
    }
    return;
  }
  if constexpr ((!PLAIN && BN >= 128) || SWAP) {
    // BM rows of the BN channels' activation arguments in float32 (8 floats more a row: a
    // half-warp's 8-byte writes of 4 rows land on distinct banks; with SWAP a thread's values are
    // one channel's positions, written one at a time); the copy-out takes EPV
    // channels of a position an iteration, a warp's 16-byte stores along one position's channels,
    // or two channels a thread where runs do not fit. From registers, a warp's store half-filled
    // 8 sectors and the epilogue was unrolled for each of a thread's 128 outputs. Tiles of 64
    // columns store from registers: staged, short reductions ran 0.87-0.96x as fast (H200), and
    // their 32 outputs a thread compile quickly.
    constexpr int NPITCH = BN + 8;
    static_assert(BM * NPITCH * sizeof(float) <= RING, "the staged sums fit the ring");
    float* const staged = reinterpret_cast<float*>(ring_ptr);
    __syncthreads();  // every warpgroup's wgmmas are done with the ring
    if constexpr (SWAP) {
#pragma unroll
      for (int j = 0; j < JS; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v;
            if constexpr (BLOCKED) v = total[4 * j + 2 * h + e];
            else v = acc[4 * j + 2 * h + e];
            staged[position(j, h, e) * NPITCH + channel(j, h, e)] =
                epilogue::argument<Spec>(v, bias_at[bias_index(j, h, e)], p);
          }
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int kl = 8 * j + 2 * t;
        const float b0 = EARLY_BIAS ? bias_at[2 * j] : p.has_bias && k0 + kl < k_end ? load_float(bias + k0 + kl) : 0.f;
        const float b1 = EARLY_BIAS ? bias_at[2 * j + 1]
                                    : p.has_bias && k0 + kl + 1 < k_end ? load_float(bias + k0 + kl + 1) : 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = wg * 64 + 16 * (warp & 3) + g + 8 * h;
          float v0, v1;
          if constexpr (BLOCKED) v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
          else v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
          *reinterpret_cast<float2*>(staged + row * NPITCH + kl) =
              make_float2(epilogue::argument<Spec>(v0, b0, p), epilogue::argument<Spec>(v1, b1, p));
        }
      }
    }
    __syncthreads();
    const int valid = static_cast<int>(m_total - m0 < BM ? m_total - m0 : BM);
    // 16-byte runs where K is a multiple of a run and the output and residual lie on 16 bytes.
    const bool runs = kg % EPV == 0 && reinterpret_cast<unsigned long long>(out) % 16 == 0 &&
                      (Spec::residual == 0 || reinterpret_cast<unsigned long long>(p.residual) % 16 == 0);
    if (runs) {
      // Run i: position row's channels kl .. kl + EPV - 1.
      sm90_half::finish_runs16<Spec, RB, THREADS, BM * (BN / EPV)>(out, tid, p,
                                              [&](int i, long long& offset, const float*& src) {
                                                const int row = i / (BN / EPV), kl = i % (BN / EPV) * EPV;
                                                if (row >= valid || k0 + kl >= k_end) return false;
                                                offset = (m0 + row) * p.k + k0 + kl;
                                                src = staged + row * NPITCH + kl;
                                                return true;
                                              });
    } else {
      const bool pairs = kg % 2 == 0 && reinterpret_cast<unsigned long long>(out) % (2 * sizeof(Out)) == 0;
#pragma unroll 1
      for (int i = tid; i < BM * (BN / 2); i += THREADS) {
        const int row = i / (BN / 2), kl = i % (BN / 2) * 2;
        if (row >= valid || k0 + kl >= k_end) continue;
        const long long at = (m0 + row) * p.k + k0 + kl;
        const bool second = k0 + kl + 1 < k_end;
        const float r0 = epilogue::residual<Spec, float>(at, true, p);
        const float r1 = epilogue::residual<Spec, float>(at + 1, second, p);
        const float* const src = staged + row * NPITCH + kl;
        store_two(out + at, epilogue::finish<Spec>(epilogue::activated<Spec>(src[0], p), r0, p),
                  epilogue::finish<Spec>(epilogue::activated<Spec>(src[1], p), r1, p), pairs, second);
      }
    }
  } else {
    // NDHWC outputs of the other tiles (plain ones, and epilogues of 64 or 96 columns): a thread's
    // two adjacent channels at a time, from registers.
    const bool pairs = kg % 2 == 0 && (reinterpret_cast<unsigned long long>(out) % (2 * sizeof(Out))) == 0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const long long k = k0 + 8 * j + 2 * t;
      const float b0 = p.has_bias && k < k_end ? load_float(bias + k) : 0.f;
      const float b1 = p.has_bias && k + 1 < k_end ? load_float(bias + k + 1) : 0.f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long m = m0 + wg * 64 + 16 * (warp & 3) + g + 8 * h;
        if (m >= m_total || k >= k_end) continue;
        float v0, v1;
        if constexpr (BLOCKED) v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
        else v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        const long long at = m * p.k + k;
        // Channels k, k + 1: paired where K is even (`at` is then) and `out` aligned to two elements.
        const float r0v = epilogue::residual<Spec, float>(at, true, p);
        const float r1v = epilogue::residual<Spec, float>(at + 1, k + 1 < k_end, p);
        store_two(out + at, epilogue::apply_read<Spec>(v0, b0, r0v, p), epilogue::apply_read<Spec>(v1, b1, r1v, p),
                  pairs, k + 1 < k_end);
      }
    }
  }
}

}  // namespace conv3djit
