#include "families/igemm_sm90/tensor_map.hpp"

#include "driver/tensor_map.hpp"
#include "families/igemm_sm90/config.hpp"
#include "igemm_sm90/geometry.cuh"

namespace conv3djit::detail {

bool uses_tensor_map(const Plan& plan) { return kSm90Table.load(plan.key.config).tma == 1; }

namespace {

// The tf32 class's float32 inputs arrive rounded (operand_map_type), and the gather hands the
// tile's values on as they are; the fp32 class splits the full value, and a half input's float32
// copy is exact in TF32.
CUtensorMapDataType input_map_type(const SpecKey& k) {
  return operand_map_type(DataType::Float32, k.dtype == DataType::Float32 ? k.precision : Precision::Fp32);
}

// Tiles across images: (W, C, H, D, N), boxes of `rows` rows x CC channels x the row.
CUtensorMap encode_across(const Plan& plan, const void* input, int rows) {
  const ConvParams& p = plan.params;
  const Sm90Config c = kSm90Table.load(plan.key.config);
  const cuuint64_t row = static_cast<cuuint64_t>(input_row_pitch(p.w)) * sizeof(float);
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.w), static_cast<cuuint64_t>(p.c), static_cast<cuuint64_t>(p.h),
                              static_cast<cuuint64_t>(p.d), static_cast<cuuint64_t>(p.n)};
  const cuuint64_t plane = row * dims[2], channel = plane * dims[3];
  const cuuint64_t strides[4] = {channel, row, plane, channel * dims[1]};
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(c.tw), static_cast<cuuint32_t>(c.cc),
                             static_cast<cuuint32_t>(rows), 1, 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  return encode_tiled_map(input_map_type(plan.key), 5, input, dims, strides, box, element_strides,
                          CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
}

CUtensorMap encode(const Plan& plan, const void* input) {
  const ConvParams& p = plan.params;
  const SpecKey& k = plan.key;
  const Sm90Config c = kSm90Table.load(k.config);
  if (c.across) return encode_across(plan, input, c.th);
  // Floats: a float32 input, or pitch_rows' float32 copy of a half one.
  const uint64_t bytes = sizeof(float);
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.w), static_cast<cuuint64_t>(p.h),
                              static_cast<cuuint64_t>(p.d), static_cast<cuuint64_t>(p.c),
                              static_cast<cuuint64_t>(p.n)};
  cuuint64_t strides[4];  // bytes, of dims 1..4
  strides[0] = static_cast<cuuint64_t>(input_row_pitch(p.w)) * bytes;
  for (int i = 1; i < 4; ++i) strides[i] = strides[i - 1] * dims[i];
  // The box: RP (its row) x PP / RP rows x planes x CC channels. Along D it steps by the dilation:
  // KD planes from a box KD x DD planes deep; with PL > 1 output planes a tile (unit dilation),
  // KD + PL - 1 planes.
  const cuuint32_t planes = static_cast<cuuint32_t>(sm90_input_planes(k.kd, c.planes) * k.dd);
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(c.rp), static_cast<cuuint32_t>(c.pp / c.rp), planes,
                             static_cast<cuuint32_t>(c.cc), 1};
  const cuuint32_t element_strides[5] = {1, 1, static_cast<cuuint32_t>(k.dd), 1, 1};
  return encode_tiled_map(input_map_type(k), 5, input, dims, strides, box, element_strides,
                          CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
}

CUtensorMap encode_output(const Plan& plan, const void* output) {
  const ConvParams& p = plan.params;
  // A warp's staging box (igemm_sm90/geometry.cuh): 16 positions x PL planes x its channels.
  const cuuint32_t box[4] = {16, static_cast<cuuint32_t>(kSm90Table.load(plan.key.config).planes),
                             static_cast<cuuint32_t>(plan.store_channels), 1};
  return encode_output_planes(plan.key.out_dtype, output, p.n, p.k, p.od, p.oh * p.ow, box,
                              CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace

const CUtensorMap& input_tensor_map(const Plan& plan, const void* input) {
  thread_local LastTensorMap last;
  const ConvParams& p = plan.params;
  return last.get(plan.key, input, {p.n, p.c, p.d, p.h, p.w}, [&] { return encode(plan, input); });
}

const CUtensorMap& input_row_map(const Plan& plan, const void* input) {
  thread_local LastTensorMap last;
  const ConvParams& p = plan.params;
  return last.get(plan.key, input, {p.n, p.c, p.d, p.h, p.w}, [&] { return encode_across(plan, input, 1); });
}

const CUtensorMap& weight_tensor_map(const Plan& plan, const void* weight) {
  thread_local LastTensorMap last;
  const ConvParams& p = plan.params;
  const long long kred = static_cast<long long>(p.c_per_group) * p.kd * p.kh * p.kw;
  return last.get(plan.key, weight, {p.k, kred}, [&] {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kred), static_cast<cuuint64_t>(p.k)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kred) * sizeof(float)};
    const cuuint32_t box[2] = {32, static_cast<cuuint32_t>(kSm90Table.load(plan.key.config).bn)};
    const cuuint32_t element_strides[2] = {1, 1};
    return encode_tiled_map(operand_map_type(DataType::Float32, plan.key.precision), 2, weight, dims, strides, box,
                            element_strides, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  });
}

// Staged boxes where the kernel stores them by TMA (its `bulk`); else its warps copy them out.
bool uses_output_map(const Plan& plan, const void* output) {
  const Sm90Config c = kSm90Table.load(plan.key.config);
  return plan.store_channels > 0 &&
         sm90_stores_staged(c.rows, c.tw, plan.params.ow, plan.params.oh * plan.params.ow,
                            reinterpret_cast<unsigned long long>(output), element_bytes(plan.key.out_dtype));
}

const CUtensorMap& output_tensor_map(const Plan& plan, void* output) {
  thread_local LastTensorMap last;
  const ConvParams& p = plan.params;
  return last.get(plan.key, output, {p.n, p.k, p.od, p.oh, p.ow}, [&] { return encode_output(plan, output); });
}

}  // namespace conv3djit::detail
