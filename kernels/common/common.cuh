#pragma once
// Shared between the kernels (NVRTC or nvcc) and the host code that fills the launch arguments:
// plain C++ only, so the host compiler sees exactly the same layout.

// Functions the planner (host) and the kernels (device) both evaluate.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define CONV3DJIT_HOST_DEVICE __host__ __device__
#else
#define CONV3DJIT_HOST_DEVICE
#endif

// The minimum blocks an SM of a kernel's __launch_bounds__: its geometry's n, or fewer where the
// engine compiled the kernel again because the register budget of n left a stack frame
// (nvrtc_compile_spill_free, src/jit/nvrtc_compiler.hpp).
#ifdef CONV3DJIT_MIN_BLOCKS
#define CONV3DJIT_BLOCKS_AN_SM(n) ((n) < CONV3DJIT_MIN_BLOCKS ? (n) : CONV3DJIT_MIN_BLOCKS)
#else
#define CONV3DJIT_BLOCKS_AN_SM(n) (n)
#endif

namespace conv3djit {

/// Run-time arguments of every convolution kernel. Shape parameters that a kernel bakes in as
/// template constants are still passed here; such a kernel ignores them (the fp64 reference
/// kernel reads them all).
struct ConvParams {
  long long n, c, d, h, w;   // input extents
  long long k, od, oh, ow;   // output extents
  long long k_per_group;
  int c_per_group;
  int kd, kh, kw;
  int sd, sh, sw;
  int dd, dh, dw;
  int pad_d, pad_h, pad_w;   // padding before each axis (after-padding only shortens the output)
  int pad_mode;              // what padding reads (common/padding.cuh); the kernels' Spec::pad_mode
  int has_bias;
  // The epilogue's run-time scalars (common/epilogue.cuh): act_a is LeakyRelu's slope or Clamp's
  // lower bound, act_b Clamp's upper bound. residual: the tensor's address, read where the kernel
  // was built with a residual.
  float alpha, gamma, beta, act_a, act_b;
  unsigned long long residual;
};

/// Returns a % b and leaves a / b in a (a >= 0, b > 0), in 32-bit arithmetic when both fit: a
/// kernel's 64-bit division by a run-time value is a long subroutine.
CONV3DJIT_HOST_DEVICE inline long long take_remainder(long long& a, long long b) {
  if (((a | b) >> 32) == 0) {
    const unsigned q = static_cast<unsigned>(a) / static_cast<unsigned>(b);
    const long long r = a - static_cast<long long>(q) * b;
    a = q;
    return r;
  }
  const long long q = a / b, r = a - q * b;
  a = q;
  return r;
}

/// Where reduction term `term` (c * KVOL + tap) lies in a weight row of CG x KVOL: the term itself
/// for NCDHW weights (K x C x KD x KH x KW), tap * CG + c for NDHWC ones (K x KD x KH x KW x C,
/// channels innermost).
CONV3DJIT_HOST_DEVICE constexpr int weight_term(int term, int cg, int kvol, bool ndhwc) {
  return ndhwc ? term % kvol * cg + term / kvol : term;
}

}  // namespace conv3djit
