#pragma once
// The element types a kernel's tensors hold (Spec::element for input, weight and bias,
// Spec::out_element for output and residual), their conversions to and from float, and where an
// element of each tensor lies in Spec::ndhwc's layout.
// bf16 and fp16 are the 16-bit patterns themselves: no cuda_bf16.h / cuda_fp16.h, whose NVRTC
// use depends on the toolkit's include folder, and the tensor-core paths want the bits anyway.
#include "common/common.cuh"

namespace conv3djit {

struct bf16 {
  unsigned short bits;
};
struct fp16 {
  unsigned short bits;
};

/// T where B, else F (<type_traits> is not there under NVRTC).
template <bool B, class T, class F>
struct Select {
  using type = T;
};
template <class T, class F>
struct Select<false, T, F> {
  using type = F;
};
template <bool B, class T, class F>
using select_t = typename Select<B, T, F>::type;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float(static_cast<unsigned>(v.bits) << 16); }
__device__ __forceinline__ float to_float(fp16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

/// v rounded to nearest even in T (NaN stays NaN, overflow becomes infinity, as PyTorch rounds).
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
#if __CUDA_ARCH__ >= 800
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(v));
  return {b};
#else
  const unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<unsigned short>((u >> 16) | 0x40u)};  // quiet NaN
  return {static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
#endif
}
template <>
__device__ __forceinline__ fp16 from_float<fp16>(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return {h};
}

/// a and b rounded to the 16-bit type H, packed into one word (a in the low half, the lower
/// address): two consecutive elements for one 4-byte store.
template <class H>
__device__ __forceinline__ unsigned pack_pair(float a, float b) {
  return unsigned(from_float<H>(a).bits) | (unsigned(from_float<H>(b).bits) << 16);
}

/// The pair pack_pair<H> packed, back in float32: a from the low half.
template <class H>
__device__ __forceinline__ void unpack_pair(unsigned w, float& a, float& b) {
  a = to_float(H{static_cast<unsigned short>(w & 0xffffu)});
  b = to_float(H{static_cast<unsigned short>(w >> 16)});
}

/// Whether T is bf16 (the tensor-core instructions name their 16-bit type).
template <class T>
inline constexpr bool kIsBf16 = false;
template <>
inline constexpr bool kIsBf16<bf16> = true;

/// v stored at p in p's type.
template <class T>
__device__ __forceinline__ void store_float(T* p, float v) {
  *p = from_float<T>(v);
}

/// Two consecutive elements a, b stored at p (aligned to both: 8 bytes for float, 4 for halves)
/// with one store.
__device__ __forceinline__ void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
template <class H>
__device__ __forceinline__ void store_pair(H* p, float a, float b) {
  *reinterpret_cast<unsigned*>(p) = pack_pair<H>(a, b);
}

/// a at p and, where `second`, b at p + 1 (the caller has checked that a's element exists): one
/// paired store where `paired` (p aligned to both), else one or two. `paired` passes through an
/// empty asm: it is the same in every iteration of the caller's store loop, and NVVM would
/// otherwise unswitch the loop on it, compiling every output's epilogue twice.
template <class T>
__device__ __forceinline__ void store_two(T* p, float a, float b, bool paired, bool second) {
  unsigned opaque = paired;
  asm volatile("" : "+r"(opaque));
  if (opaque != 0 && second) {
    store_pair(p, a, b);
  } else {
    store_float(p, a);
    if (second) store_float(p + 1, b);
  }
}

/// The element at p as a float, through the read-only path (the tensor is not written while the
/// kernel runs).
__device__ __forceinline__ float load_float(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_float(const bf16* p) { return to_float(bf16{__ldg(&p->bits)}); }
__device__ __forceinline__ float load_float(const fp16* p) { return to_float(fp16{__ldg(&p->bits)}); }

/// Element strides of an activation tensor (input N x C x D x H x W or output N x K x OD x OH x
/// OW logically) in its layout: NCDHW has W innermost, NDHWC the channels.
struct ActivationStrides {
  long long n, c, d, h, w;
};
template <int NDHWC>
CONV3DJIT_HOST_DEVICE constexpr ActivationStrides activation_strides(long long c, long long d, long long h, long long w) {
  if constexpr (NDHWC != 0) {
    return {d * h * w * c, 1, h * w * c, w * c, c};
  } else {
    return {c * d * h * w, d * h * w, h * w, w, 1};
  }
}

/// Element strides of a weight (K x CG x KD x KH x KW logically): NDHWC keeps the CG channels
/// of a tap innermost, as PyTorch's channels_last_3d weight does.
template <int NDHWC>
CONV3DJIT_HOST_DEVICE constexpr ActivationStrides weight_strides(long long cg, long long kd, long long kh, long long kw) {
  return activation_strides<NDHWC>(cg, kd, kh, kw);
}

}  // namespace conv3djit
