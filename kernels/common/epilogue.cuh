#pragma once
// The epilogue every convolution kernel applies in its store path, from this one definition:
// out = act(alpha * sum + bias) * gamma + beta * residual. Spec::act (an Activation's number),
// Spec::scaled (alpha or gamma is not 1) and Spec::residual are compile-time: they change the code,
// and the plain convolution's stores stay exactly sum + bias. The values of alpha, gamma, beta and
// the activation's parameters are run-time (ConvParams): one kernel serves every value of them.
// Templated on the arithmetic type, so that the float64 reference kernel runs the same formulas.
#include "common/async_copy.cuh"
#include "common/common.cuh"
#include "common/element.cuh"

namespace conv3djit::epilogue {

// The numbers of conv3djit::Activation (conv3d.hpp), which the host writes into Spec::act.
enum : int { kIdentity, kRelu, kLeakyRelu, kGelu, kGeluTanh, kSilu, kSigmoid, kTanh, kHardswish, kClamp };

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float erf_of(float x) { return erff(x); }
__device__ __forceinline__ double erf_of(double x) { return erf(x); }
__device__ __forceinline__ float tanh_of(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_of(double x) { return tanh(x); }
// a / b for the logistic's 1 + exp(-v) >= 1: IEEE division's slow-path branch (a subroutine call
// per output) made a store loop's loads wait one after another; __fdividef is within 2 ulp there
// and gives 0 where b overflows, the limit.
__device__ __forceinline__ float logistic_div(float a, float b) { return __fdividef(a, b); }
__device__ __forceinline__ double logistic_div(double a, double b) { return a / b; }

template <int ACT, class T>
__device__ __forceinline__ T activate(T v, const ConvParams& p) {
  if constexpr (ACT == kRelu) {
    return v > T(0) ? v : T(0);
  } else if constexpr (ACT == kLeakyRelu) {
    return v >= T(0) ? v : v * T(p.act_a);
  } else if constexpr (ACT == kGelu) {
    return T(0.5) * v * (T(1) + erf_of(v * T(0.70710678118654752440)));
  } else if constexpr (ACT == kGeluTanh) {
    const T inner = T(0.79788456080286535588) * (v + T(0.044715) * v * v * v);
    return T(0.5) * v * (T(1) + tanh_of(inner));
  } else if constexpr (ACT == kSilu) {
    return logistic_div(v, T(1) + exp_of(-v));
  } else if constexpr (ACT == kSigmoid) {
    return logistic_div(T(1), T(1) + exp_of(-v));
  } else if constexpr (ACT == kTanh) {
    return tanh_of(v);
  } else if constexpr (ACT == kHardswish) {
    const T r = v + T(3);
    return v * (r < T(0) ? T(0) : r > T(6) ? T(6) : r) / T(6);
  } else if constexpr (ACT == kClamp) {
    return v < T(p.act_a) ? T(p.act_a) : v > T(p.act_b) ? T(p.act_b) : v;
  } else {
    return v;
  }
}

/// Whether the epilogue is the plain convolution's: sum + bias.
template <class Spec>
inline constexpr bool plain = Spec::act == kIdentity && Spec::scaled == 0 && Spec::residual == 0;

/// alpha * sum + bias, the activation's argument: a kernel that stages its sums before the rest
/// of the epilogue stages this, and needs no bias where it finishes them.
template <class Spec, class T>
__device__ __forceinline__ T argument(T sum, T bias, const ConvParams& p) {
  if constexpr (Spec::scaled != 0) {
    return T(p.alpha) * sum + bias;
  } else {
    return sum + bias;
  }
}

/// act(x) * gamma for the activation's argument x.
template <class Spec, class T>
__device__ __forceinline__ T activated(T x, const ConvParams& p) {
  if constexpr (Spec::scaled != 0) {
    return activate<Spec::act>(x, p) * T(p.gamma);
  } else {
    return activate<Spec::act>(x, p);
  }
}

/// act(alpha * sum + bias) * gamma: what depends on the output's value only.
template <class Spec, class T>
__device__ __forceinline__ T value(T sum, T bias, const ConvParams& p) {
  return activated<Spec>(argument<Spec>(sum, bias, p), p);
}

/// The residual at `offset` (the output's own offset: the residual has the output's shape,
/// layout and type), or 0 where !ok or without a residual. A kernel that stores several outputs reads
/// their residuals first and then finishes them: the reads are then in flight together, not one
/// DRAM round trip after another.
/// The read is non-coherent (__ldg) although the residual may be the output itself: each element
/// is read once, by the thread that then writes it, so no read can see another thread's write.
template <class Spec, class T>
__device__ __forceinline__ T residual(long long offset, bool ok, const ConvParams& p) {
  if constexpr (Spec::residual != 0) {
    const auto* r = reinterpret_cast<const typename Spec::out_element*>(p.residual);
    return ok ? T(load_float(r + offset)) : T(0);
  } else {
    return T(0);
  }
}

/// Asks L2 for the residual's elements offset .. offset + len - 1 (len >= 1), a line at a time:
/// issued well before the epilogue, its reads then hit L2 rather than wait on DRAM. Nothing
/// without a residual.
template <class Spec>
__device__ __forceinline__ void prefetch_residual(long long offset, int len, const ConvParams& p) {
  if constexpr (Spec::residual != 0) {
    using Out = typename Spec::out_element;
    constexpr int LINE = 128 / sizeof(Out);  // elements a cache line
    const Out* const run = reinterpret_cast<const Out*>(p.residual) + offset;
    for (int a = 0; a < len; a += LINE) prefetch_l2(run + a);
    prefetch_l2(run + len - 1);  // (the run's last line, where it starts mid-line)
  }
}

/// v + beta * r, r read by residual(); v unchanged without a residual.
template <class Spec, class T>
__device__ __forceinline__ T finish(T v, T r, const ConvParams& p) {
  if constexpr (Spec::residual != 0) {
    return v + T(p.beta) * r;
  } else {
    return v;
  }
}

/// The epilogue of one output with its residual already read.
template <class Spec, class T>
__device__ __forceinline__ T apply_read(T sum, T bias, T r, const ConvParams& p) {
  return finish<Spec>(value<Spec>(sum, bias, p), r, p);
}

/// The whole epilogue of the output at `offset`.
template <class Spec, class T>
__device__ __forceinline__ T apply(T sum, T bias, long long offset, const ConvParams& p) {
  return apply_read<Spec>(sum, bias, residual<Spec, T>(offset, true, p), p);
}

}  // namespace conv3djit::epilogue
