#pragma once
#include "common/common.cuh"
// The arithmetic of a layer's input read as TMA im2col boxes (NDHWC: consecutive window origins x
// a run of channels, zeros outside the input), shared by the kernels that read them and their
// planners.

namespace conv3djit::im2col {

/// The im2col bounding box of one axis (TMA's upper corner, an offset from the extent `in`): the
/// window origins are -pad + i * stride for i < out, so the box [-pad, in + upper) ends just past
/// the last one and the copy's walk wraps to the next row, plane or image there.
CONV3DJIT_HOST_DEVICE constexpr long long upper(long long out, int stride, int pad, long long in) {
  return (out - 1) * stride + 1 - pad - in;
}
/// Whether an im2col corner is within a 5-D map's range.
CONV3DJIT_HOST_DEVICE constexpr bool corner_fits(long long corner) { return corner >= -16 && corner <= 15; }
/// Whether a layer's input can arrive as im2col boxes: zero padding (the boxes' zeros), strides
/// TMA can step (at most 8), and each axis's corners within a 5-D map's range. The map also needs
/// a 16-byte aligned input whose channels make every stride a 16-byte multiple.
CONV3DJIT_HOST_DEVICE constexpr bool fits(const ConvParams& p) {
  return p.pad_mode == 0 /* zeros */ && p.sd <= 8 && p.sh <= 8 && p.sw <= 8 && corner_fits(-p.pad_d) &&
         corner_fits(-p.pad_h) && corner_fits(-p.pad_w) && corner_fits(upper(p.od, p.sd, p.pad_d, p.d)) &&
         corner_fits(upper(p.oh, p.sh, p.pad_h, p.h)) && corner_fits(upper(p.ow, p.sw, p.pad_w, p.w));
}

}  // namespace conv3djit::im2col
