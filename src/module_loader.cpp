#include "module_loader.hpp"

#include <fmt/format.h>

#include <cstring>

#include "driver_api.hpp"

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

bool encode_input_map(const ConvParams& p, const void* input, const std::array<unsigned, 4>& box, TensorMap* map) {
  static_assert(sizeof(TensorMap) == sizeof(CUtensorMap), "TensorMap mirrors CUtensorMap");
  if (reinterpret_cast<uintptr_t>(input) % 16 != 0 || p.w % 4 != 0) return false;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.w), static_cast<cuuint64_t>(p.h),
                              static_cast<cuuint64_t>(p.d), static_cast<cuuint64_t>(p.n * p.c)};
  const cuuint64_t strides[3] = {dims[0] * 4, dims[0] * dims[1] * 4, dims[0] * dims[1] * dims[2] * 4};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap encoded;
  check_cu(driver().cuTensorMapEncodeTiled(&encoded, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, const_cast<void*>(input), dims,
                                           strides, box.data(), element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeTiled");
  std::memcpy(map, &encoded, sizeof(encoded));
  return true;
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
  if (dynamic_shared > 48 * 1024) {
    check_cu(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(dynamic_shared)),
             "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  // Modules stay loaded for the life of the process (or context): functions handed out refer to them.
  return fn;
}

}  // namespace conv3djit::detail
