// Host conversions between float and the 16-bit types, bit by bit (no compiler extension types),
// rounding to nearest even as the kernels' cvt.rn does.
#include "conv3djit/half.hpp"

#include <cstring>

#include "conv3djit/error.hpp"
#include "core/problem.hpp"

namespace conv3djit {
namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace

uint16_t float_to_bf16(float f) noexcept {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t bits) noexcept { return float_of(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_fp16(float f) noexcept {
  const uint32_t u = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: infinity
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent >= -14) {  // normal: drop 13 mantissa bits, rounding to nearest even
    const uint32_t rebased = magnitude - (112u << 23);  // exponent bias 127 -> 15
    return static_cast<uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
  }
  if (exponent < -25) return sign;  // below half the smallest subnormal: zero
  // Subnormal: the mantissa with its implicit bit, shifted to units of 2^-24, rounded to even.
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const int shift = -exponent - 1;  // 14..24 for exponents -15..-25
  const uint32_t kept = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rounded = kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u);
  return static_cast<uint16_t>(sign | rounded);
}

float fp16_to_float(uint16_t bits) noexcept {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // subnormal or zero: exact
  return sign ? -magnitude : magnitude;
}

int dtype_bytes(DataType type) noexcept { return detail::element_bytes(type); }

void to_float(DataType type, const void* data, int64_t count, float* out) {
  switch (type) {
    case DataType::Float32:
      std::memcpy(out, data, static_cast<size_t>(count) * sizeof(float));
      return;
    case DataType::BFloat16:
    case DataType::Float16: {
      const auto* bits = static_cast<const uint16_t*>(data);
      const bool bf = type == DataType::BFloat16;
      for (int64_t i = 0; i < count; ++i) out[i] = bf ? bf16_to_float(bits[i]) : fp16_to_float(bits[i]);
      return;
    }
  }
  throw Error(ErrorCategory::InvalidArgument, "to_float: unknown element type");
}

void from_float(DataType type, const float* data, int64_t count, void* out) {
  switch (type) {
    case DataType::Float32:
      std::memcpy(out, data, static_cast<size_t>(count) * sizeof(float));
      return;
    case DataType::BFloat16:
    case DataType::Float16: {
      auto* bits = static_cast<uint16_t*>(out);
      const bool bf = type == DataType::BFloat16;
      for (int64_t i = 0; i < count; ++i) bits[i] = bf ? float_to_bf16(data[i]) : float_to_fp16(data[i]);
      return;
    }
  }
  throw Error(ErrorCategory::InvalidArgument, "from_float: unknown element type");
}

}  // namespace conv3djit
