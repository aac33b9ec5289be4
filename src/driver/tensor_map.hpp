#pragma once
// TMA tensor maps (cuTensorMapEncodeTiled): the encoding every family with bulk tensor copies
// shares, and a per-thread memory of the last map of a role, since a map holds its tensor's
// address and a layer called again on the same buffers should not pay the encoding again.
#include <cuda.h>

#include <algorithm>

#include "conv3djit/conv3d.hpp"
#include "jit/spec_key.hpp"

namespace conv3djit::detail {

/// The TMA element type of a tensor element type. Throws Error(Unsupported) for none.
CUtensorMapDataType tensor_map_type(DataType type);

/// A tensor of `rank` dimensions (innermost first; `strides` in bytes of dims 1..rank-1) copied
/// in boxes of `box` elements, out-of-bounds elements zero. Throws Error(DriverError) if the
/// driver refuses the map.
CUtensorMap encode_tiled_map(CUtensorMapDataType type, unsigned rank, const void* base, const cuuint64_t* dims,
                             const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* element_strides,
                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion);

/// The last map a thread encoded for one role: reused while the tensor's address, the kernel key
/// and the extents it was made for stay the same.
struct LastTensorMap {
  const void* tensor = nullptr;
  long long extents[5] = {};
  SpecKey key;
  CUtensorMap map{};

  /// The remembered map, or make() anew (and remembered) when anything it depends on changed; a
  /// throw from make() leaves the old entry intact.
  template <class Make>
  const CUtensorMap& get(const SpecKey& k, const void* t, const long long (&ext)[5], Make&& make) {
    if (tensor != t || key != k || !std::equal(ext, ext + 5, extents)) {
      map = make();
      tensor = t;
      std::copy(ext, ext + 5, extents);
      key = k;
    }
    return map;
  }
};

}  // namespace conv3djit::detail
