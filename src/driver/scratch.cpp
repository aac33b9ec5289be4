#include "driver/scratch.hpp"

#include <map>
#include <mutex>

namespace conv3djit::detail {
namespace {

// The device's scratch pool, made at its first use and kept for the life of the process (shared
// by every Engine: one pool's kept memory per device, not one per engine). Null where the device
// has no memory pools of its own to give: the driver's current pool serves then.
CUmemoryPool scratch_pool(CUdevice device) {
  static std::mutex mutex;
  static std::map<CUdevice, CUmemoryPool> pools;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = pools.find(device);
  if (it != pools.end()) return it->second;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  CUmemoryPool pool = nullptr;
  if (driver().cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS) {
    cuuint64_t keep = kScratchKeepBytes;
    check_cu(driver().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
             "cuMemPoolSetAttribute(RELEASE_THRESHOLD)");
  } else {
    pool = nullptr;
  }
  return pools.emplace(device, pool).first->second;
}

}  // namespace

Scratch::Scratch(uint64_t bytes, CUstream stream, CUdevice device) : stream_(stream) {
  if (CUmemoryPool pool = scratch_pool(device)) {
    check_cu(driver().cuMemAllocFromPoolAsync(&ptr_, bytes, pool, stream), "cuMemAllocFromPoolAsync");
  } else {
    check_cu(driver().cuMemAllocAsync(&ptr_, bytes, stream), "cuMemAllocAsync");
  }
}

Scratch::~Scratch() { driver().cuMemFreeAsync(ptr_, stream_); }

}  // namespace conv3djit::detail
