#pragma once
// Generate: a SpecKey becomes an NVRTC program over the embedded kernels/ sources: a main source
// that includes the kernel's file and declares the specialisation as a traits struct of named
// constants, the kernel template instantiated with it as a name expression, and the canonical
// compile options.
#include <string>
#include <vector>

#include "jit/spec_key.hpp"

namespace conv3djit::detail {

struct GeneratedKernel {
  std::string source;           // main translation unit
  std::string name_expression;  // e.g. "conv3djit::igemm_sm90<conv3djit::spec::igemm_sm90_1a2b...>"
  std::vector<std::string> options;  // sorted, so equal sets give equal keys
};

/// The traits struct of `key` named `name`: `static constexpr int cg = 3;` for every field the
/// kernel uses, `using element = float;` for its element type. Plain C++: nvcc compiles it too.
std::string traits_struct(const SpecKey& key, const std::string& name);

GeneratedKernel generate(const SpecKey& key, const std::string& arch);

}  // namespace conv3djit::detail
