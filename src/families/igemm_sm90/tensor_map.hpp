#pragma once
// TMA tensor maps for the kernels that stage their input as tensor boxes (igemm_sm90 with TMA
// staging) and store their output from shared memory as boxes (its tf32 row tiles): encoded on
// the host for each call, since a map holds the tensor's address.
#include <cuda.h>

#include "plan/plan.hpp"

namespace conv3djit::detail {

/// True when plan's kernel (an igemm_sm90 plan) takes its input through a tensor map (tma = 1).
bool uses_tensor_map(const Plan& plan);

/// The map of `input` (NCDHW fp32, the plan's extents, rows input_row_pitch(W) floats apart: the
/// pitched float32 copy where Plan::copies_input, always for half types) as a 5-D tensor (W, H, D, C, N) with the plan's box:
/// TMA row x tile rows x KD planes (every DD-th) x CC channels x 1 image. `input` must be 16-byte
/// aligned. Throws Error(DriverError) if the driver refuses the map. The map is kept per thread
/// and re-encoded only when the input or the plan changes; the reference stays valid until this
/// thread's next call.
const CUtensorMap& input_tensor_map(const Plan& plan, const void* input);

/// Tiles across images (the key's `across`, igemm_sm90/geometry.cuh) see the input as the 5-D
/// tensor (W, C, H, D, N) instead, so that a box of a tile's rows lands row by row: input_tensor_map
/// then has boxes of TH rows x CC channels x 8 columns, and this map, for the tiles that cross into
/// the next image, boxes of one row. Kept per thread like the input's.
const CUtensorMap& input_row_map(const Plan& plan, const void* input);

/// The raw weights' map (Plan::weight_map: sm90_raw): the K x CG·KD·KH·KW weight in boxes of BN
/// rows x 32 terms, 128-byte swizzled, rounded to TF32 as they land. `weight` must be 16-byte
/// aligned. Kept per thread like the input's.
const CUtensorMap& weight_tensor_map(const Plan& plan, const void* weight);

/// True when plan's kernel stores `output` through a tensor map (igemm_sm90 tiles with output
/// staging: sm90_stores_staged, which the kernel tests alike).
bool uses_output_map(const Plan& plan, const void* output);

/// The map of `output` (NCDHW, the output's type) as a 4-D tensor (OH x OW, OD, K, N) with a warp's staging box:
/// 16 positions x PL planes x sm90_store_channels channels. Kept per thread like the input's.
const CUtensorMap& output_tensor_map(const Plan& plan, void* output);

}  // namespace conv3djit::detail
