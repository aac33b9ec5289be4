#pragma once
// The CUDA Driver API, loaded from libcuda.so.1 with dlopen at first use and resolved through
// cuGetProcAddress, so that every binary starts (and everything that needs no GPU works) on a
// machine without a driver. cuda.h is used for its types only; libcuda is never linked.
#include <cuda.h>

#include <string>

namespace conv3djit::detail {

struct DriverApi {
#define CONV3DJIT_DRIVER_FUNCTIONS(X)                                                        \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)  \
  X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceTotalMem)              \
  X(cuDevicePrimaryCtxRetain) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice)        \
  X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxSynchronize) X(cuStreamGetCtx) X(cuCtxGetId)  \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute)         \
  X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)         \
  X(cuMemcpyDtoH) X(cuMemsetD32) X(cuMemsetD8) X(cuStreamCreate) X(cuStreamDestroy)          \
  X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                 \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuStreamBeginCapture) X(cuStreamEndCapture)  \
  X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)             \
  X(cuMemGetInfo) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuTensorMapEncodeTiled)             \
  X(cuMemGetAddressRange) X(cuMemRetainAllocationHandle) X(cuMemRelease) X(cuMemPoolCreate)   \
  X(cuMemPoolSetAttribute) X(cuMemAllocFromPoolAsync) X(cuStreamIsCapturing)                \
  X(cuTensorMapEncodeIm2col) X(cuMemcpyDtoDAsync)
#define CONV3DJIT_DECLARE(name) decltype(&::name) name = nullptr;
  CONV3DJIT_DRIVER_FUNCTIONS(CONV3DJIT_DECLARE)
#undef CONV3DJIT_DECLARE
};

/// The loaded driver with cuInit done; throws Error(NoDevice) "no CUDA driver found" without
/// libcuda.so.1 and Error(DriverError) if cuInit fails. Thread-safe; loads once.
const DriverApi& driver();

/// Tests only: serve `fake` instead of the loaded driver (nullptr: back to the real one). Lets CPU
/// tests drive the launch path, e.g. several contexts, without a GPU.
void set_driver_for_testing(const DriverApi* fake) noexcept;

/// Throws Error(DriverError) naming `what` and the driver's error name/string unless ok.
void check_cu(CUresult result, const char* what);

/// "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for a result code.
std::string cu_error_text(CUresult result);

}  // namespace conv3djit::detail
