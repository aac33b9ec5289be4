#include "tensor_map.hpp"

#include <cstring>

#include "driver_api.hpp"
#include "tile_geometry.cuh"

namespace conv3djit::detail {

bool uses_tensor_map(const Plan& plan) {
  return plan.key.algorithm == Algorithm::ImplicitGemmSm90 && plan.key.config[7] == 1;
}

namespace {

// An fp32 tensor of `rank` dimensions (innermost first; strides in bytes of dims 1..rank-1) in
// boxes of `box` elements, unswizzled, out-of-bounds elements zero.
CUtensorMap tiled_map(cuuint32_t rank, const void* base, const cuuint64_t* dims, const cuuint64_t* strides,
                      const cuuint32_t* box, const cuuint32_t* element_strides, CUtensorMapL2promotion promotion) {
  CUtensorMap map{};
  check_cu(driver().cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, const_cast<void*>(base), dims,
                                           strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           CU_TENSOR_MAP_SWIZZLE_NONE, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeTiled");
  return map;
}

CUtensorMap encode(const Plan& plan, const void* input) {
  const ConvParams& p = plan.params;
  const SpecKey& k = plan.key;
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.w), static_cast<cuuint64_t>(p.h),
                              static_cast<cuuint64_t>(p.d), static_cast<cuuint64_t>(p.c),
                              static_cast<cuuint64_t>(p.n)};
  cuuint64_t strides[4];  // bytes, of dims 1..4
  strides[0] = static_cast<cuuint64_t>(input_row_pitch(p.w)) * 4;
  for (int i = 1; i < 4; ++i) strides[i] = strides[i - 1] * dims[i];
  // config: TH, TW, BN, CC, RP (the box row), PP = box rows x RP, CP, TMA, ROW, PL, PARITY. Along D the box
  // steps by the dilation: KD planes from a box KD x DD planes deep; with PL > 1 output planes a
  // tile (unit dilation), KD + PL - 1 planes.
  const int row = k.config[4], rows = k.config[5] / k.config[4];
  const cuuint32_t planes = static_cast<cuuint32_t>(sm90_input_planes(k.kd, k.config[9]) * k.dd);
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(row), static_cast<cuuint32_t>(rows), planes,
                             static_cast<cuuint32_t>(k.config[3]), 1};
  const cuuint32_t element_strides[5] = {1, 1, static_cast<cuuint32_t>(k.dd), 1, 1};
  return tiled_map(5, input, dims, strides, box, element_strides, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
}

CUtensorMap encode_output(const Plan& plan, const void* output) {
  const ConvParams& p = plan.params;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.oh * p.ow), static_cast<cuuint64_t>(p.od),
                              static_cast<cuuint64_t>(p.k), static_cast<cuuint64_t>(p.n)};
  const cuuint64_t strides[3] = {dims[0] * 4, dims[0] * dims[1] * 4, dims[0] * dims[1] * dims[2] * 4};
  // A warp's staging box (tile_geometry.cuh); PL = config[9].
  const cuuint32_t box[4] = {16, static_cast<cuuint32_t>(plan.key.config[9]),
                             static_cast<cuuint32_t>(plan.store_channels), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return tiled_map(4, output, dims, strides, box, element_strides, CU_TENSOR_MAP_L2_PROMOTION_NONE);
}

// The last map this thread encoded for a role (input, output): a layer called again on the same
// buffers (the common case in inference loops) reuses it instead of encoding anew.
struct LastMap {
  const void* tensor = nullptr;
  long long extents[5] = {};  // with the key, all the map depends on
  SpecKey key;
  CUtensorMap map{};
};

const CUtensorMap& remembered(LastMap& last, const Plan& plan, const void* tensor, const long long (&extents)[5],
                              CUtensorMap (*make)(const Plan&, const void*)) {
  if (last.tensor != tensor || last.key != plan.key || std::memcmp(last.extents, extents, sizeof(extents)) != 0) {
    last.map = make(plan, tensor);  // first: a throw leaves the old entry intact
    last.tensor = tensor;
    std::memcpy(last.extents, extents, sizeof(extents));
    last.key = plan.key;
  }
  return last.map;
}

}  // namespace

const CUtensorMap& input_tensor_map(const Plan& plan, const void* input) {
  thread_local LastMap last;
  const ConvParams& p = plan.params;
  return remembered(last, plan, input, {p.n, p.c, p.d, p.h, p.w}, encode);
}

bool uses_output_map(const Plan& plan, const void* output) {
  return plan.store_channels > 0 &&
         sm90_stores_boxed(plan.params.oh * plan.params.ow, reinterpret_cast<unsigned long long>(output));
}

const CUtensorMap& output_tensor_map(const Plan& plan, void* output) {
  thread_local LastMap last;
  const ConvParams& p = plan.params;
  return remembered(last, plan, output, {p.n, p.k, p.od, p.oh, p.ow}, encode_output);
}

}  // namespace conv3djit::detail
