// Several devices in one process, on the CPU: a fake Driver API with two contexts (two "GPUs" of
// one arch) stands in for libcuda. It proves the per-context design: each specialisation is
// compiled once per arch and loaded once per context, every launch uses a function loaded into
// the context of the caller's stream, and threads on both devices can call at once.
#include <cstdio>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "catch.hpp"
#include "conv3djit/engine.hpp"
#include "driver/driver_api.hpp"
#include "driver/module_loader.hpp"
#include "driver/scratch.hpp"

using namespace conv3djit;

namespace {

// Handles are small integers cast to pointers: context 1 and 2, streams 11 and 12 (in context 1
// and 2), modules and functions 1000 * context + n. A context "recreated" under its old handle
// gets a new ID and loses its modules, as after cuCtxDestroy + cuCtxCreate.
CUcontext ctx_handle(int i) { return reinterpret_cast<CUcontext>(static_cast<uintptr_t>(i)); }
int ctx_index(CUcontext c) { return static_cast<int>(reinterpret_cast<uintptr_t>(c)); }
CUstream stream_of(int ctx) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(10 + ctx)); }

struct FakeState {
  std::mutex mutex;
  std::map<int, int> module_loads;  // per context
  std::atomic<int> launches{0}, wrong_context_launches{0}, next_module{0};
  std::atomic<int> allocations{0}, frees{0}, maps{0}, default_pool_allocations{0};
  std::map<int, uint64_t> pool_keep;  // per device: its scratch pool's release threshold
  std::map<int, unsigned long long> generation;  // per context: its ID is 100 * generation + index
  std::map<uintptr_t, int> modules;              // live module -> context
  std::atomic<int> stale_launches{0};
} state;
thread_local std::vector<CUcontext> current_stack{nullptr};

CUresult ctx_get_current(CUcontext* c) { *c = current_stack.back(); return CUDA_SUCCESS; }
CUresult ctx_set_current(CUcontext c) { current_stack.back() = c; return CUDA_SUCCESS; }
CUresult ctx_push(CUcontext c) { current_stack.push_back(c); return CUDA_SUCCESS; }
CUresult ctx_pop(CUcontext* c) {
  *c = current_stack.back();
  current_stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult ctx_get_device(CUdevice* d) { *d = ctx_index(current_stack.back()) - 1; return CUDA_SUCCESS; }
CUresult ctx_get_id(CUcontext c, unsigned long long* id) {
  std::lock_guard<std::mutex> lock(state.mutex);
  *id = 100 * state.generation[ctx_index(c)] + static_cast<unsigned long long>(ctx_index(c));
  return CUDA_SUCCESS;
}
void recreate_context(int ctx) {
  std::lock_guard<std::mutex> lock(state.mutex);
  ++state.generation[ctx];
  for (auto it = state.modules.begin(); it != state.modules.end();) {
    it = it->second == ctx ? state.modules.erase(it) : std::next(it);
  }
}
CUresult stream_get_ctx(CUstream s, CUcontext* c) {
  *c = ctx_handle(static_cast<int>(reinterpret_cast<uintptr_t>(s)) - 10);
  return CUDA_SUCCESS;
}
CUresult device_attribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 227 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 228 * 1024; break;
    default: *v = 0;
  }
  return CUDA_SUCCESS;
}
// What a plan's lookup of tuned records asks of the device.
CUresult device_get_name(char* name, int length, CUdevice) {
  std::snprintf(name, static_cast<size_t>(length), "fake sm_90");
  return CUDA_SUCCESS;
}
CUresult driver_get_version(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult module_load(CUmodule* m, const void* image) {
  const int ctx = ctx_index(current_stack.back());
  if (ctx == 0 || image == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(state.mutex);
  ++state.module_loads[ctx];
  const uintptr_t handle = static_cast<uintptr_t>(1000 * ctx + ++state.next_module);
  state.modules[handle] = ctx;
  *m = reinterpret_cast<CUmodule>(handle);
  return CUDA_SUCCESS;
}
CUresult module_get_function(CUfunction* f, CUmodule m, const char*) {
  *f = reinterpret_cast<CUfunction>(m);  // remembers the module, hence the context
  return CUDA_SUCCESS;
}
// Every function has static_shared bytes of static shared memory; opt-ins (the dynamic bytes asked
// for) are recorded.
std::atomic<int> static_shared{0};
std::vector<int> opt_ins;
CUresult func_get_attribute(int* v, CUfunction_attribute a, CUfunction) {
  *v = a == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES ? static_shared.load() : 0;
  return CUDA_SUCCESS;
}
CUresult func_set_attribute(CUfunction, CUfunction_attribute a, int v) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) opt_ins.push_back(v);
  return CUDA_SUCCESS;
}
CUresult launch(CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream s,
                void**, void**) {
  CUcontext stream_ctx = nullptr;
  stream_get_ctx(s, &stream_ctx);
  if (static_cast<int>(reinterpret_cast<uintptr_t>(f) / 1000) != ctx_index(stream_ctx)) ++state.wrong_context_launches;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.modules.count(reinterpret_cast<uintptr_t>(f)) == 0) ++state.stale_launches;
  }
  ++state.launches;
  return CUDA_SUCCESS;
}

// Stream-ordered scratch memory (the wgmma kernel's prepared weights and pitched input copies),
// from conv3djit's pool of each device (handle: 0x100 + device), not the driver's default pool.
CUresult mem_pool_create(CUmemoryPool* pool, const CUmemPoolProps* props) {
  *pool = reinterpret_cast<CUmemoryPool>(static_cast<uintptr_t>(0x100 + props->location.id));
  return CUDA_SUCCESS;
}
CUresult mem_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (attribute == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
    state.pool_keep[static_cast<int>(reinterpret_cast<uintptr_t>(pool) - 0x100)] = *static_cast<cuuint64_t*>(value);
  }
  return CUDA_SUCCESS;
}
CUresult mem_alloc_from_pool_async(CUdeviceptr* p, size_t bytes, CUmemoryPool, CUstream) {
  *p = bytes > 0 ? 0x1000 : 0;
  ++state.allocations;
  return CUDA_SUCCESS;
}
CUresult mem_alloc_async(CUdeviceptr* p, size_t bytes, CUstream) {
  *p = bytes > 0 ? 0x1000 : 0;
  ++state.default_pool_allocations;
  return CUDA_SUCCESS;
}
CUresult mem_free_async(CUdeviceptr, CUstream) {
  ++state.frees;
  return CUDA_SUCCESS;
}

// The TMA maps (of the pitched input copies: W = 17, rows of 20 floats).
CUresult tensor_map_encode(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                           const cuuint64_t* strides, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                           CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  if (strides[0] % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  ++state.maps;
  return CUDA_SUCCESS;
}

// Allocations, for the check that each tensor lies inside its own: base -> (size, mapped with the
// virtual memory API). A pointer outside all of them is no device memory. The tests' host buffers
// stand in for device memory; without an entry a range covers everything from the pointer on.
std::map<uintptr_t, std::pair<size_t, bool>> allocation_table;
bool strict_ranges = false;
CUresult mem_get_address_range(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  for (const auto& [b, entry] : allocation_table) {
    if (p >= b && p < b + entry.first) {
      *base = b;
      *size = entry.first;
      return CUDA_SUCCESS;
    }
  }
  if (strict_ranges) return CUDA_ERROR_NOT_FOUND;
  *base = p;
  *size = size_t{1} << 40;
  return CUDA_SUCCESS;
}
CUresult mem_retain_allocation_handle(CUmemGenericAllocationHandle* handle, void* p) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (mem_get_address_range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS ||
      allocation_table.count(base) == 0 || !allocation_table[base].second) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *handle = base;
  return CUDA_SUCCESS;
}
CUresult mem_release(CUmemGenericAllocationHandle) { return CUDA_SUCCESS; }

detail::DriverApi fake_driver() {
  detail::DriverApi api;
  api.cuCtxGetCurrent = ctx_get_current;
  api.cuCtxSetCurrent = ctx_set_current;
  api.cuCtxPushCurrent = ctx_push;
  api.cuCtxPopCurrent = ctx_pop;
  api.cuCtxGetDevice = ctx_get_device;
  api.cuStreamGetCtx = stream_get_ctx;
  api.cuCtxGetId = ctx_get_id;
  api.cuDeviceGetAttribute = device_attribute;
  api.cuDeviceGetName = device_get_name;
  api.cuDriverGetVersion = driver_get_version;
  api.cuModuleLoadData = module_load;
  api.cuModuleGetFunction = module_get_function;
  api.cuFuncGetAttribute = func_get_attribute;
  api.cuFuncSetAttribute = func_set_attribute;
  api.cuLaunchKernel = launch;
  api.cuMemPoolCreate = mem_pool_create;
  api.cuMemPoolSetAttribute = mem_pool_set_attribute;
  api.cuMemAllocFromPoolAsync = mem_alloc_from_pool_async;
  api.cuMemAllocAsync = mem_alloc_async;
  api.cuMemFreeAsync = mem_free_async;
  api.cuTensorMapEncodeTiled = tensor_map_encode;
  api.cuMemGetAddressRange = mem_get_address_range;
  api.cuMemRetainAllocationHandle = mem_retain_allocation_handle;
  api.cuMemRelease = mem_release;
  return api;
}

// Serves the fake driver to the library for a scope.
struct FakeDriverScope {
  FakeDriverScope() {
    static const detail::DriverApi api = fake_driver();
    detail::set_driver_for_testing(&api);
  }
  ~FakeDriverScope() { detail::set_driver_for_testing(nullptr); }
};

EngineOptions memory_only() {
  EngineOptions options;
  options.disk_cache = false;
  return options;
}

Conv3dDesc shape(int64_t c, int64_t k, Dims3 kernel, int64_t groups = 1) {
  Conv3dDesc d;
  d.n = 2; d.c = c; d.d = 6; d.h = 9; d.w = 17; d.k = k; d.kernel = kernel; d.groups = groups; d.padding = 1;
  return d;
}

}  // namespace

TEST_CASE("two contexts: one compile per kernel, one load per kernel and context, right-device launches") {
  FakeDriverScope fake;
  Engine engine(memory_only());
  // On both devices: wgmma with its weights resident, grouped, and wgmma with channel chunks,
  // which launches a weight preparation kernel first; both wgmma shapes (W = 17) first copy their
  // input into rows of 20 floats for TMA boxes (pitch_rows: five kernels in all).
  const std::vector<Conv3dDesc> shapes = {shape(3, 16, {3, 5, 7}), shape(8, 8, {3, 3, 3}, 8),
                                          shape(32, 32, {3, 3, 3})};
  const size_t kernels = shapes.size() + 2;
  static float dummy[4];
  const Conv3dTensors tensors{dummy, dummy, nullptr, dummy};
  constexpr int kCallsPerThread = 30;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {  // 2 threads per device, mixed shapes, all at once
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        engine.run(shapes[(t + i) % shapes.size()], tensors, stream_of(1 + t % 2));
      }
    });
  }
  for (auto& th : threads) th.join();

  const EngineStats s = engine.stats();
  CHECK(engine.kernel_for(shapes[2], "sm_90").find("igemm_sm90 fp32 ncdhw class=fp32 epi=bias cg=32 ") == 0);
  const int chunked_calls = 4 * kCallsPerThread / static_cast<int>(shapes.size());
  const int pitched_calls = 2 * chunked_calls;
  const int launches = 4 * kCallsPerThread + chunked_calls + pitched_calls;  // + their preparation launches
  CHECK(s.compiles == kernels);          // once per arch, not per device
  CHECK(s.module_loads == 2 * kernels);  // once per kernel and context
  CHECK(state.module_loads[1] == static_cast<int>(kernels));
  CHECK(state.module_loads[2] == static_cast<int>(kernels));
  CHECK(state.launches.load() == launches);
  CHECK(state.wrong_context_launches.load() == 0);
  CHECK(state.maps.load() >= 2);  // the input maps of the copies
  CHECK(state.allocations.load() == chunked_calls + pitched_calls);
  CHECK(state.frees.load() == chunked_calls + pitched_calls);
  // Scratch comes from the pool of each device, which keeps its memory across synchronizations.
  CHECK(state.default_pool_allocations.load() == 0);
  CHECK(state.pool_keep == std::map<int, uint64_t>{{0, detail::kScratchKeepBytes}, {1, detail::kScratchKeepBytes}});
  CHECK(s.memory_hits == launches - 2 * kernels);
}

TEST_CASE("a TMA plan copies its input first only for rows of W % 4 != 0 or an input not 16-byte aligned") {
  FakeDriverScope fake;
  Engine engine(memory_only());
  alignas(16) static float buffer[8];
  const Conv3dTensors aligned{buffer, buffer, nullptr, buffer}, shifted{buffer + 1, buffer, nullptr, buffer};
  Conv3dDesc w20 = shape(3, 16, {3, 5, 7});
  w20.w = 20;
  REQUIRE(engine.kernel_for(w20, "sm_90").find("igemm_sm90 ") == 0);
  // Counts of launches, allocations and compiles after each call, from these starting values.
  const int launches = state.launches.load(), allocations = state.allocations.load(), frees = state.frees.load();
  auto after = [&](const Conv3dDesc& d, const Conv3dTensors& t) {
    engine.run(d, t, stream_of(1));
    return std::make_tuple(state.launches.load() - launches, state.allocations.load() - allocations,
                           static_cast<int>(engine.stats().compiles));
  };
  CHECK(after(w20, aligned) == std::make_tuple(1, 0, 1));   // the convolution alone
  CHECK(after(w20, shifted) == std::make_tuple(3, 1, 2));   // pitch_rows, then the convolution
  CHECK(after(w20, aligned) == std::make_tuple(4, 1, 2));
  // W = 17 (the same convolution kernel): copied whatever the input's alignment.
  const Conv3dDesc w17 = shape(3, 16, {3, 5, 7});
  CHECK(engine.kernel_for(w17, "sm_90") == engine.kernel_for(w20, "sm_90"));
  CHECK(after(w17, aligned) == std::make_tuple(6, 2, 2));
  CHECK(state.frees.load() - frees == 2);  // each copy's scratch memory freed on the stream
}

TEST_CASE("padding runs in the convolution's one launch, without scratch, and each mode has its own plan") {
  FakeDriverScope fake;
  Engine engine(memory_only());
  alignas(16) static float buffer[8];
  const Conv3dTensors tensors{buffer, buffer, nullptr, buffer};
  const int launches = state.launches.load(), allocations = state.allocations.load();
  auto after = [&](const Conv3dDesc& d) {
    engine.run(d, tensors, stream_of(1));
    return std::make_tuple(state.launches.load() - launches, state.allocations.load() - allocations,
                           static_cast<int>(engine.stats().compiles));
  };
  // Causal (zeros before in time only), then the same layer replicate- and reflect-padded: the
  // same description but for the mode, so a plan cached for one mode must not serve another.
  Conv3dDesc d = shape(3, 16, {3, 5, 7});
  d.w = 20;
  d.padding = Padding::per_side({2, 2, 3}, {0, 2, 3});
  CHECK(after(d) == std::make_tuple(1, 0, 1));
  d.padding_mode = PaddingMode::Replicate;
  CHECK(after(d) == std::make_tuple(2, 0, 2));
  d.padding_mode = PaddingMode::Reflect;
  CHECK(after(d) == std::make_tuple(3, 0, 3));
  CHECK(after(d) == std::make_tuple(4, 0, 3));
  // W = 17: zero padding's TMA boxes read a pitched copy of the input (a launch and scratch
  // more); the other modes read the input where it is.
  d.w = 17;
  CHECK(std::get<0>(after(d)) == 5);
  CHECK(std::get<1>(after(d)) == 0);
  d.padding_mode = PaddingMode::Zeros;
  CHECK(std::get<1>(after(d)) == 1);
}

TEST_CASE("a context recreated under its old handle gets its kernels loaded again, not stale ones") {
  FakeDriverScope fake;
  Engine engine(memory_only());
  const Conv3dDesc d = shape(8, 8, {3, 3, 3}, 8);
  static float dummy[4];
  const Conv3dTensors tensors{dummy, dummy, nullptr, dummy};
  const int stale_before = state.stale_launches.load();
  engine.run(d, tensors, stream_of(1));
  engine.run(d, tensors, stream_of(1));
  const uint64_t loads = engine.stats().module_loads;
  recreate_context(1);
  engine.run(d, tensors, stream_of(1));
  CHECK(engine.stats().module_loads == loads + 1);  // loaded into the new context
  CHECK(engine.stats().compiles == 1);               // the cubin is still good
  CHECK(state.stale_launches.load() == stale_before);
}

TEST_CASE("a kernel opts in to its dynamic shared memory where static and dynamic pass 48 KB together") {
  FakeDriverScope fake;
  detail::KernelBinary binary;
  binary.lowered_name = "k";
  binary.cubin = "image";
  const auto opt_ins_for = [&](int static_bytes, unsigned dynamic_bytes) {
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      opt_ins.clear();
    }
    static_shared = static_bytes;
    detail::load_kernel(ctx_handle(1), binary, dynamic_bytes);
    std::lock_guard<std::mutex> lock(state.mutex);
    return opt_ins;
  };
  CHECK(opt_ins_for(0, 45360).empty());
  CHECK(opt_ins_for(0, 49152).empty());
  CHECK(opt_ins_for(0, 49153) == std::vector<int>{49153});
  // The grouped kernel's weights (4320 bytes, static) beside a 45360-byte ring: 49680 together.
  CHECK(opt_ins_for(4320, 45360) == std::vector<int>{45360});
  CHECK(opt_ins_for(3792, 45360).empty());  // 49152 together
  static_shared = 0;
}

TEST_CASE("a tensor past the end of its allocation is invalid_argument, and nothing is launched") {
  FakeDriverScope fake;
  Engine engine(memory_only());
  const Conv3dDesc d = shape(8, 8, {3, 3, 3}, 8);  // input 2x8x6x9x17, weight 8x1x3x3x3, output as input
  const size_t input_bytes = 2 * 8 * 6 * 9 * 17 * 4, weight_bytes = 8 * 27 * 4;
  // Fake device addresses: nothing is dereferenced before a launch, and no launch reads them.
  const uintptr_t in = 0x10000000, wt = 0x20000000, out = 0x30000000, vmm = 0x40000000;
  allocation_table = {{in, {input_bytes, false}}, {wt, {weight_bytes, false}}, {out, {input_bytes, false}}};
  strict_ranges = true;
  const auto ptr = [](uintptr_t p) { return reinterpret_cast<void*>(p); };
  const int launches = state.launches.load();
  const auto refusal = [&](const Conv3dDesc& desc, const Conv3dTensors& t) -> std::string {
    try {
      engine.run(desc, t, stream_of(1));
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::InvalidArgument);
      return e.what();
    }
    return "";
  };
  const Conv3dTensors fits{ptr(in), ptr(wt), nullptr, ptr(out)};
  CHECK(refusal(d, fits).empty());
  CHECK(state.launches.load() == launches + 1);

  Conv3dDesc bigger = d;
  bigger.n = int64_t{1} << 40;  // the batch of the crash: far beyond the buffers
  const std::string what = refusal(bigger, fits);
  INFO(what);
  CHECK(what.find("input = 0x10000000 needs ") != std::string::npos);
  CHECK(what.find(std::to_string(input_bytes) + " bytes from 0x10000000") != std::string::npos);
  // One element short in the output, the weight offset by one element: each named.
  CHECK(refusal(d, {ptr(in), ptr(wt), nullptr, ptr(out + 4)}).find("output = 0x30000004 needs") != std::string::npos);
  CHECK(refusal(d, {ptr(in), ptr(wt + 4), nullptr, ptr(out)}).find("weight = 0x20000004 needs") != std::string::npos);
  CHECK(refusal(d, {ptr(in), ptr(0x50000000), nullptr, ptr(out)}).find("weight = 0x50000000: not device memory") !=
        std::string::npos);
  CHECK(state.launches.load() == launches + 1);

  // Mapped with the virtual memory API in two pieces, as PyTorch's expandable segments grow: the
  // range of the first piece alone is too small, yet the tensor is whole.
  allocation_table[vmm] = {input_bytes / 2, true};
  allocation_table[vmm + input_bytes / 2] = {input_bytes - input_bytes / 2, true};
  CHECK(refusal(d, {ptr(vmm), ptr(wt), nullptr, ptr(out)}).empty());
  CHECK(state.launches.load() == launches + 2);

  // A caller that checked the shapes itself (the Python binding, from the arrays): not asked again.
  Conv3dTensors vouched{ptr(in), ptr(wt + 4), nullptr, ptr(out)};
  vouched.shapes_checked = true;
  CHECK(refusal(d, vouched).empty());
  CHECK(state.launches.load() == launches + 3);

  // The check off: the description is believed.
  EngineOptions unchecked = memory_only();
  unchecked.check_allocations = false;
  Engine trusting(unchecked);
  CHECK_NOTHROW(trusting.run(d, {ptr(in), ptr(wt + 4), nullptr, ptr(out)}, stream_of(1)));
  strict_ranges = false;
  allocation_table.clear();
}
