// General direct convolution, FFMA in float32 for every element type and layout: the kernel that
// serves every valid description. Compile-time: channels per group, kernel, stride, dilation,
// padding mode, element types, layout and TW, the run of consecutive outputs along W one thread
// computes. Run-time: everything else, through ConvParams.
#pragma once
#include "common/element.cuh"
#include "common/epilogue.cuh"
#include "common/padding.cuh"

namespace conv3djit {

template <class Spec>
__global__ void __launch_bounds__(256)
direct(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
       const typename Spec::element* __restrict__ bias, typename Spec::out_element* __restrict__ out, ConvParams p) {
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, TW = Spec::tw;
  using Out = typename Spec::out_element;
  const long long ow_tiles = (p.ow + TW - 1) / TW;
  const long long total = p.n * p.k * p.od * p.oh * ow_tiles;
  const ActivationStrides is = activation_strides<Spec::ndhwc>(p.c, p.d, p.h, p.w);
  const ActivationStrides os = activation_strides<Spec::ndhwc>(p.k, p.od, p.oh, p.ow);
  constexpr ActivationStrides ws = weight_strides<Spec::ndhwc>(CG, KD, KH, KW);
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    // Neighbouring threads take neighbouring outputs: along W in NCDHW, along K in NDHWC.
    long long t = idx, k;
    if constexpr (Spec::ndhwc != 0) k = take_remainder(t, p.k);
    const long long ow0 = take_remainder(t, ow_tiles) * TW;
    const long long oh = take_remainder(t, p.oh);
    const long long od = take_remainder(t, p.od);
    if constexpr (Spec::ndhwc == 0) k = take_remainder(t, p.k);
    const long long n = t;
    const long long g = k / p.k_per_group;

    float acc[TW];
#pragma unroll
    for (int i = 0; i < TW; ++i) acc[i] = 0.f;

    const auto* in_g = in + n * is.n + g * CG * is.c;
    const auto* w_k = wt + k * ws.n;
    const long long id0 = od * SD - p.pad_d;
    const long long ih0 = oh * SH - p.pad_h;
    const long long iw0 = ow0 * SW - p.pad_w;

    // Only the innermost (kw, output) loops are unrolled: unrolling everything makes NVRTC
    // compile times explode for large kernels and channel counts. Each channel's taps are summed
    // on their own before joining the total (blocked summation): rounding error then grows with
    // KD * KH * KW + C rather than their product, which keeps large reductions in the fp32 class.
#pragma unroll 1
    for (int c = 0; c < CG; ++c) {
      const auto* in_c = in_g + c * is.c;
      float part[TW];
#pragma unroll
      for (int i = 0; i < TW; ++i) part[i] = 0.f;
#pragma unroll 1
      for (int kd = 0; kd < KD; ++kd) {
        const long long id = padding::source<Spec::pad_mode>(id0 + kd * DD, p.d);
        if (id < 0) continue;
#pragma unroll 1
        for (int kh = 0; kh < KH; ++kh) {
          const long long ih = padding::source<Spec::pad_mode>(ih0 + kh * DH, p.h);
          if (ih < 0) continue;
          const auto* row = in_c + id * is.d + ih * is.h;
          const auto* w_row = w_k + c * ws.c + kd * ws.d + kh * ws.h;
#pragma unroll
          for (int kw = 0; kw < KW; ++kw) {
            const float wv = load_float(w_row + kw * ws.w);
#pragma unroll
            for (int i = 0; i < TW; ++i) {
              const long long iw = padding::source<Spec::pad_mode>(iw0 + i * SW + kw * DW, p.w);
              if (iw >= 0) part[i] = fmaf(wv, load_float(row + iw * is.w), part[i]);
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < TW; ++i) acc[i] += part[i];
    }
    const float b = p.has_bias ? load_float(bias + k) : 0.f;
    const long long at = n * os.n + k * os.c + od * os.d + oh * os.h;
#pragma unroll
    for (int i = 0; i < TW; ++i) {
      const long long o = at + (ow0 + i) * os.w;
      if (ow0 + i < p.ow) out[o] = from_float<Out>(epilogue::apply<Spec>(acc[i], b, o, p));
    }
  }
}

}  // namespace conv3djit
