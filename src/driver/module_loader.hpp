#pragma once
// Launch side of the pipeline: contexts, their devices, and kernels loaded into them.
#include <cuda.h>

#include <string>

#include "plan/plan.hpp"

namespace conv3djit::detail {

/// A compiled kernel as the caches keep it: the cubin and the symbol to look up.
struct KernelBinary {
  std::string lowered_name;
  std::string cubin;
  bool from_disk = false;   // read from the disk cache rather than compiled by this process
  double compile_ms = 0;
  std::string compile_notes;  // CompiledKernel::notes of this process's compile (not on disk)
  std::string disk_problem;   // why this process's compile is not in the disk cache; empty if it is
};

/// Disk payload <-> KernelBinary: the lowered name, a newline, then the cubin bytes.
std::string to_payload(const KernelBinary& binary);
bool from_payload(const std::string& payload, KernelBinary* binary);

/// Makes ctx current for a scope if it is not already, restoring the caller's context after.
class ContextScope {
 public:
  explicit ContextScope(CUcontext ctx);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  bool pushed_ = false;
};

/// The device behind a context.
struct ContextInfo {
  CUdevice device = 0;
  std::string arch;  // "sm_90"
  DeviceLimits limits;
};

/// The context a call on `stream` runs in: the stream's own context; for the null, legacy or
/// per-thread stream, the current context, else the primary context of device 0 (made current,
/// as the CUDA runtime does).
CUcontext context_for_stream(CUstream stream);

/// A call's context and its process-unique ID (cuCtxGetId). Loaded kernels and plans are keyed by
/// the ID: a destroyed context's handle can come back for a new context, whose modules it lacks.
struct CallContext {
  CUcontext handle = nullptr;
  unsigned long long id = 0;
};
CallContext call_context(CUstream stream);

ContextInfo describe_context(CUcontext ctx);

/// Loads binary into ctx and returns its kernel; opts in to `dynamic_shared` bytes where they and
/// the kernel's static shared memory pass 48 KB together.
/// Throws Error(DriverError) if the driver refuses the image.
CUfunction load_kernel(CUcontext ctx, const KernelBinary& binary, unsigned dynamic_shared);

}  // namespace conv3djit::detail
