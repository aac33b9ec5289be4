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

/// nvrtc_compile, and where the kernel's __launch_bounds__ ask for blocks_an_sm > 1 blocks an SM
/// (CONV3DJIT_BLOCKS_AN_SM) and ptxas left a stack frame at that register budget, compiled again
/// with fewer: three quarters of them (a budget a third larger), then one. The first without a
/// stack frame is kept, else the one with the least (ties: more blocks). The key stays the same:
/// the outcome is the compiler's, as deterministic as the rest of a compile. *attempts: the
/// compiles it took.
CompiledKernel nvrtc_compile_spill_free(const GeneratedKernel& kernel, int blocks_an_sm, int* attempts = nullptr);

}  // namespace conv3djit::detail
