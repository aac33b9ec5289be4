// Register-blocked direct convolution, fp32 FFMA, NCDHW; grouped layers too where a block's channels
// lie in one group (BK divides K / groups). bf16 / fp16 tensors are converted to float as they are
// staged (plain loads then, not cp.async), and outputs rounded once, after the epilogue.
//
// Each thread owns TW consecutive outputs along W for TK output channels (TW * TK accumulators).
// A warp covers WR output rows x (32 / WR) * TW columns of one (n, od) for its TK channels, so
// every weight a warp reads is the same for all its lanes (a shared-memory broadcast). The
// block's WK x WS warps share one input tile: WK groups of channels times WS bands of rows (small
// K gets its warps from the rows). Channels are staged CC at a time:
// the input tile (CC x KD x tile rows x tile cols, zero-filled outside the input, which is how
// padding is applied) and the weights (BK channels x CC x KD x KH x KW) live in shared memory,
// copied there with cp.async. When CC == CG the weights are loaded once per block: the grid is
// persistent, each block keeps one channel block and walks spatial tiles, and P teams of WK x WS
// warps share that one copy of the weights, each team walking its own tiles with two input
// buffers (the next tile's copy runs while this one is computed; a team waits only on its own
// named barrier). With several chunks there are two buffers of weights and input, and the next
// chunk's copy runs while the current one is computed.
//
// Accuracy: with several chunks, the sum of each run of channels (about 128 terms, and at most a
// chunk) is added into a separate total (blocked summation), so rounding error grows with that
// run's length, not with C * KD * KH * KW; this is what keeps rel-L2 under 1e-6 for reductions
// of 10^4 terms and more, also behind a saturating activation.
//
// Only the (kw, output, channel) loops are unrolled; the (c, kd, kh) loop stays rolled so that
// NVRTC compiles a specialisation in well under a second and the kernel does not spill.
#pragma once
#include "common/epilogue.cuh"
#include "common/padding.cuh"
#include "common/async_copy.cuh"
#include "direct_tiled/geometry.cuh"

namespace conv3djit {

// V floats (float elements: 4 V bytes by cp.async) or one half element, converted, from global
// to shared memory; zero where !valid (src is then not read, `any` is a valid address).
template <int V, class T>
__device__ __forceinline__ void stage_floats(float* dst, const T* src, const T* any, bool valid) {
  static_assert(sizeof(T) == 4 || V == 1, "half elements are staged one at a time");
  if constexpr (sizeof(T) == 4) {
    copy_or_zero<4 * V>(dst, valid ? src : any, valid);
  } else {
    *dst = valid ? load_float(src) : 0.f;
  }
}

// Chunked reductions hold 2 accumulator sets: one block an SM.
template <class Spec>
__global__ void __launch_bounds__(Spec::p * Spec::wk * Spec::ws * 32,
                                  (Spec::cg + Spec::cc - 1) / Spec::cc > 1 ? 1 : 2 / Spec::p)
direct_tiled(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
             const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out,
             ConvParams p) {
  using In = typename Spec::element;
  using Out = typename Spec::out_element;
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, WK = Spec::wk, WS = Spec::ws;
  constexpr int WR = Spec::wr, CC = Spec::cc, TW = Spec::tw, V = Spec::v, P = Spec::p;
  constexpr TiledGeometry G = tiled_geometry(CG, KD, KH, KW, SH, SW, DH, DW, WK, WS, WR, CC, TW, P);
  constexpr int TK = G.tk, BK = G.bk, CHUNKS = G.chunks, NX = G.nx;
  static_assert(CHUNKS == 1 || P == 1, "teams share resident weights only");
  extern __shared__ float4 shared4[];
  float* const shared = reinterpret_cast<float*>(shared4);

  const int team = threadIdx.x / G.threads;                // 0 when P == 1
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x % G.threads >> 5;           // within the team
  const int warp_k = warp % WK;                            // channel group of this warp
  const int lane_row = tiled_lane_row(lane, G.segs);       // output row within the warp's rows
  const int row = (warp / WK) * WR + lane_row;             // output row within the tile
  const int seg = tiled_lane_seg(lane, G.segs);            // W segment within the row

  const long long k_blocks = (p.k + BK - 1) / BK;
  const long long tiles_h = (p.oh + G.rows - 1) / G.rows;
  const long long tiles_w = (p.ow + G.tile_w - 1) / G.tile_w;
  const long long tiles = p.n * p.od * tiles_h * tiles_w;
  const long long kb = blockIdx.x % k_blocks;
  const long long k0 = kb * BK;
  // The block's group (its BK channels lie in one) and that group's first input channel.
  const long long c_first = k0 / p.k_per_group * CG;
  // Team-major: the last, partial round of tiles goes to one team per block first, so an SM ends
  // with one busy team rather than some SMs with two and others idle.
  const long long blocks_k = gridDim.x / k_blocks;           // blocks sharing one channel block
  const long long stride = blocks_k * P;                     // tiles between a team's consecutive ones
  const long long first = team * blocks_k + blockIdx.x / k_blocks;
  const long long in_plane = p.h * p.w;
  const long long volume = p.od * p.oh * p.ow;             // one output channel
  const int in_d = static_cast<int>(p.d), in_h = static_cast<int>(p.h), in_w = static_cast<int>(p.w);

  struct Origin {
    long long n;
    int od, oh0, ow0, id0, ih0, iw0;
  };
  auto origin_of = [&](long long t) {
    Origin o;
    const long long tw_i = take_remainder(t, tiles_w);
    const long long th_i = take_remainder(t, tiles_h);
    o.od = static_cast<int>(take_remainder(t, p.od));
    o.n = t;
    o.oh0 = static_cast<int>(th_i) * G.rows;
    o.ow0 = static_cast<int>(tw_i) * G.tile_w;
    o.id0 = o.od * SD - p.pad_d;
    o.ih0 = o.oh0 * SH - p.pad_h;
    o.iw0 = o.ow0 * SW - p.pad_w;
    return o;
  };

  // Copies a chunk's input tile (CC x KD x in_h rows of in_w floats, zero outside the input), V
  // floats a copy: 4 when the planner knows every row and tile start is 16-byte aligned (W and
  // pad_w multiples of 4; the engine takes the V = 1 twin for an input pointer that is not).
  // L threads a row (L = the row's copies, at most 32), so short rows keep every lane busy; the
  // row's index math is 32-bit and done once a row.
  // Other padding modes than zeros map each position (common/padding.cuh), element by element.
  constexpr int MODE = Spec::pad_mode;
  static_assert(MODE == padding::kZeros || V == 1, "direct_tiled: padding modes copy one float at a time");
  auto stage_input = [&](float* in_s, int c0, const Origin& o) {
    constexpr int GROUPS = (G.in_w + V - 1) / V, L = GROUPS < 32 ? GROUPS : 32;
    constexpr int ROWS = CC * KD * G.in_h, SLOTS = G.threads / L;
    const int t = threadIdx.x % G.threads;
    if (t >= SLOTS * L) return;
    const In* sample = in + (o.n * p.c + c_first) * p.d * in_plane;
    for (int r = t / L; r < ROWS; r += SLOTS) {  // r = (c_local * KD + kd) * in_h + ih_l
      const int ckd = r / G.in_h, c = c0 + ckd / KD;
      const int id = padding::source<MODE>(o.id0 + ckd % KD * DD, in_d);
      const int ih = padding::source<MODE>(o.ih0 + r % G.in_h, in_h);
      const bool row_valid = c < CG && id >= 0 && ih >= 0;
      const In* src_row = sample + (static_cast<long long>(c) * in_d + id) * in_plane + ih * p.w;
      for (int col = t % L * V; col < G.in_w; col += L * V) {
        const int iw = padding::source<MODE>(o.iw0 + col, in_w);  // (V = 4: so are the next 3)
        const bool valid = row_valid && iw >= 0;
        stage_floats<V>(in_s + r * G.pitch + col, src_row + iw, in, valid);
      }
    }
  };

  // Copies a chunk's weights transposed to [c][kd][kh][kw][k] (a warp then reads TK consecutive
  // channels), every thread of the block.
  auto stage_weights = [&](float* w_s, int c0) {
    for (int i = threadIdx.x; i < G.w_floats; i += G.block_threads) {
      const int tap = i / BK;                      // c_local * KVOL + kvol index
      const int c = c0 + tap / G.kvol;
      const long long k = k0 + i % BK;
      const bool valid = k < p.k && c < CG;
      stage_floats<1>(w_s + i, wt + (k * CG + c) * G.kvol + tap % G.kvol, wt, valid);
    }
  };

  // One step per (c, kd, kh) of a chunk, both loops rolled. The pointers advance by adds:
  // multiplies would be IMADs, which queue on the FMA pipe the FFMAs keep busy, right before the
  // step's loads (one flat loop over the steps, its kh wrap a select, ran 1 % slower).
  // Chunked reductions add acc into total every FLUSH channels (chains of about 128 terms) and at
  // each chunk's end: rounding error then grows with about the square root of the reduction, which
  // a saturating activation (tanh, sigmoid, clamp) does not hide: it shrinks the outputs, not the
  // sums' errors (a 96-channel group of 3 x 5 x 7 with tanh: rel-L2 1.2e-6 in chunks of 4
  // channels, 7.5e-7 in chains of one channel).
  constexpr int FLUSH = CHUNKS > 1 && G.kvol < 128 ? 128 / G.kvol : 1;
  float acc[TK][TW], total[TK][TW];
  auto add_into_total = [&] {
#pragma unroll
    for (int k = 0; k < TK; ++k)
#pragma unroll
      for (int x = 0; x < TW; ++x) {
        total[k][x] += acc[k][x];
        acc[k][x] = 0.f;
      }
  };
  auto accumulate = [&](const float* w_s, const float* in_s) {
    const float* src = in_s + row * SH * G.pitch + seg * TW * SW;
    const float* w_tap = w_s + warp_k * TK;
#pragma unroll 1
    for (int ckd = 0; ckd < CC * KD; ++ckd) {
#pragma unroll 1
      for (int kh = 0; kh < KH; ++kh) {
        float xin[NX];  // 16-byte aligned: float4s, then a float2 and a float
#pragma unroll
        for (int i = 0; i + 4 <= NX; i += 4) {
          const float4 v = *reinterpret_cast<const float4*>(src + i);
          xin[i] = v.x, xin[i + 1] = v.y, xin[i + 2] = v.z, xin[i + 3] = v.w;
        }
        if constexpr (NX % 4 >= 2) {
          const float2 v = *reinterpret_cast<const float2*>(src + NX / 4 * 4);
          xin[NX / 4 * 4] = v.x, xin[NX / 4 * 4 + 1] = v.y;
        }
        if constexpr (NX % 2 == 1) xin[NX - 1] = src[NX - 1];
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
          const float4 wa = *reinterpret_cast<const float4*>(w_tap + kw * BK);
          const float4 wb = *reinterpret_cast<const float4*>(w_tap + kw * BK + 4);
          const float wv[TK] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
          for (int k = 0; k < TK; ++k)
#pragma unroll
            for (int x = 0; x < TW; ++x) acc[k][x] = fmaf(wv[k], xin[x * SW + kw * DW], acc[k][x]);
        }
        w_tap += KW * BK;
        src += DH * G.pitch;
      }
      src += (G.in_h - KH * DH) * G.pitch;  // the next (c, kd) plane of the tile
      if constexpr (CHUNKS > 1 && FLUSH < CC) {
        if ((ckd + 1) % (FLUSH * KD) == 0) add_into_total();
      }
    }
  };

  // Epilogue: each warp stages one channel's WR x TILE_W outputs in shared memory and writes
  // them row by row, so that consecutive lanes store consecutive addresses instead of lanes TW
  // floats apart. Store j of a lane writes staged output j * 32 + lane; its offset from the
  // warp's first output fits in 32 bits (the planner bounds WR x OW).
  struct Destination {
    Out* o;           // the warp's first output of its first channel
    unsigned inside;  // bit j: store j is inside the output (the same for every channel)
  };
  auto destination = [&](const Origin& t) {
    const long long band0 = t.oh0 + (warp / WK) * WR;  // this warp's first output row
    Destination d{out + (((t.n * p.k + k0 + warp_k * TK) * p.od + t.od) * p.oh + band0) * p.ow + t.ow0, 0u};
#pragma unroll
    for (int j = 0; j < TW; ++j) {
      const int r = (j * 32 + lane) / G.tile_w, col = (j * 32 + lane) % G.tile_w;
      if (band0 + r < p.oh && t.ow0 + col < p.ow) d.inside |= 1u << j;
    }
    return d;
  };
  auto store_tile = [&](const Destination& d, const float (&v)[TK][TW]) {
    float* stage = shared + G.stage_at + (threadIdx.x >> 5) * WR * G.stage_pitch;
    Out* o = d.o;
    int offset[TW];
#pragma unroll
    for (int j = 0; j < TW; ++j) {
      offset[j] = (j * 32 + lane) / G.tile_w * static_cast<int>(p.ow) + (j * 32 + lane) % G.tile_w;
    }
#pragma unroll
    for (int k = 0; k < TK; ++k) {
#pragma unroll
      for (int x = 0; x < TW; x += 4) {
        *reinterpret_cast<float4*>(stage + lane_row * G.stage_pitch + seg * TW + x) =
            make_float4(v[k][x], v[k][x + 1], v[k][x + 2], v[k][x + 3]);
      }
      __syncwarp();
      const long long kk = k0 + warp_k * TK + k;
      if (kk < p.k) {
        const float b = p.has_bias ? load_float(bias + kk) : 0.f;
#pragma unroll
        for (int j = 0; j < TW; ++j) {
          const int idx = j * 32 + lane;
          if (d.inside >> j & 1) {
            o[offset[j]] = from_float<Out>(epilogue::apply<Spec>(
                stage[idx / G.tile_w * G.stage_pitch + idx % G.tile_w], b, o + offset[j] - out, p));
          }
        }
      }
      o += volume;
      __syncwarp();
    }
  };

  auto clear = [](float (&a)[TK][TW]) {
#pragma unroll
    for (int k = 0; k < TK; ++k)
#pragma unroll
      for (int x = 0; x < TW; ++x) a[k][x] = 0.f;
  };

  if constexpr (CHUNKS == 1) {
    // Resident weights, loaded by the whole block with each team's first tile; then each team
    // copies its next tile into its other input buffer while it computes this one. The staging
    // space is per warp, so a warp's epilogue waits for nobody.
    auto input_buffer = [&](int buf) { return shared + G.in_at + (team * 2 + buf) * G.in_stride; };
    stage_weights(shared, 0);
    Destination dst{};  // of the tile whose input is in buffer `buf`
    if (first < tiles) {
      const Origin o = origin_of(first);
      stage_input(input_buffer(0), 0, o);
      dst = destination(o);
    }
    copies_commit();
    copies_wait<0>();
    __syncthreads();  // the weights, from every thread of every team
    int buf = 0;
    for (long long tile = first; tile < tiles; tile += stride, buf ^= 1) {
      copies_wait<0>();
      // This tile's input has landed for the whole team, and the team is done with the other
      // buffer (the previous tile), which the next copy overwrites.
      if constexpr (P == 1) __syncthreads();
      else if (team == 0) asm volatile("bar.sync 1, %0;" ::"n"(G.threads) : "memory");  // ids as immediates:
      else asm volatile("bar.sync 2, %0;" ::"n"(G.threads) : "memory");  // a register id reserves all 16
      const Destination this_dst = dst;
      if (tile + stride < tiles) {
        const Origin o = origin_of(tile + stride);
        stage_input(input_buffer(buf ^ 1), 0, o);
        dst = destination(o);
      }
      copies_commit();
      clear(acc);
      accumulate(shared, input_buffer(buf));
      store_tile(this_dst, acc);
    }
  } else {
    // Chunked: each chunk's sum goes into `total` (blocked summation); chunk c + 1's weights and
    // input are copied into the other buffer while chunk c is computed.
    auto issue_chunk = [&](int chunk, int buf, const Origin& o) {
      float* w_s = shared + buf * G.buffer_floats;
      stage_weights(w_s, chunk * CC);
      stage_input(w_s + G.w_floats, chunk * CC, o);
      copies_commit();
    };
    for (long long tile = first; tile < tiles; tile += stride) {
      const Origin o = origin_of(tile);
      clear(acc);
      clear(total);
      __syncthreads();  // everyone is done with the previous tile's buffers
      issue_chunk(0, 0, o);
#pragma unroll 1
      for (int chunk = 0; chunk < CHUNKS; ++chunk) {
        const int buf = chunk & 1;
        if (chunk + 1 < CHUNKS) {
          issue_chunk(chunk + 1, buf ^ 1, o);
          copies_wait<1>();
        } else {
          copies_wait<0>();
        }
        __syncthreads();  // this chunk's copies, from every thread, have landed
        accumulate(shared + buf * G.buffer_floats, shared + buf * G.buffer_floats + G.w_floats);
        add_into_total();
        __syncthreads();  // this buffer is refilled by the next iteration's copies
      }
      // The stage is buffer 0's input tile: free since the chunk loop's last barrier.
      store_tile(destination(o), total);
    }
  }
}

}  // namespace conv3djit
