#include "driver/module_loader.hpp"

#include <fmt/format.h>

#include "driver/driver_api.hpp"

namespace conv3djit::detail {

ContextScope::ContextScope(CUcontext ctx) {
  const DriverApi& d = driver();
  CUcontext current = nullptr;
  check_cu(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != ctx) {
    check_cu(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
    pushed_ = true;
  }
}

ContextScope::~ContextScope() {
  if (pushed_) {
    CUcontext popped = nullptr;
    driver().cuCtxPopCurrent(&popped);
  }
}

std::string to_payload(const KernelBinary& b) { return b.lowered_name + '\n' + b.cubin; }

bool from_payload(const std::string& payload, KernelBinary* b) {
  const size_t nl = payload.find('\n');
  if (nl == std::string::npos || nl == 0 || nl + 1 >= payload.size()) return false;
  b->lowered_name = payload.substr(0, nl);
  b->cubin = payload.substr(nl + 1);
  return true;
}

CUcontext context_for_stream(CUstream stream) {
  const DriverApi& d = driver();
  CUcontext ctx = nullptr;
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  const bool implicit = handle == 0 || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
  if (!implicit) {
    check_cu(d.cuStreamGetCtx(stream, &ctx), "cuStreamGetCtx");
    return ctx;
  }
  check_cu(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return ctx;
  int count = 0;
  check_cu(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count == 0) throw Error(ErrorCategory::NoDevice, "no CUDA device");
  CUdevice dev = 0;
  check_cu(d.cuDeviceGet(&dev, 0), "cuDeviceGet(0)");
  check_cu(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain(0)");
  check_cu(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

CallContext call_context(CUstream stream) {
  CallContext c;
  c.handle = context_for_stream(stream);
  check_cu(driver().cuCtxGetId(c.handle, &c.id), "cuCtxGetId");
  return c;
}

ContextInfo describe_context(CUcontext ctx) {
  const DriverApi& d = driver();
  ContextScope scope(ctx);
  ContextInfo info;
  check_cu(d.cuCtxGetDevice(&info.device), "cuCtxGetDevice");
  auto attr = [&](CUdevice_attribute a, const char* name) {
    int v = 0;
    check_cu(d.cuDeviceGetAttribute(&v, a, info.device), name);
    return v;
  };
  info.limits.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability");
  info.limits.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability");
  info.limits.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count");
  info.limits.max_smem_per_block_optin =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory opt-in");
  info.limits.max_smem_per_sm =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "shared memory per SM");
  info.arch = fmt::format("sm_{}{}", info.limits.cc_major, info.limits.cc_minor);
  return info;
}

CUfunction load_kernel(CUcontext ctx, const KernelBinary& binary, unsigned dynamic_shared) {
  const DriverApi& d = driver();
  ContextScope scope(ctx);
  CUmodule module = nullptr;
  check_cu(d.cuModuleLoadData(&module, binary.cubin.data()), "cuModuleLoadData");
  CUfunction fn = nullptr;
  const CUresult r = d.cuModuleGetFunction(&fn, module, binary.lowered_name.c_str());
  if (r != CUDA_SUCCESS) {
    d.cuModuleUnload(module);
    check_cu(r, "cuModuleGetFunction");
  }
  // A block's static and dynamic shared memory together past 48 KB need the opt-in: without it the
  // launch fails (CUDA_ERROR_INVALID_VALUE) even where the dynamic part alone is under 48 KB.
  int static_shared = 0;
  check_cu(d.cuFuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
           "cuFuncGetAttribute(SHARED_SIZE_BYTES)");
  if (dynamic_shared + static_cast<unsigned>(static_shared) > 48 * 1024) {
    check_cu(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(dynamic_shared)),
             "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  // Modules stay loaded for the life of the process (or context): functions handed out refer to them.
  return fn;
}

}  // namespace conv3djit::detail
