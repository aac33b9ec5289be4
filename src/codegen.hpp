#pragma once
// Generate: a SpecKey becomes an NVRTC program over the embedded kernels/ sources: a one-line
// main source that includes the kernel file, the template instantiation as a name expression,
// and the canonical compile options.
#include <string>
#include <vector>

#include "spec_key.hpp"

namespace conv3djit::detail {

struct GeneratedKernel {
  std::string source;           // main translation unit
  std::string name_expression;  // e.g. "conv3djit::direct_fp32<3,3,5,7,1,1,1,1,1,1,4>"
  std::vector<std::string> options;  // sorted, so equal sets give equal keys
};

GeneratedKernel generate(const SpecKey& key, const std::string& arch);

}  // namespace conv3djit::detail
