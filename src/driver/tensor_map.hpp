#pragma once
// TMA tensor maps (cuTensorMapEncodeTiled): the encoding every family with bulk tensor copies
// shares, and a per-thread memory of the last map of a role, since a map holds its tensor's
// address and a layer called again on the same buffers should not pay the encoding again.
#include <cuda.h>

#include <array>

#include "common/common.cuh"
#include "conv3djit/conv3d.hpp"
#include "jit/spec_key.hpp"

namespace conv3djit::detail {

/// The TMA element type of a tensor element type. Throws Error(Unsupported) for none.
CUtensorMapDataType tensor_map_type(DataType type);

/// The TMA element type of a map whose boxes the tensor cores read as they land: float32 in the
/// tf32 class as TFLOAT32, which the TMA rounds to TF32 (to nearest) as it loads it, where the
/// tensor cores would truncate it; every other type and class as tensor_map_type.
CUtensorMapDataType operand_map_type(DataType type, Precision precision);

/// A tensor of `rank` dimensions (innermost first; `strides` in bytes of dims 1..rank-1) copied
/// in boxes of `box` elements, out-of-bounds elements zero. Throws Error(DriverError) if the
/// driver refuses the map.
CUtensorMap encode_tiled_map(CUtensorMapDataType type, unsigned rank, const void* base, const cuuint64_t* dims,
                             const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* element_strides,
                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion);

/// An NCDHW output of `type` and extents (N, K, OD, OH, OW) as the 4-D tensor (OH·OW, OD, K, N)
/// (each plane's positions one row, which sm90_stores_boxed keeps on 16 bytes), stored in boxes of
/// `box` = {positions, planes, channels, 1} elements. Throws Error(DriverError) if the driver
/// refuses the map.
CUtensorMap encode_output_planes(DataType type, const void* base, long long n, long long k, long long od,
                                 long long plane, const cuuint32_t (&box)[4], CUtensorMapSwizzle swizzle);

/// A rows x cols row-major matrix of `type` (a weight's K rows of its reduction) in boxes of
/// `box_rows` rows x `box_cols` elements, swizzled, out-of-bounds elements zero. Throws
/// Error(DriverError) if the driver refuses the map.
CUtensorMap encode_matrix_rows(CUtensorMapDataType type, const void* base, long long rows, long long cols,
                               unsigned box_rows, unsigned box_cols, CUtensorMapSwizzle swizzle);

/// An NCDHW tensor of `type` and extents (N, C, D·H·W) as the 3-D tensor (D·H·W, C, N) in boxes of
/// `box_positions` positions x `box_channels` channels of one image, 128-byte swizzled (a channel's
/// positions one row), out-of-bounds elements zero. Throws Error(DriverError) if the driver
/// refuses the map.
CUtensorMap encode_channel_runs(CUtensorMapDataType type, const void* base, long long n, long long c,
                                long long positions, unsigned box_positions, unsigned box_channels);

/// A layer's NDHWC input (`p`'s extents, 16-byte aligned rows of C channels) read in im2col mode:
/// `pixels` consecutive window origins a copy (walked W, H, D, N by the layer's strides inside
/// the bounding box of its window origins: common/im2col.cuh), `channels` channels of each from
/// the copy's channel, out-of-bounds elements zero (the zero padding). `halo_w` more window origins
/// a row along W than the output has (row boxes, unit stride along W: common/im2col.cuh). Throws
/// Error(DriverError) if the driver refuses the map.
CUtensorMap encode_input_im2col(CUtensorMapDataType type, const void* input, const ConvParams& p, unsigned channels,
                                unsigned pixels, CUtensorMapSwizzle swizzle, int halo_w = 0);

/// The last map a thread encoded for one role: reused while the tensor's address, the kernel key
/// and the values it was made from (extents, padding) stay the same.
struct LastTensorMap {
  const void* tensor = nullptr;
  std::array<long long, 12> extents{};
  SpecKey key;
  CUtensorMap map{};

  /// The remembered map, or make() anew (and remembered) when anything it depends on changed; a
  /// throw from make() leaves the old entry intact.
  template <class Make>
  const CUtensorMap& get(const SpecKey& k, const void* t, const std::array<long long, 12>& ext, Make&& make) {
    if (tensor != t || key != k || ext != extents) {
      map = make();
      tensor = t;
      extents = ext;
      key = k;
    }
    return map;
  }
};

}  // namespace conv3djit::detail
