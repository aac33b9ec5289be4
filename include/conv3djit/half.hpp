#pragma once
/// bf16 and fp16 on the host: the 16-bit patterns conv3djit's half-precision tensors hold, and
/// conversions of whole buffers, for filling inputs and reading outputs.
#include <cstdint>

#include "conv3djit/conv3d.hpp"
#include "conv3djit/export.hpp"

namespace conv3djit {

/// f rounded to nearest even (NaN stays NaN, overflow is infinity), as PyTorch's .to() rounds.
CONV3DJIT_API uint16_t float_to_bf16(float f) noexcept;
CONV3DJIT_API uint16_t float_to_fp16(float f) noexcept;
/// The exact float of a bf16 / fp16 pattern.
CONV3DJIT_API float bf16_to_float(uint16_t bits) noexcept;
CONV3DJIT_API float fp16_to_float(uint16_t bits) noexcept;

/// Bytes of one element of `type`.
CONV3DJIT_API int dtype_bytes(DataType type) noexcept;

/// count elements of `type` at data as floats (exact for every type).
CONV3DJIT_API void to_float(DataType type, const void* data, int64_t count, float* out);
/// count floats rounded into elements of `type` at out.
CONV3DJIT_API void from_float(DataType type, const float* data, int64_t count, void* out);

}  // namespace conv3djit
