// Depthwise convolution (one input channel per output channel) with unit stride along D and W,
// fp32 FFMA. It has a few dozen multiply-adds per output, so it is a copy from DRAM to DRAM with
// arithmetic on the way; this kernel keeps the way short. Each input element is loaded once from
// DRAM into registers (16-byte loads, halo rows from L1) and used for every output that reads it:
// along W through shuffles from the neighbouring lanes, along H by the thread's TH rows, along D
// because a thread walks its run of output planes one input plane at a time and adds each plane
// into the SPAN output planes that read it (a ring of accumulator sets, indexed at compile time
// by unrolling the walk). The next plane's loads are in flight while one is computed. No shared
// memory and no barriers: a block is only a launch unit of independent warps. V = 4: 16-byte
// loads (the planner's choice where W % 4 == 0; the engine takes the V = 1 twin, element by
// element, for an input that is not 16-byte aligned).
// See DepthwiseGeometry (depthwise/geometry.cuh) for the lane layout.
#pragma once
#include "common/epilogue.cuh"
#include "common/padding.cuh"
#include "depthwise/geometry.cuh"

namespace conv3djit {

// Component e of a float4; e is a compile-time constant once the callers' loops are unrolled.
__device__ __forceinline__ float component(const float4& v, int e) {
  return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

template <class Spec>
__global__ void __launch_bounds__(Spec::warps * 32, depthwise_geometry_of<Spec>().min_blocks)
depthwise(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
          const typename Spec::element* __restrict__ bias, typename Spec::element* __restrict__ out, ConvParams p) {
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, TH = Spec::th, L = Spec::lanes;
  constexpr int WARPS = Spec::warps, ODB = Spec::odb, S = Spec::shift, V = Spec::v;
  static_assert(CG == 1 && SD == 1 && SW == 1, "depthwise: one channel per group, unit stride in D and W");
  static_assert(V == 4 || V == 1, "depthwise: 16-byte or 4-byte input loads");
  constexpr DepthwiseGeometry G = depthwise_geometry(KD, KH, KW, SH, DD, DH, DW, TH, L, WARPS, S);
  static_assert(G.stores >= 1 && L <= 32, "depthwise: a row group needs a storing lane");

  // The planner keeps every extent below 2^31. Block order: W tiles, H tiles, plane runs,
  // channels, images.
  const int D = static_cast<int>(p.d), H = static_cast<int>(p.h), W = static_cast<int>(p.w);
  const int OD = static_cast<int>(p.od), OH = static_cast<int>(p.oh), OW = static_cast<int>(p.ow);
  int b = static_cast<int>(blockIdx.x);
  const int tiles_w = (OW + G.bw - 1) / G.bw, tiles_h = (OH + G.bh - 1) / G.bh, runs = (OD + ODB - 1) / ODB;
  const int c0 = b % tiles_w * G.bw; b /= tiles_w;
  const int oh0 = b % tiles_h * G.bh; b /= tiles_h;
  const int od0 = b % runs * ODB;   b /= runs;
  const long long k = b % p.k, n = b / p.k;
  const long long g = k / p.k_per_group;  // the input channel

  const int lane = static_cast<int>(threadIdx.x % 32), group = lane / L, s = lane % L;
  // Lanes past the last whole row group (32 % L of them) compute like one more group but never store.
  const int oh_first = oh0 + (static_cast<int>(threadIdx.x / 32) * G.groups + group) * TH;
  const int ih_first = oh_first * SH - p.pad_h;
  // This lane's float4 of every input row; with S = -pad_w mod 4 it is 16-byte aligned.
  const int col = c0 - S - p.pad_w + 4 * s;

  float w[G.kvol];
#pragma unroll
  for (int i = 0; i < G.kvol; ++i) w[i] = __ldg(wt + k * G.kvol + i);
  const float bk = p.has_bias ? __ldg(bias + k) : 0.f;

  const int id0 = od0 - p.pad_d;
  const int steps = min(ODB, OD - od0);
  const int inputs = steps + G.span - 1;  // input planes of this run
  const long long plane_floats = static_cast<long long>(H) * W;
  // Row r of input plane id starts at base + id * plane_floats + r * W; which rows (and, for the
  // element path, which of the 4 columns) lie inside the input is fixed per thread.
  const float* base = in + (n * p.c + g) * (D * plane_floats) + static_cast<long long>(ih_first) * W + col;
  unsigned rows_in = 0, cols_in = 0;
#pragma unroll
  for (int r = 0; r < G.rows; ++r) rows_in |= (ih_first + r >= 0 && ih_first + r < H ? 1u : 0u) << r;
#pragma unroll
  for (int j = 0; j < 4; ++j) cols_in |= (col + j >= 0 && col + j < W ? 1u : 0u) << j;

  // Other padding modes than zeros: the channel's first element, and the column each of this
  // lane's 4 reads (outside the input, the mode's position inside).
  constexpr int MODE = Spec::pad_mode;
  const float* channel = in + (n * p.c + g) * (D * plane_floats);
  int cols[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) cols[j] = padding::source<MODE>(col + j, W);

  // Loads input plane i's rows, zeros outside the input. V = 4: 16-byte loads (W % 4 == 0 and an
  // aligned input, so a float4 is wholly inside or outside a row); else element by element.
  // Other modes than zeros read every row and column where the mode maps it: a float4 wholly
  // inside as one load, others element by element.
  auto load = [&](int i, float4* v) {
    if constexpr (MODE != padding::kZeros) {
      const float* plane = channel + padding::source<MODE>(id0 + i, D) * plane_floats;
#pragma unroll
      for (int r = 0; r < G.rows; ++r) {
        const float* src = plane + padding::source<MODE>(ih_first + r, H) * W;
        if (V == 4 && cols_in == 15u) {
          v[r] = __ldg(reinterpret_cast<const float4*>(src + col));
        } else {
          v[r] = make_float4(__ldg(src + cols[0]), __ldg(src + cols[1]), __ldg(src + cols[2]), __ldg(src + cols[3]));
        }
      }
      return;
    }
    const int id = id0 + i;
    const unsigned rows = id >= 0 && id < D ? rows_in : 0u;
    const float* plane = base + id * plane_floats;
#pragma unroll
    for (int r = 0; r < G.rows; ++r) {
      const float* src = plane + r * W;
      if constexpr (V == 4) {
        const bool ok = (rows >> r & 1u) && (cols_in & 1u);
        v[r] = ok ? __ldg(reinterpret_cast<const float4*>(src)) : make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
        float e[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) e[j] = (rows >> r & 1u) && (cols_in >> j & 1u) ? __ldg(src + j) : 0.f;
        v[r] = make_float4(e[0], e[1], e[2], e[3]);
      }
    }
  };

  float acc[G.span][TH][4] = {};
  float* out_k = out + (n * p.k + k) * (static_cast<long long>(OD) * OH * OW);
  const bool vec_out = OW % 4 == 0 && (reinterpret_cast<unsigned long long>(out) & 15) == 0;
  const bool stores = group < G.groups && s < G.stores;
  const int ow = c0 + 4 * s;  // this lane's stored columns: its computed ones shifted by S

  // Two plane buffers (the one computed, the one loading) and SPAN accumulator sets: unrolling
  // 2 x SPAN planes makes both indices compile-time.
  constexpr int UNROLL = 2 * G.span;
  float4 buf[2][G.rows];
  load(0, buf[0]);
#pragma unroll 1
  for (int first = 0; first < inputs; first += UNROLL) {
#pragma unroll
    for (int q = 0; q < UNROLL; ++q) {
      const int i = first + q;
      if (i >= inputs) break;
      if (i + 1 < inputs) load(i + 1, buf[(q + 1) % 2]);
      const float4* v = buf[q % 2];

      float win[G.rows][G.nxw];
#pragma unroll
      for (int r = 0; r < G.rows; ++r)
#pragma unroll
        for (int e = 0; e < G.nxw; ++e)  // own float4, then the neighbours' (e / 4 lanes right)
          win[r][e] = e < 4 ? component(v[r], e) : __shfl_down_sync(0xffffffffu, component(v[r], e % 4), e / 4);

      // Input plane i feeds output plane i - kd * DD through kernel plane kd.
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        const int o = i - kd * DD;
        if (o < 0 || o >= steps) continue;
        const int set = ((q - kd * DD) % G.span + G.span) % G.span;
#pragma unroll
        for (int kh = 0; kh < KH; ++kh)
#pragma unroll
          for (int t = 0; t < TH; ++t)
#pragma unroll
            for (int kw = 0; kw < KW; ++kw) {
              const float wv = w[(kd * KH + kh) * KW + kw];
#pragma unroll
              for (int x = 0; x < 4; ++x) acc[set][t][x] = fmaf(wv, win[t * SH + kh * DH][x + kw * DW], acc[set][t][x]);
            }
      }

      // Output plane i - (SPAN - 1) has had its last input plane: realign by S, store, reset.
      const int done = i - (G.span - 1);
      if (done < 0) continue;
      const int set = (q + 1) % G.span;
      float* plane_out = out_k + static_cast<long long>(od0 + done) * OH * OW;
#pragma unroll
      for (int t = 0; t < TH; ++t) {
        float o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float v = acc[set][t][(j + S) % 4];
          o[j] = epilogue::value<Spec>(j + S < 4 ? v : __shfl_down_sync(0xffffffffu, v, 1), bk, p);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[set][t][j] = 0.f;
        const int oh = oh_first + t;
        if (!stores || oh >= OH || ow >= OW) continue;
        float* dst = plane_out + static_cast<long long>(oh) * OW + ow;
        const long long at = dst - out;
        float r[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) r[j] = epilogue::residual<Spec, float>(at + j, ow + j < OW, p);
#pragma unroll
        for (int j = 0; j < 4; ++j) o[j] = epilogue::finish<Spec>(o[j], r[j], p);
        if (vec_out) {
          __stcs(reinterpret_cast<float4*>(dst), make_float4(o[0], o[1], o[2], o[3]));
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (ow + j < OW) __stcs(dst + j, o[j]);
        }
      }
    }
  }
}

}  // namespace conv3djit
