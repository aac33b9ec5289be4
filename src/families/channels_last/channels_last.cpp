#include "families/channels_last/channels_last.hpp"

#include "plan/family.hpp"

namespace conv3djit::detail {

PrepPlan channels_last_plan(const ConvParams& p, DataType dtype, ChannelsLastTensor tensor, const DeviceLimits& limits) {
  static const KernelDef def{"channels_last", "channels_last/channels_last.cu", 0, false,
                             {{"weights", FieldRole::Derived, "1: the weight, 0: the input"}}};
  const bool weights = tensor == ChannelsLastTensor::Weight;
  const long long batches = weights ? p.k : p.n, channels = weights ? p.c_per_group : p.c;
  const long long positions = weights ? static_cast<long long>(p.kd) * p.kh * p.kw : p.d * p.h * p.w;
  PrepPlan step;
  step.key.kernel = &def;
  step.key.dtype = dtype;
  step.key.out_dtype = dtype;
  step.key.config[0] = weights ? 1 : 0;
  step.block = 256;
  const long long tiles = batches * ceil_div(channels, 64) * ceil_div(positions, 64);
  step.grid = stride_grid(tiles * step.block, step.block, limits, 8);  // a block per 64 x 64 tile
  step.workspace_bytes = static_cast<uint64_t>(batches * channels * positions) * static_cast<uint64_t>(element_bytes(dtype));
  step.every_call = true;
  return step;
}

}  // namespace conv3djit::detail
