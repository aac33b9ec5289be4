// Host conversions of the 16-bit types: exact where the value fits, round to nearest even
// otherwise, NaN kept, overflow to infinity, subnormals exact - the kernels' cvt.rn behaviour.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "catch.hpp"
#include "conv3djit/half.hpp"

using namespace conv3djit;

namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
}  // namespace

TEST_CASE("bf16: known patterns, ties to even, NaN and overflow") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(-2.0f) == 0xc000);
  CHECK(float_to_bf16(0.0f) == 0x0000);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even mantissa, 1.
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even, up.
  CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
  CHECK(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);  // past halfway: up
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds past the largest bf16
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(bf16_to_float(0x3f80) == 1.0f);
  CHECK(bf16_to_float(0x0001) == 0x1p-133f);  // the smallest subnormal
}

TEST_CASE("fp16: known patterns, subnormals, ties to even, NaN and overflow") {
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(-2.0f) == 0xc000);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);
  CHECK(float_to_fp16(65519.0f) == 0x7bff);  // below halfway to 65536: the largest half
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // halfway: ties to even, infinity
  CHECK(float_to_fp16(-1e6f) == 0xfc00);
  CHECK(float_to_fp16(0x1p-14f) == 0x0400);   // the smallest normal
  CHECK(float_to_fp16(0x1p-24f) == 0x0001);   // the smallest subnormal
  CHECK(float_to_fp16(0x1p-25f) == 0x0000);   // halfway to it: ties to even, zero
  CHECK(float_to_fp16(0x1.8p-25f) == 0x0001); // past halfway
  CHECK(float_to_fp16(3 * 0x1p-25f) == 0x0002);  // 1.5 units: ties to even, 2
  CHECK(float_to_fp16(1.0f + 0x1p-11f) == 0x3c00);      // halfway: even, down
  CHECK(float_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);  // halfway: even, up
  CHECK(float_to_fp16(0x1.ffcp-15f) == 0x0400);  // the largest subnormal's neighbour rounds up into the normals
  CHECK(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(fp16_to_float(0x7c00)));
  CHECK(fp16_to_float(0x0001) == 0x1p-24f);
  CHECK(fp16_to_float(0x8400) == -0x1p-14f);
}

TEST_CASE("every 16-bit pattern survives a round trip through float") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float bf = bf16_to_float(bits), h = fp16_to_float(bits);
    if (!std::isnan(bf)) REQUIRE(float_to_bf16(bf) == bits);
    if (!std::isnan(h)) REQUIRE(float_to_fp16(h) == bits);
  }
}

TEST_CASE("rounding picks the nearer neighbour, as float64 arithmetic says") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> values(-70000.f, 70000.f);
  std::uniform_int_distribution<int> scale(-30, 10);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::ldexp(values(rng), scale(rng));
    for (bool bf : {true, false}) {
      const uint16_t r = bf ? float_to_bf16(f) : float_to_fp16(f);
      const double got = bf ? bf16_to_float(r) : fp16_to_float(r);
      if (std::isinf(got)) continue;
      // The neighbours of r toward and away from zero.
      const uint16_t up = static_cast<uint16_t>(r + 1), down = static_cast<uint16_t>(r - 1);
      for (uint16_t other : {up, down}) {
        if ((other & 0x7fff) == 0x7fff || ((r & 0x7fff) == 0 && other == down)) continue;
        const double o = bf ? bf16_to_float(other) : fp16_to_float(other);
        if (std::isnan(o) || std::isinf(o)) continue;
        INFO(f << (bf ? " bf16 " : " fp16 ") << r);
        REQUIRE(std::abs(got - f) <= std::abs(o - f));
      }
    }
  }
  CHECK(bits_of(bf16_to_float(float_to_bf16(1.5f))) == bits_of(1.5f));
}

TEST_CASE("buffers convert element by element; float32 is copied") {
  const std::vector<float> values = {0.5f, -3.25f, 1.0f / 3.0f, 70000.f};
  for (DataType t : {DataType::Float32, DataType::BFloat16, DataType::Float16}) {
    std::vector<unsigned char> raw(values.size() * static_cast<size_t>(dtype_bytes(t)));
    from_float(t, values.data(), 4, raw.data());
    std::vector<float> back(4);
    to_float(t, raw.data(), 4, back.data());
    CHECK(back[0] == 0.5f);
    CHECK(back[1] == -3.25f);
    if (t == DataType::Float32) CHECK(back[2] == values[2]);
    if (t == DataType::BFloat16) CHECK(back[2] == bf16_to_float(float_to_bf16(values[2])));
    if (t == DataType::Float16) CHECK(std::isinf(back[3]));
  }
  CHECK(dtype_bytes(DataType::Float32) == 4);
  CHECK(dtype_bytes(DataType::BFloat16) == 2);
  CHECK(dtype_bytes(DataType::Float16) == 2);
}
