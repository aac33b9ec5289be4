#pragma once
// Small non-cryptographic hashes for file names and checksums: they detect accidents (torn or
// flipped bytes, collisions between cache keys), not attackers.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace conv3djit::detail {

inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;

/// 64-bit FNV-1a. Chainable: fnv1a64(b, fnv1a64(a)) == fnv1a64(a + b). Any single changed byte
/// changes the result (each step is a bijection of the state).
inline uint64_t fnv1a64(const void* data, size_t size, uint64_t state = kFnv1aOffset) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) state = (state ^ p[i]) * kFnv1aPrime;
  return state;
}

inline uint64_t fnv1a64(std::string_view text, uint64_t state = kFnv1aOffset) noexcept {
  return fnv1a64(text.data(), text.size(), state);
}

/// MurmurHash3's finalizer: spreads FNV's weakly mixed high bits over the whole word.
inline uint64_t mix64(uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/// 16 lower-case hex digits.
inline std::string hex64(uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[static_cast<size_t>(i)] = kDigits[value & 0xf];
  return out;
}

/// 32 hex digits from two differently seeded 64-bit hashes: a name for `text` that practically
/// never collides (callers that must be sure still compare the text itself).
inline std::string hash128_hex(std::string_view text) {
  return hex64(mix64(fnv1a64(text))) + hex64(mix64(fnv1a64(text, ~kFnv1aOffset)));
}

}  // namespace conv3djit::detail
