#pragma once
// Stream-ordered scratch memory for the steps before a convolution (pitched input copies,
// prepared weights), from a memory pool of conv3djit's own per device.
#include <cstdint>

#include "driver/driver_api.hpp"

namespace conv3djit::detail {

/// The pool keeps up to this much memory mapped across synchronizations. The driver's default
/// pool keeps none: every call after a synchronize mapped its scratch afresh, about 60 us of host
/// time on an H200, which a loop that synchronizes per step (the common inference loop) paid on
/// every call. Beyond it the pool gives memory back at the next synchronization.
inline constexpr uint64_t kScratchKeepBytes = 256ull << 20;

/// One call's scratch on `stream`: concurrent calls on other streams and graph capture stay safe.
/// Freed on the stream once the call's work is queued, or when a step throws.
class Scratch {
 public:
  Scratch(uint64_t bytes, CUstream stream, CUdevice device);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  CUdeviceptr ptr() const { return ptr_; }

 private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_;
};

}  // namespace conv3djit::detail
