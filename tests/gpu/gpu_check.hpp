#pragma once
// GPU test helpers: run one description through conv3d on fresh random data with a NaN-poisoned
// output and compare it with the float64 reference (CPU when small, the GPU oracle when large).
#include <string>

#include "conv3djit/engine.hpp"
#include "conv3djit/reference.hpp"
#include "device.hpp"

namespace conv3djit::test {

struct GpuCheck {
  Comparison comparison;
  std::string kernel;
};

/// One engine per forced configuration ("" = the process-wide default engine, the planner's
/// choice), kept for the whole run so that kernels compiled once serve every later check.
Engine& engine_for(const std::string& config);

/// conv3d(desc) on `engine` vs the float64 reference, on `stream`; fresh inputs from `seed`, drawn
/// from `input_range`, the input `input_offset`, the weight `weight_offset` and the output and
/// residual `output_offset` elements past an allocation's start (1: off every 16-byte boundary).
/// With `call_from`, conv3d is called while that context is current (another device's, say); the
/// data lives in the context current on entry, which `stream` must belong to.
GpuCheck check_against_reference(Engine& engine, const Conv3dDesc& desc, uint64_t seed,
                                 const cli::Stream& stream, CUcontext call_from = nullptr,
                                 cli::ValueRange input_range = {}, int64_t input_offset = 0,
                                 int64_t weight_offset = 0, int64_t output_offset = 0);

}  // namespace conv3djit::test
