#include "spec_key.hpp"

#include <fmt/format.h>

#include <cstring>

#include "conv3djit/engine.hpp"
#include "kernel_sources.hpp"

namespace conv3djit::detail {

const char* to_string(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::DirectGeneric: return "direct_fp32";
    case Algorithm::DirectTiled: return "direct_tiled_fp32";
    case Algorithm::Grouped: return "grouped_fp32";
    case Algorithm::Depthwise: return "depthwise_fp32";
    case Algorithm::ImplicitGemm: return "igemm_tf32";
    case Algorithm::ImplicitGemmSm90: return "igemm_sm90";
    case Algorithm::Sm90Weights: return "sm90_weights";
    case Algorithm::PitchRows: return "pitch_rows";
    case Algorithm::ReferenceFp64: return "reference_fp64";
  }
  return "unknown";
}

bool SpecKey::operator==(const SpecKey& o) const noexcept {
  return algorithm == o.algorithm && precision == o.precision && c_per_group == o.c_per_group &&
         kd == o.kd && kh == o.kh && kw == o.kw && sd == o.sd && sh == o.sh && sw == o.sw &&
         dd == o.dd && dh == o.dh && dw == o.dw &&
         std::memcmp(config, o.config, sizeof(config)) == 0;
}

size_t SpecKeyHash::operator()(const SpecKey& k) const noexcept {
  // FNV-1a over the fields; on the hot path of every conv3d call, so no string building.
  const int32_t fields[] = {static_cast<int32_t>(k.algorithm), static_cast<int32_t>(k.precision),
                            k.c_per_group, k.kd, k.kh, k.kw, k.sd, k.sh, k.sw, k.dd, k.dh, k.dw};
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int32_t f) {
    h ^= static_cast<uint32_t>(f);
    h *= 1099511628211ull;
  };
  for (int32_t f : fields) mix(f);
  for (int32_t f : k.config) mix(f);
  return static_cast<size_t>(h);
}

std::string canonical_text(const SpecKey& k) {
  return fmt::format("{};{};cg={};k={}x{}x{};s={}x{}x{};d={}x{}x{};cfg={}",
                     to_string(k.algorithm), k.precision == Precision::Tf32 ? "tf32" : "fp32",
                     k.c_per_group, k.kd, k.kh, k.kw, k.sd, k.sh, k.sw, k.dd, k.dh, k.dw,
                     fmt::join(std::begin(k.config), std::end(k.config), ","));
}

std::string cache_key_text(const SpecKey& key, const std::string& arch,
                           const std::vector<std::string>& options) {
  return fmt::format("{}|arch={}|nvrtc={}|src={}|opts={}|lib={}|keyfmt={}", canonical_text(key),
                     arch, nvrtc_version(), kernel_sources_hash(), fmt::join(options, " "),
                     version(), kKeyFormatVersion);
}

}  // namespace conv3djit::detail
