#pragma once
// Problem: a validated description with everything derived from it (the CUTLASS
// conv3d_problem_size idea): output extents, per-side padding, per-group channels, 64-bit sizes.
#include <cstdint>

#include "conv3djit/conv3d.hpp"

namespace conv3djit::detail {

struct Problem {
  Conv3dDesc desc;
  OutputExtents out;
  ResolvedPadding pad;
  int64_t c_per_group = 0;
  int64_t k_per_group = 0;
  int64_t input_elements = 0;
  int64_t weight_elements = 0;
  int64_t output_elements = 0;
  DataType out_dtype = DataType::Float32;  ///< output_dtype(desc): the output's and residual's type
  /// Taps of the kernel: KD x KH x KW.
  int64_t taps() const { return desc.kernel.d * desc.kernel.h * desc.kernel.w; }
  /// Multiply-adds of the whole convolution.
  double macs() const {
    return static_cast<double>(output_elements) * static_cast<double>(c_per_group) * static_cast<double>(taps());
  }
};

/// Bytes of one element of type t.
constexpr int element_bytes(DataType t) {
  switch (t) {
    case DataType::Float32: return 4;
    case DataType::BFloat16:
    case DataType::Float16: return 2;
  }
  return 0;
}

/// The checked Problem of desc (and tensors, if given); throws Error as validate() reports it.
Problem make_problem(const Conv3dDesc& desc, const Conv3dTensors* tensors = nullptr);

}  // namespace conv3djit::detail
