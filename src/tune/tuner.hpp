#pragma once
// Timing candidate plans on the device: scratch tensors of the tuner's own filled with a fixed
// pattern, a stream of its own, one warm-up launch per candidate checked against the float64
// reference on sampled outputs, then the median of timed launches.
#include <cuda.h>

#include <functional>
#include <vector>

#include "conv3djit/engine.hpp"
#include "tune/candidates.hpp"
#include "tune/record.hpp"

namespace conv3djit::detail {

/// The device a record is keyed by.
DeviceIdentity identify_device(CUdevice device);

/// Whether work queued on stream now would be captured into a CUDA graph instead of running.
bool stream_capturing(CUstream stream);

/// What the tuner needs from the Engine: make a plan's kernels ready (compile or read them, load
/// them into the context; safe to call from several threads at once) and launch one plan.
struct TuneHooks {
  std::function<void(const Plan&)> prepare;
  std::function<void(const Plan&, const Conv3dTensors&, CUstream)> launch;
};

/// Times candidates (the first always; the others while options.budget_ms lasts) in ctx and
/// returns one TunedCandidate each, in their order. Throws Error(DriverError) when the scratch
/// tensors cannot be had (out of memory).
std::vector<TunedCandidate> time_candidates(const Problem& prob, const std::vector<Candidate>& candidates,
                                            const TuneOptions& options, CUcontext ctx, const TuneHooks& hooks);

}  // namespace conv3djit::detail
