#pragma once
// SpecKey: exactly what is baked into a kernel binary, nothing else. Two problems with equal
// SpecKeys share one cubin (N, D, H, W, K and padding stay run-time arguments). The disk cache's
// key text adds what makes a cubin valid: arch, NVRTC version, kernel source hash, options,
// library version and key format version.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "conv3djit/conv3d.hpp"

namespace conv3djit::detail {

enum class Algorithm : uint8_t {
  DirectGeneric,   // kernels/direct_fp32.cu: serves every description
  DirectTiled,     // kernels/direct_tiled_fp32.cu: register-blocked, groups == 1
  Grouped,         // kernels/grouped_fp32.cu: streaming, groups > 1
  Depthwise,       // kernels/depthwise_fp32.cu: one channel per group, unit stride in D and W, registers only
  ImplicitGemm,    // kernels/igemm_tf32.cu: tensor cores, 3xTF32 (fp32 class) or TF32, groups == 1
  ImplicitGemmSm90,  // kernels/igemm_sm90.cu: Hopper wgmma, groups == 1
  Sm90Weights,       // kernels/igemm_sm90.cu: igemm_sm90's weights, prepared chunk by chunk
  PitchRows,         // kernels/pitch_rows.cu: an input copied to rows of 16-byte multiples (igemm_sm90's TMA boxes)
  ReferenceFp64,   // kernels/reference_fp64.cu: the GPU oracle, shape-generic
};
const char* to_string(Algorithm a) noexcept;

struct SpecKey {
  Algorithm algorithm = Algorithm::DirectGeneric;
  Precision precision = Precision::Fp32;
  int32_t c_per_group = 0;
  int32_t kd = 0, kh = 0, kw = 0;
  int32_t sd = 0, sh = 0, sw = 0;
  int32_t dd = 0, dh = 0, dw = 0;
  int32_t config[11] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // the algorithm's tile parameters

  bool operator==(const SpecKey& o) const noexcept;
  bool operator!=(const SpecKey& o) const noexcept { return !(*this == o); }
};

struct SpecKeyHash {
  size_t operator()(const SpecKey& k) const noexcept;
};

/// "direct_fp32;fp32;cg=3;k=3x5x7;s=1x1x1;d=1x1x1;cfg=4,0,0,0,0,0,0,0,0,0,0": one line, every field.
std::string canonical_text(const SpecKey& key);

/// Version of the key text layout below; bump when it changes meaning.
inline constexpr int kKeyFormatVersion = 6;  // 6: eleven config fields

/// The disk cache key: canonical_text + arch + NVRTC version + kernel sources hash + the NVRTC
/// options (in the order passed) + library version + key format version.
std::string cache_key_text(const SpecKey& key, const std::string& arch,
                           const std::vector<std::string>& options);

}  // namespace conv3djit::detail
