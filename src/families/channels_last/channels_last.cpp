#include "families/channels_last/channels_last.hpp"

#include <memory>

#include "driver/tensor_map.hpp"
#include "plan/family.hpp"

namespace conv3djit::detail {
namespace {

const KernelDef& channels_last_def() {
  static const KernelDef def{"channels_last", "channels_last/channels_last.cu", 0, false,
                             {{"weights", FieldRole::Derived, "1: the weight, 0: the input"},
                              {"boxes", FieldRole::Derived, "1: tiles moved as TMA boxes (16-bit inputs, sm_90)"}}};
  return def;
}

// The boxes' maps: the input as (D·H·W, C, N) in boxes of 64 positions x 64 channels, the copy as
// (C, D·H·W, N) in boxes of 64 channels x 64 positions, both 128-byte swizzled as the kernel's
// tiles. Kept per thread while the tensors' addresses and extents stay the same.
void box_maps(const PrepPlan& step, const ConvParams& p, const void* in, void* to, CUtensorMap* in_map,
              CUtensorMap* out_map) {
  const CUtensorMapDataType type = operand_map_type(step.key.dtype, Precision::Fp32);
  const cuuint64_t positions = static_cast<cuuint64_t>(p.d * p.h * p.w), c = static_cast<cuuint64_t>(p.c);
  const cuuint64_t n = static_cast<cuuint64_t>(p.n);
  const cuuint32_t box[3] = {64, 64, 1}, element_strides[3] = {1, 1, 1};
  thread_local LastTensorMap last_in, last_out;
  *in_map = last_in.get(step.key, in, {p.n, p.c, p.d, p.h, p.w}, [&] {
    const cuuint64_t dims[3] = {positions, c, n}, strides[2] = {positions * 2, positions * c * 2};
    return encode_tiled_map(type, 3, in, dims, strides, box, element_strides, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  });
  *out_map = last_out.get(step.key, to, {p.n, p.c, p.d, p.h, p.w}, [&] {
    const cuuint64_t dims[3] = {c, positions, n}, strides[2] = {c * 2, positions * c * 2};
    return encode_tiled_map(type, 3, to, dims, strides, box, element_strides, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  });
}

}  // namespace

PrepPlan channels_last_plan(const ConvParams& p, DataType dtype, ChannelsLastTensor tensor, const DeviceLimits& limits) {
  const bool weights = tensor == ChannelsLastTensor::Weight;
  const long long batches = weights ? p.k : p.n, channels = weights ? p.c_per_group : p.c;
  const long long positions = weights ? static_cast<long long>(p.kd) * p.kh * p.kw : p.d * p.h * p.w;
  PrepPlan step;
  step.key.kernel = &channels_last_def();
  step.key.dtype = dtype;
  step.key.out_dtype = dtype;
  step.key.config[0] = weights ? 1 : 0;
  step.block = 256;
  const long long tiles = batches * ceil_div(channels, 64) * ceil_div(positions, 64);
  step.grid = stride_grid(tiles * step.block, step.block, limits, 8);  // a block per 64 x 64 tile
  step.workspace_bytes = static_cast<uint64_t>(batches * channels * positions) * static_cast<uint64_t>(element_bytes(dtype));
  step.every_call = true;
  // 16-bit inputs whose planes lie on 16 bytes (a map's strides) move as TMA boxes; an input off a
  // 16-byte boundary takes the copy above.
  if (!weights && element_bytes(dtype) == 2 && limits.cc_major >= 9 && positions % 8 == 0) {
    PrepPlan boxed = step;
    boxed.key.config[1] = 1;
    boxed.block = 128;
    boxed.grid = stride_grid(tiles * boxed.block, boxed.block, limits, 6);  // 33 KB of tiles a block
    boxed.tensor_maps = &box_maps;
    boxed.unaligned = std::make_shared<const PrepPlan>(step);
    return boxed;
  }
  return step;
}

}  // namespace conv3djit::detail
