// Register-blocked direct convolution, fp32 FFMA, for groups == 1.
//
// Each thread owns TW consecutive outputs along W for TK output channels (TW * TK accumulators).
// A warp covers WR output rows x (32 / WR) * TW columns of one (n, od) for its TK channels, so
// every weight a warp reads is the same for all its lanes (a shared-memory broadcast). The
// block's WK x WS warps share one input tile: WK groups of channels times WS bands of rows (small
// K gets its warps from the rows). Channels are staged CC at a time:
// the input tile (CC x KD x tile rows x tile cols, zero-filled outside the input, which is how
// padding is applied) and the weights (BK channels x CC x KD x KH x KW) live in shared memory,
// copied there with cp.async. When CC == CG the weights are loaded once per block: the grid is
// persistent, each block keeps one channel block and walks spatial tiles. With several chunks
// there are two buffers, and the next chunk's copy runs while the current one is computed.
//
// Accuracy: with several chunks, each chunk's sum is added into a separate total (blocked
// summation), so rounding error grows with the chunk length, not with C * KD * KH * KW; this is
// what keeps rel-L2 under 1e-6 for reductions of 10^4 terms and more.
//
// Only the (kw, output, channel) loops are unrolled; the (c, kd, kh) loop stays rolled so that
// NVRTC compiles a specialisation in well under a second and the kernel does not spill.
#pragma once
#include "common.cuh"
#include "async_copy.cuh"
#include "tile_geometry.cuh"

namespace conv3djit {

template <int CG, int KD, int KH, int KW, int SD, int SH, int SW, int DD, int DH, int DW,
          int WK, int WS, int WR, int CC, int TW, int V>
__global__ void __launch_bounds__(WK * WS * 32, (CG + CC - 1) / CC > 1 ? 1 : 2)  // chunked: 2 accumulator sets
direct_tiled_fp32(const float* __restrict__ in, const float* __restrict__ wt,
                  const float* __restrict__ bias, float* __restrict__ out, ConvParams p) {
  constexpr TiledGeometry G = tiled_geometry(CG, KD, KH, KW, SH, SW, DH, DW, WK, WS, WR, CC, TW);
  constexpr int TK = G.tk, BK = G.bk, CHUNKS = G.chunks;
  extern __shared__ float4 shared4[];
  float* const shared = reinterpret_cast<float*>(shared4);  // buffers of [weights | input tile]

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
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
  const long long stride = gridDim.x / k_blocks;
  const long long in_plane = p.h * p.w;
  const long long volume = p.od * p.oh * p.ow;             // one output channel
  bool weights_loaded = false;

  for (long long tile = blockIdx.x / k_blocks; tile < tiles; tile += stride) {
    long long t = tile;
    const long long tw_i = take_remainder(t, tiles_w);
    const long long th_i = take_remainder(t, tiles_h);
    const long long od = take_remainder(t, p.od);
    const long long n = t;
    const long long oh0 = th_i * G.rows;
    const long long ow0 = tw_i * G.tile_w;
    const long long id0 = od * SD - p.pad_d;
    const long long ih0 = oh0 * SH - p.pad_h;
    const long long iw0 = ow0 * SW - p.pad_w;

    // Copies a chunk's input tile (CC x KD x in_h rows, zero outside the input), a warp a row, V
    // floats a copy: 4 when the planner knows every row and tile start is 16-byte aligned (W and
    // pad_w multiples of 4; the engine takes the V = 1 twin for an input pointer that is not).
    auto stage_input = [&](float* in_s, int c0) {
      for (int r = warp; r < CC * KD * G.in_h; r += G.threads / 32) {  // (c_local * KD + kd) * in_h + ih_l
        const int ckd = r / G.in_h;
        const int c = c0 + ckd / KD;
        const long long id = id0 + ckd % KD * DD, ih = ih0 + r % G.in_h;
        const bool row_valid = c < CG && id >= 0 && id < p.d && ih >= 0 && ih < p.h;
        const float* src_row = in + ((n * p.c + c) * p.d + id) * in_plane + ih * p.w + iw0;
        for (int col = lane * V; col < G.in_w; col += 32 * V) {
          const bool valid = row_valid && iw0 + col >= 0 && iw0 + col < p.w;
          const float* src = valid ? src_row + col : in;
          copy_or_zero<4 * V>(in_s + r * G.pitch + col, src, valid);
        }
      }
    };

    // Issues the copies of one channel chunk into buffer `buf`: weights transposed to
    // [c][kd][kh][kw][k] (a warp then reads TK consecutive channels), and the input tile.
    auto issue_chunk = [&](int chunk, int buf) {
      float* w_s = shared + buf * G.buffer_floats;
      const int c0 = chunk * CC;
      if (CHUNKS > 1 || !weights_loaded) {
        for (int i = threadIdx.x; i < G.w_floats; i += G.threads) {
          const int tap = i / BK;                      // c_local * KVOL + kvol index
          const int c = c0 + tap / G.kvol;
          const long long k = k0 + i % BK;
          const bool valid = k < p.k && c < CG;
          copy_or_zero(w_s + i, valid ? wt + (k * CG + c) * G.kvol + tap % G.kvol : wt, valid);
        }
      }
      stage_input(w_s + G.w_floats, c0);
      copies_commit();
    };

    float acc[TK][TW];
    constexpr int TOTAL_K = CHUNKS > 1 ? TK : 1, TOTAL_W = CHUNKS > 1 ? TW : 1;
    float total[TOTAL_K][TOTAL_W];
#pragma unroll
    for (int k = 0; k < TK; ++k)
#pragma unroll
      for (int x = 0; x < TW; ++x) acc[k][x] = 0.f;
#pragma unroll
    for (int k = 0; k < TOTAL_K; ++k)
#pragma unroll
      for (int x = 0; x < TOTAL_W; ++x) total[k][x] = 0.f;

    __syncthreads();  // everyone is done with the previous tile's buffers
    issue_chunk(0, 0);
    weights_loaded = true;
#pragma unroll 1
    for (int chunk = 0; chunk < CHUNKS; ++chunk) {
      const int buf = chunk & 1;
      if (chunk + 1 < CHUNKS) {
        issue_chunk(chunk + 1, buf ^ 1);
        copies_wait<1>();
      } else {
        copies_wait<0>();
      }
      __syncthreads();  // this chunk's copies, from every thread, have landed

      const float* w_warp = shared + buf * G.buffer_floats + warp_k * TK;
      const float* in_s = shared + buf * G.buffer_floats + G.w_floats;
      // One step per (c, kd, kh) of the chunk, both loops rolled. The pointers advance by adds:
      // multiplies would be IMADs, which queue on the FMA pipe the FFMAs keep busy, right before
      // the step's loads (one flat loop over the steps, its kh wrap a select, ran 1 % slower).
      const float* src = in_s + row * SH * G.pitch + seg * TW * SW;
      const float* w_tap = w_warp;
#pragma unroll 1
      for (int ckd = 0; ckd < CC * KD; ++ckd) {
#pragma unroll 1
        for (int kh = 0; kh < KH; ++kh) {
          float xin[G.nx];  // 16-byte aligned: float4s, then a float2 and a float
#pragma unroll
          for (int i = 0; i + 4 <= G.nx; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(src + i);
            xin[i] = v.x, xin[i + 1] = v.y, xin[i + 2] = v.z, xin[i + 3] = v.w;
          }
          if constexpr (G.nx % 4 >= 2) {
            const float2 v = *reinterpret_cast<const float2*>(src + G.nx / 4 * 4);
            xin[G.nx / 4 * 4] = v.x, xin[G.nx / 4 * 4 + 1] = v.y;
          }
          if constexpr (G.nx % 2 == 1) xin[G.nx - 1] = src[G.nx - 1];
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
      }
      if constexpr (CHUNKS > 1) {
#pragma unroll
        for (int k = 0; k < TK; ++k)
#pragma unroll
          for (int x = 0; x < TW; ++x) {
            total[k][x] += acc[k][x];
            acc[k][x] = 0.f;
          }
        __syncthreads();  // this buffer is refilled by the next iteration's copies
      }
    }

    // Epilogue: each warp stages one channel's WR x TILE_W outputs in shared memory and writes
    // them row by row, so that consecutive lanes store consecutive addresses instead of lanes TW
    // floats apart. Store j of a lane writes staged output j * 32 + lane; its offset from the
    // warp's first output fits in 32 bits (the planner bounds WR x OW).
    // (Chunked, the stage is buffer 0's input tile: free since the chunk loop's last barrier.)
    float* stage = shared + G.stage_at + warp * WR * G.stage_pitch;
    const long long band0 = oh0 + (warp / WK) * WR;  // this warp's first output row
    float* o = out + (((n * p.k + k0 + warp_k * TK) * p.od + od) * p.oh + band0) * p.ow + ow0;
    int offset[TW];
    unsigned inside = 0;  // the stores inside the output, the same for every channel
#pragma unroll
    for (int j = 0; j < TW; ++j) {
      const int r = (j * 32 + lane) / G.tile_w, col = (j * 32 + lane) % G.tile_w;
      offset[j] = r * static_cast<int>(p.ow) + col;
      if (band0 + r < p.oh && ow0 + col < p.ow) inside |= 1u << j;
    }
#pragma unroll
    for (int k = 0; k < TK; ++k) {
#pragma unroll
      for (int x = 0; x < TW; x += 4) {
        float4 v;
        if constexpr (CHUNKS > 1) v = make_float4(total[k][x], total[k][x + 1], total[k][x + 2], total[k][x + 3]);
        else v = make_float4(acc[k][x], acc[k][x + 1], acc[k][x + 2], acc[k][x + 3]);
        *reinterpret_cast<float4*>(stage + lane_row * G.stage_pitch + seg * TW + x) = v;
      }
      __syncwarp();
      const long long kk = k0 + warp_k * TK + k;
      if (kk < p.k) {
        const float b = p.has_bias ? __ldg(bias + kk) : 0.f;
#pragma unroll
        for (int j = 0; j < TW; ++j) {
          const int idx = j * 32 + lane;
          if (inside >> j & 1) o[offset[j]] = stage[idx / G.tile_w * G.stage_pitch + idx % G.tile_w] + b;
        }
      }
      o += volume;
      __syncwarp();
    }
  }
}

}  // namespace conv3djit
