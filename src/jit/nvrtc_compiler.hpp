#pragma once
// Compile: NVRTC turns a GeneratedKernel into a cubin for one arch. Needs no GPU. NVRTC is
// thread-safe, so callers may compile different kernels in parallel.
#include <string>

#include "jit/codegen.hpp"

namespace conv3djit::detail {

struct CompiledKernel {
  std::string lowered_name;  // mangled symbol to look up in the module
  std::string cubin;
  std::string notes;  // the compiler's messages on success: warnings, ptxas' performance notes
};

/// Throws Error(CompileFailed) with the NVRTC log, name expression and options on failure.
CompiledKernel nvrtc_compile(const GeneratedKernel& kernel);

}  // namespace conv3djit::detail
