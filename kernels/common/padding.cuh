#pragma once
// Padding modes in the kernels' input loads: where a padded position reads. A family maps each
// input index it computes (row, plane, column) through source(); the padded copy of the input that
// PyTorch makes for padding_mode != 'zeros' (F.pad) is never built.
#include "common/common.cuh"

namespace conv3djit::padding {

// The numbers of conv3djit::PaddingMode (conv3d.hpp), which the host writes into Spec::pad_mode.
enum : int { kZeros, kReflect, kReplicate, kCircular };

// i clamped into [0, n).
template <class T>
__device__ __forceinline__ T clamped(T i, T n) {
  return i < 0 ? T(0) : i >= n ? n - 1 : i;
}

/// Where index i of an axis of extent n reads: i itself inside [0, n); outside, -1 (nothing: a
/// zero) for zeros, else the mode's position inside. Validation keeps the padding below n for
/// reflect and at most n for circular, so one reflection or wrap reaches every padded index; an
/// index past the padding (a tile's threads beyond the last output compute too) is clamped into
/// the input, so that every mode's read is inside it.
template <int MODE, class T>
__device__ __forceinline__ T source(T i, T n) {
  if constexpr (MODE == kReflect) {
    const T r = i < 0 ? -i : i;
    const T m = r >= n ? 2 * (n - 1) - r : r;
    return m < 0 ? T(0) : m;
  } else if constexpr (MODE == kReplicate) {
    return clamped(i, n);
  } else if constexpr (MODE == kCircular) {
    return clamped(i < 0 ? i + n : i >= n ? i - n : i, n);
  } else {
    return i >= 0 && i < n ? i : T(-1);
  }
}

/// source() with the mode a run-time value (the shape-generic float64 reference kernel).
template <class T>
__device__ __forceinline__ T source(int mode, T i, T n) {
  switch (mode) {
    case kReflect: return source<kReflect>(i, n);
    case kReplicate: return source<kReplicate>(i, n);
    case kCircular: return source<kCircular>(i, n);
    default: return source<kZeros>(i, n);
  }
}

}  // namespace conv3djit::padding
