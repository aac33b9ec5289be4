#pragma once
// Plan: which kernel serves a Problem on a device, and how it is launched. The planner walks the
// registry of kernel families (plan/registry.cpp); only plan.key goes into the cubin.
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/common.cuh"
#include "core/problem.hpp"
#include "jit/spec_key.hpp"

namespace conv3djit::detail {

/// What the planner needs to know about the device. A key may depend on the arch's limits only
/// (compute capability, shared memory): they are the same for every device of an arch, so a key
/// planned without a GPU (limits_for_arch) is the key a device plans. sm_count sizes grids only.
struct DeviceLimits {
  int cc_major = 9, cc_minor = 0;
  int sm_count = 132;
  int max_smem_per_block_optin = 227 * 1024;
  int max_smem_per_sm = 228 * 1024;
};

/// Limits of every device of an arch ("sm_90"), for planning without a GPU (precompile); its
/// sm_count is a typical device's. Throws Error(InvalidArgument) for a malformed arch.
DeviceLimits limits_for_arch(const std::string& arch);

class Family;

/// A kernel that runs before the convolution on the same stream, writing `workspace_bytes` of
/// stream-ordered scratch memory that the convolution then reads in place of its weights
/// (Plan::prep) or its input (Plan::input_copy). Its arguments are the convolution's, with the
/// scratch memory as the output.
struct PrepPlan {
  SpecKey key;
  unsigned grid = 1, block = 1;
  uint64_t workspace_bytes = 0;
  // An input copy the kernel always reads (channels_last); without it, only where the input's
  // rows or alignment need one (Plan::copies_input).
  bool every_call = false;
  // Steps that move their tensors as TMA boxes: their two maps (of the input and of the scratch
  // `to`), passed after the five arguments.
  void (*tensor_maps)(const PrepPlan& step, const ConvParams& p, const void* in, void* to, CUtensorMap* in_map,
                      CUtensorMap* out_map) = nullptr;
  // The same step for an input off a 16-byte boundary, which no map can hold (null: this one
  // serves every input).
  std::shared_ptr<const PrepPlan> unaligned;

  /// The step that serves an input whose address is (or is not) 16-byte aligned.
  const PrepPlan& for_input(bool aligned) const { return aligned || !unaligned ? *this : *unaligned; }
};

struct Plan {
  SpecKey key;
  const Family* family = nullptr;  // the family that planned it (none: the fp64 reference)
  unsigned grid = 1, block = 1;
  unsigned shared_bytes = 0;  // dynamic shared memory
  ConvParams params{};
  std::optional<PrepPlan> prep;
  // Plans whose input staging needs a 16-byte aligned input (the tiled kernel's 16-byte copies,
  // depthwise's 16-byte loads): the same tiles staged 4 bytes at a time, for an input that is not.
  // (igemm_sm90's TMA boxes read such an input from a copy instead: input_copy_plan.)
  std::shared_ptr<const Plan> unaligned;
  // igemm_sm90 with TMA boxes: the input copied into rows of input_row_pitch(W) floats
  // (pitch_rows), which the box map then reads where copies_input says so; igemm_sm90_half on
  // NCDHW: the input channels-last, on every call.
  std::optional<PrepPlan> input_copy;
  // igemm_sm90 tf32 row tiles with output staging: the channels of a warp's box (0: none). They
  // store through a tensor map of the output where sm90_stores_boxed holds (tensor_map.hpp).
  int store_channels = 0;
  // Kernels that read the weight through a tensor map (igemm_sm90's raw weights), which needs it
  // on 16 bytes: a weight that is not is copied first (into scratch memory, on every such call).
  bool weight_map = false;

  /// The plan that runs an input (16-byte) aligned or not: this one or its twin.
  const Plan& for_input(bool aligned) const { return unaligned && !aligned ? *unaligned : *this; }
  /// Whether a call runs input_copy first: always for an every_call copy; else for rows that are
  /// not 16-byte multiples (W % 4 != 0, a tensor map's strides cannot step over them), or an input
  /// that is not 16-byte aligned.
  bool copies_input(bool aligned) const;
};

/// Floats between the rows of an input that TMA boxes read: W rounded up to a multiple of 4 (a
/// tensor map's strides are 16-byte multiples). Where that is not W every call copies the input.
inline int64_t input_row_pitch(int64_t w) { return (w + 3) / 4 * 4; }

inline bool Plan::copies_input(bool aligned) const {
  return input_copy && (input_copy->every_call || !aligned || input_row_pitch(params.w) != params.w);
}

/// The kernel and launch for prob on a device with these limits. `forced` (for experiments and
/// benchmarks) names a configuration of one family (plan/forced_config.hpp) instead of the
/// heuristic's choice; empty means the heuristic. Throws Error(InvalidArgument) for a malformed or
/// infeasible forced configuration.
Plan make_plan(const Problem& prob, const DeviceLimits& limits, const std::string& forced = "");

/// What one family of the registry made of a problem, in the planner's order.
struct FamilyVerdict {
  const Family* family = nullptr;
  /// Why it passed the problem on: its types ("serves ..."), its rules ("needs ..."), or its
  /// heuristic; empty for the family that took it.
  std::string passed;
};

/// make_plan's walk of the registry for prob (no forced configuration), with every family's
/// verdict up to the one that took it (the last in `verdicts`).
Plan explain_plan(const Problem& prob, const DeviceLimits& limits, std::vector<FamilyVerdict>* verdicts);

/// The plan of the fp64 reference kernel (Engine::run_reference).
Plan make_reference_plan(const Problem& prob, const DeviceLimits& limits);

}  // namespace conv3djit::detail
