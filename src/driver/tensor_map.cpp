#include "driver/tensor_map.hpp"

#include "common/im2col.cuh"
#include "conv3djit/error.hpp"
#include "core/problem.hpp"
#include "driver/driver_api.hpp"

namespace conv3djit::detail {

CUtensorMapDataType tensor_map_type(DataType type) {
  switch (type) {
    case DataType::Float32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DataType::BFloat16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DataType::Float16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  }
  throw Error(ErrorCategory::Unsupported, "tensor map: no TMA data type for this element type");
}

namespace {
// Bytes of an element of a map's type.
cuuint64_t map_element_bytes(CUtensorMapDataType type) {
  return type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 || type == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 ? 4 : 2;
}
}  // namespace

CUtensorMapDataType operand_map_type(DataType type, Precision precision) {
  return type == DataType::Float32 && precision == Precision::Tf32 ? CU_TENSOR_MAP_DATA_TYPE_TFLOAT32
                                                                   : tensor_map_type(type);
}

CUtensorMap encode_tiled_map(CUtensorMapDataType type, unsigned rank, const void* base, const cuuint64_t* dims,
                             const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* element_strides,
                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
  CUtensorMap map{};
  check_cu(driver().cuTensorMapEncodeTiled(&map, type, rank, const_cast<void*>(base), dims, strides, box,
                                           element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeTiled");
  return map;
}

CUtensorMap encode_output_planes(DataType type, const void* base, long long n, long long k, long long od,
                                 long long plane, const cuuint32_t (&box)[4], CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(plane), static_cast<cuuint64_t>(od), static_cast<cuuint64_t>(k),
                              static_cast<cuuint64_t>(n)};
  const cuuint64_t bytes = static_cast<cuuint64_t>(element_bytes(type));
  const cuuint64_t strides[3] = {dims[0] * bytes, dims[0] * dims[1] * bytes, dims[0] * dims[1] * dims[2] * bytes};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return encode_tiled_map(tensor_map_type(type), 4, base, dims, strides, box, element_strides, swizzle,
                          CU_TENSOR_MAP_L2_PROMOTION_NONE);
}

CUtensorMap encode_matrix_rows(CUtensorMapDataType type, const void* base, long long rows, long long cols,
                               unsigned box_rows, unsigned box_cols, CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {dims[0] * map_element_bytes(type)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode_tiled_map(type, 2, base, dims, strides, box, element_strides, swizzle,
                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

CUtensorMap encode_channel_runs(CUtensorMapDataType type, const void* base, long long n, long long c,
                                long long positions, unsigned box_positions, unsigned box_channels) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(positions), static_cast<cuuint64_t>(c),
                              static_cast<cuuint64_t>(n)};
  const cuuint64_t bytes = map_element_bytes(type);
  const cuuint64_t strides[2] = {dims[0] * bytes, dims[0] * dims[1] * bytes};
  const cuuint32_t box[3] = {box_positions, box_channels, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  return encode_tiled_map(type, 3, base, dims, strides, box, element_strides, CU_TENSOR_MAP_SWIZZLE_128B,
                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

CUtensorMap encode_input_im2col(CUtensorMapDataType type, const void* input, const ConvParams& p, unsigned channels,
                                unsigned pixels, CUtensorMapSwizzle swizzle, int halo_w) {
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(p.c), static_cast<cuuint64_t>(p.w), static_cast<cuuint64_t>(p.h),
                              static_cast<cuuint64_t>(p.d), static_cast<cuuint64_t>(p.n)};
  cuuint64_t strides[4];
  strides[0] = dims[0] * map_element_bytes(type);
  for (int i = 1; i < 4; ++i) strides[i] = strides[i - 1] * dims[i];
  const int lower[3] = {-p.pad_w, -p.pad_h, -p.pad_d};
  const int upper[3] = {static_cast<int>(im2col::upper(p.ow + halo_w, p.sw, p.pad_w, p.w)),
                        static_cast<int>(im2col::upper(p.oh, p.sh, p.pad_h, p.h)),
                        static_cast<int>(im2col::upper(p.od, p.sd, p.pad_d, p.d))};
  const cuuint32_t element_strides[5] = {1, static_cast<cuuint32_t>(p.sw), static_cast<cuuint32_t>(p.sh),
                                         static_cast<cuuint32_t>(p.sd), 1};
  CUtensorMap map{};
  check_cu(driver().cuTensorMapEncodeIm2col(&map, type, 5, const_cast<void*>(input), dims, strides, lower, upper,
                                            channels, pixels, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeIm2col");
  return map;
}

}  // namespace conv3djit::detail
