#pragma once
// SpecKey: exactly what is baked into a kernel binary, nothing else. Two problems with equal
// SpecKeys share one cubin (N, D, H, W, K and padding stay run-time arguments). A key names its
// kernel (a KernelDef: the family's kernel template and its field table), the element type,
// layout, accuracy class and epilogue, the shape constants the kernel uses, and the family's
// configuration in the order of its field table. The disk cache's key text adds what makes a
// cubin valid: arch, NVRTC version, the hash of the kernel's sources, options, library version
// and key format version.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "conv3djit/conv3d.hpp"

namespace conv3djit::detail {

/// What of the epilogue a kernel bakes in: the activation, whether it scales (alpha or gamma is
/// not 1) and whether it reads a residual. Bias is a run-time flag and the scalars' values are
/// run-time arguments (ConvParams), so they are not in the key.
struct EpilogueKind {
  Activation activation = Activation::Identity;
  bool scaled = false;
  bool residual = false;
  bool operator==(const EpilogueKind& o) const noexcept {
    return activation == o.activation && scaled == o.scaled && residual == o.residual;
  }
};

/// Whether a field of a configuration is chosen (by the planner, or forced by `--config`) or
/// derived from the chosen ones and the problem (in the key, never forced).
enum class FieldRole : uint8_t { Chosen, Optional, Derived };

/// One named field of a kernel's configuration: its name in key texts, generated traits and
/// `--config`, and what it means (help text and error messages).
struct FieldInfo {
  const char* name;
  FieldRole role;
  const char* help;
};

/// Which of a key's shape and class fields a kernel bakes in (the others stay zero and out of
/// its text): shape-generic helpers carry none.
enum KeyUses : unsigned {
  kUsesKernelExtents = 1,  // cg, kd, kh, kw
  kUsesStrides = 2,        // sd, sh, sw, dd, dh, dw and the padding mode
  kUsesClass = 4,          // the accuracy class
  kUsesEpilogue = 8,
  kUsesConvolution = kUsesKernelExtents | kUsesStrides | kUsesClass | kUsesEpilogue,
};

struct SpecKey;

/// A kernel template the JIT can instantiate: `conv3djit::<name><Spec>` in `source` (a path below
/// kernels/), with the configuration `fields` in the order of SpecKey::config.
struct KernelDef {
  const char* name;
  const char* source;
  unsigned uses;
  bool arch_specific;  // built for sm_XYa (wgmma, setmaxnreg): only that exact arch runs it
  std::vector<FieldInfo> fields;
  // The minimum blocks an SM of a key's __launch_bounds__ where the kernel takes them from
  // CONV3DJIT_BLOCKS_AN_SM (common/common.cuh), so that a budget that spills can be relaxed at
  // compile time (nvrtc_compile_spill_free); nullptr: a bound the compile leaves as it is, as a
  // persistent kernel needs (igemm_sm90 sizes its grid by the blocks its bound guarantees).
  int (*blocks_an_sm)(const SpecKey&) = nullptr;
};

inline constexpr int kMaxConfigFields = 12;

struct SpecKey {
  const KernelDef* kernel = nullptr;
  DataType dtype = DataType::Float32;      // input, weight, bias
  DataType out_dtype = DataType::Float32;  // output, residual
  Layout layout = Layout::NCDHW;
  Precision precision = Precision::Fp32;
  EpilogueKind epilogue{};
  PaddingMode padding_mode = PaddingMode::Zeros;  // with the strides (kUsesStrides)
  int32_t c_per_group = 0;
  int32_t kd = 0, kh = 0, kw = 0;
  int32_t sd = 0, sh = 0, sw = 0;
  int32_t dd = 0, dh = 0, dw = 0;
  int32_t config[kMaxConfigFields] = {};  // kernel->fields, in order

  /// The value of the configuration field `name`; throws std::out_of_range if the kernel has none.
  int32_t field(const char* name) const;

  bool operator==(const SpecKey& o) const noexcept;
  bool operator!=(const SpecKey& o) const noexcept { return !(*this == o); }
};

struct SpecKeyHash {
  size_t operator()(const SpecKey& k) const noexcept;
};

const char* to_string(DataType t) noexcept;
const char* to_string(Layout l) noexcept;
const char* to_string(Precision p) noexcept;
/// "bias", "bias+silu", "bias+scale+relu+res": bias (a run-time flag), scaling, the activation,
/// the residual.
std::string to_string(EpilogueKind e);

/// One line naming every field the kernel uses:
/// "igemm_sm90 fp32 ncdhw class=fp32 epi=bias cg=3 k=3x5x7 s=1x1x1 d=1x1x1 th=4 tw=64 bn=64 ...";
/// an output type other than the input's follows the layout ("bf16 ndhwc out=fp32"), a padding
/// mode other than zeros the dilation ("d=1x1x1 pad=replicate").
std::string canonical_text(const SpecKey& key);

/// Version of the key text layout below; bump when it changes meaning.
inline constexpr int kKeyFormatVersion = 9;  // 9: half types, NDHWC and the output type

/// The disk cache key: canonical_text + arch + NVRTC version + the hash of the kernel's source
/// and the headers it includes + the NVRTC options (in the order passed) + library version + key
/// format version.
std::string cache_key_text(const SpecKey& key, const std::string& arch,
                           const std::vector<std::string>& options);

/// The kernel and problem fields of a cache key text, for listings: kernel name, element type,
/// accuracy class, epilogue, channels per group, kernel extents, stride, dilation and arch
/// ("igemm_sm90 fp32 class=fp32 epi=bias cg=3 k=3x5x7 s=1x1x1 d=1x1x1 sm_90"); the layout and the
/// output type where they are not the defaults ("direct bf16 ndhwc out=fp32 ..."); tile fields are left out.
std::string readable_key(std::string_view key_text);

}  // namespace conv3djit::detail
