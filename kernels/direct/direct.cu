// General direct convolution, fp32 FFMA. Serves every valid description: the fallback kernel.
// Compile-time: channels per group, kernel, stride, dilation, padding mode and TW, the run of consecutive
// outputs along W one thread computes. Run-time: everything else, through ConvParams.
#pragma once
#include "common/epilogue.cuh"
#include "common/padding.cuh"

namespace conv3djit {

template <class Spec>
__global__ void __launch_bounds__(256)
direct(const typename Spec::element* __restrict__ in, const typename Spec::element* __restrict__ wt,
       const typename Spec::element* __restrict__ bias, typename Spec::element* __restrict__ out, ConvParams p) {
  constexpr int CG = Spec::cg, KD = Spec::kd, KH = Spec::kh, KW = Spec::kw, SD = Spec::sd, SH = Spec::sh;
  constexpr int SW = Spec::sw, DD = Spec::dd, DH = Spec::dh, DW = Spec::dw, TW = Spec::tw;
  const long long ow_tiles = (p.ow + TW - 1) / TW;
  const long long total = p.n * p.k * p.od * p.oh * ow_tiles;
  const long long in_plane = p.h * p.w;
  const long long in_volume = p.d * in_plane;
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    // W-tile fastest so that neighbouring threads read neighbouring inputs.
    long long t = idx;
    const long long ow0 = (t % ow_tiles) * TW;  t /= ow_tiles;
    const long long oh = t % p.oh;              t /= p.oh;
    const long long od = t % p.od;              t /= p.od;
    const long long k = t % p.k;
    const long long n = t / p.k;
    const long long g = k / p.k_per_group;

    float acc[TW];
#pragma unroll
    for (int i = 0; i < TW; ++i) acc[i] = 0.f;

    const float* in_g = in + (n * p.c + g * CG) * in_volume;
    const float* w_k = wt + k * (long long)(CG * KD * KH * KW);
    const long long id0 = od * SD - p.pad_d;
    const long long ih0 = oh * SH - p.pad_h;
    const long long iw0 = ow0 * SW - p.pad_w;

    // Only the innermost (kw, output) loops are unrolled: unrolling everything makes NVRTC
    // compile times explode for large kernels and channel counts. Each channel's taps are summed
    // on their own before joining the total (blocked summation): rounding error then grows with
    // KD * KH * KW + C rather than their product, which keeps large reductions in the fp32 class.
#pragma unroll 1
    for (int c = 0; c < CG; ++c) {
      const float* in_c = in_g + c * in_volume;
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
          const float* row = in_c + id * in_plane + ih * p.w;
          const float* w_row = w_k + ((c * KD + kd) * KH + kh) * KW;
#pragma unroll
          for (int kw = 0; kw < KW; ++kw) {
            const float wv = __ldg(w_row + kw);
#pragma unroll
            for (int i = 0; i < TW; ++i) {
              const long long iw = padding::source<Spec::pad_mode>(iw0 + i * SW + kw * DW, p.w);
              if (iw >= 0) part[i] = fmaf(wv, __ldg(row + iw), part[i]);
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < TW; ++i) acc[i] += part[i];
    }
    const float b = p.has_bias ? __ldg(bias + k) : 0.f;
    const long long row = (((n * p.k + k) * p.od + od) * p.oh + oh) * p.ow;
#pragma unroll
    for (int i = 0; i < TW; ++i) {
      if (ow0 + i < p.ow) out[row + ow0 + i] = epilogue::apply<Spec>(acc[i], b, row + ow0 + i, p);
    }
  }
}

}  // namespace conv3djit
