#pragma once
// Compile: NVRTC turns a GeneratedKernel into a cubin for one arch. Needs no GPU. NVRTC is
// thread-safe, so callers may compile different kernels in parallel.
#include <string>
#include <vector>

#include "jit/codegen.hpp"

namespace conv3djit::detail {

struct CompiledKernel {
  std::string lowered_name;  // mangled symbol to look up in the module
  std::string cubin;
  std::string notes;  // the compiler's messages on success: warnings, ptxas' performance notes
};

/// The compute capabilities this NVRTC compiles for (75, 80, ..., 120), ascending.
std::vector<int> nvrtc_supported_archs();

/// Checks an arch name before anything is planned or compiled for it: "sm_XY" with XY one of
/// nvrtc_supported_archs(), or "sm_XYa" / "sm_XYf" where such a variant exists (a from sm_90, f from
/// sm_100). Throws Error(InvalidArgument) for a malformed name, Error(Unsupported) for one this
/// NVRTC does not know, listing the ones it does.
void check_arch(const std::string& arch);

/// Throws Error(CompileFailed) with the NVRTC log, name expression and options on failure.
CompiledKernel nvrtc_compile(const GeneratedKernel& kernel);

}  // namespace conv3djit::detail
