#pragma once
// channels_last: an NCDHW input or weight rewritten with the channels innermost, for kernels that
// read one tap's channels as a row (igemm_sm90_half on NCDHW tensors; float32 values rounded to
// TF32 on the way). Shape-generic: one kernel for every plan of an element type and tensor.
#include "plan/plan.hpp"

namespace conv3djit::detail {

/// Which tensor a channels_last step rewrites.
enum class ChannelsLastTensor { Input, Weight };

/// The rewrite of p's input (N x D·H·W x C) or weight (K x KD·KH·KW x C) of type dtype; runs on
/// every call (PrepPlan::every_call).
PrepPlan channels_last_plan(const ConvParams& p, DataType dtype, ChannelsLastTensor tensor, const DeviceLimits& limits);

}  // namespace conv3djit::detail
