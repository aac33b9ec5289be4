#include "driver/driver_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <mutex>

#include "conv3djit/error.hpp"
#include "core/log.hpp"

namespace conv3djit::detail {
namespace {

constexpr int kDriverAbiVersion = 12000;

DriverApi load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    throw Error(ErrorCategory::NoDevice,
                fmt::format("no CUDA driver found (dlopen libcuda.so.1: {})", why ? why : "?"));
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    throw Error(ErrorCategory::NoDevice,
                "no usable CUDA driver: libcuda.so.1 lacks cuGetProcAddress_v2 (driver older than CUDA 12)");
  }
  DriverApi api;
  // Resolve each name as CUDA 12.0 defined it: that is the signature the header's unsuffixed
  // declarations (decltype above) have for every function here. Asking for CUDA_VERSION would
  // hand back 13.0's cuCtxGetDevice_v2 / cuCtxSynchronize_v2, which take an extra argument.
#define CONV3DJIT_RESOLVE(name)                                                                 \
  {                                                                                             \
    void* fn = nullptr;                                                                         \
    CUdriverProcAddressQueryResult status{};                                                    \
    CUresult r = get_proc(#name, &fn, kDriverAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);      \
    if (r != CUDA_SUCCESS || fn == nullptr) {                                                   \
      throw Error(ErrorCategory::NoDevice,                                                      \
                  fmt::format("CUDA driver lacks {} (driver older than CUDA {}?)", #name,      \
                              kDriverAbiVersion));                                                 \
    }                                                                                           \
    api.name = reinterpret_cast<decltype(api.name)>(fn);                                        \
  }
  CONV3DJIT_DRIVER_FUNCTIONS(CONV3DJIT_RESOLVE)
#undef CONV3DJIT_RESOLVE
  const CUresult init = api.cuInit(0);
  if (init == CUDA_ERROR_NO_DEVICE) throw Error(ErrorCategory::NoDevice, "no CUDA device (cuInit)");
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    api.cuGetErrorName(init, &name);
    throw Error(ErrorCategory::DriverError, fmt::format("cuInit failed: {}", name ? name : "?"));
  }
  int version = 0;
  api.cuDriverGetVersion(&version);
  log().debug("loaded CUDA driver {}.{}", version / 1000, (version % 1000) / 10);
  return api;
}

std::atomic<const DriverApi*> g_fake_driver{nullptr};

}  // namespace

void set_driver_for_testing(const DriverApi* fake) noexcept { g_fake_driver.store(fake); }

const DriverApi& driver() {
  if (const DriverApi* fake = g_fake_driver.load(std::memory_order_acquire)) return *fake;
  // A failed load is retried on the next call (the exception propagates out of call_once), so a
  // process that gains a driver later is not stuck; the success is cached.
  static std::once_flag once;
  static DriverApi api;
  std::call_once(once, [] { api = load_driver(); });
  return api;
}

std::string cu_error_text(CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverApi& d = driver();
  d.cuGetErrorName(result, &name);
  d.cuGetErrorString(result, &text);
  return fmt::format("{}: {}", name ? name : fmt::format("CUresult {}", static_cast<int>(result)),
                     text ? text : "unknown error");
}

void check_cu(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) {
    throw Error(ErrorCategory::DriverError, fmt::format("{} failed: {}", what, cu_error_text(result)));
  }
}

}  // namespace conv3djit::detail
