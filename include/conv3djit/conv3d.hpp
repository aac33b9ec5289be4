#pragma once
/// The public conv3djit API: describe a 3D convolution with PyTorch nn.Conv3d semantics, then run
/// it with conv3d(). The first call for a new shape compiles a specialised kernel with NVRTC; later
/// calls (and later processes, through the disk cache) reuse it.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "conv3djit/error.hpp"
#include "conv3djit/export.hpp"

namespace conv3djit {

/// Three extents in (D, H, W) order. Built from one int for all axes or from three.
struct Dims3 {
  int64_t d = 1, h = 1, w = 1;
  constexpr Dims3() = default;
  constexpr Dims3(int64_t all) : d(all), h(all), w(all) {}  // NOLINT: one int means all axes
  constexpr Dims3(int64_t d_, int64_t h_, int64_t w_) : d(d_), h(h_), w(w_) {}
  constexpr int64_t operator[](int axis) const { return axis == 0 ? d : axis == 1 ? h : w; }
  constexpr bool operator==(const Dims3& o) const { return d == o.d && h == o.h && w == o.w; }
};

/// Padding as nn.Conv3d takes it: explicit per-axis amounts, or the strings "same" / "valid"; or,
/// as F.pad gives it, different amounts before and after an axis (a video VAE's causal padding in
/// time is before = 2, after = 0), applied by the kernel's loads: no padded copy is made.
struct Padding {
  enum class Mode { Explicit, Same, Valid, PerSide };
  Mode mode = Mode::Explicit;
  Dims3 amount{0};  ///< Explicit: the same amount on both sides of an axis; PerSide: before each axis
  Dims3 after{0};   ///< PerSide: after each axis

  constexpr Padding() = default;
  constexpr Padding(int64_t all) : amount(all) {}    // NOLINT: like padding=1
  constexpr Padding(Dims3 per_axis) : amount(per_axis) {}  // NOLINT: like padding=(1,2,3)
  static constexpr Padding same() { Padding p; p.mode = Mode::Same; return p; }
  static constexpr Padding valid() { Padding p; p.mode = Mode::Valid; return p; }
  static constexpr Padding per_side(Dims3 before, Dims3 after_) {
    Padding p;
    p.mode = Mode::PerSide;
    p.amount = before;
    p.after = after_;
    return p;
  }
};

/// What a padded position reads, as nn.Conv3d's padding_mode: zero, or the input mirrored at its
/// edge without repeating the edge (reflect: padding must be smaller than the extent), the edge
/// element repeated (replicate), or the input wrapped around (circular: padding at most the
/// extent). The kernel's loads map the positions: no padded copy is made.
enum class PaddingMode { Zeros, Reflect, Replicate, Circular };

/// The activation of an Epilogue. Gelu is the exact (erf) form, GeluTanh PyTorch's
/// approximate='tanh'; Hardswish is x * relu6(x + 3) / 6; Clamp bounds to [clamp_min, clamp_max].
enum class Activation { Identity, Relu, LeakyRelu, Gelu, GeluTanh, Silu, Sigmoid, Tanh, Hardswish, Clamp };

/// What the kernel does with each output before it stores it, instead of separate passes over the
/// output: out = act(alpha * conv(x, w) + bias) * gamma + beta * residual. The activation and
/// whether there is a residual are compiled into the kernel; the scalars are run-time arguments,
/// so one kernel serves every value of them. The default is the plain convolution (plus bias).
struct Epilogue {
  Activation activation = Activation::Identity;
  float alpha = 1.f;        ///< scales the convolution's sum, before the bias
  float slope = 0.01f;      ///< LeakyRelu: the slope below zero (nn.LeakyReLU's negative_slope)
  float clamp_min = 0.f;    ///< Clamp: the bounds (the defaults are ReLU6's)
  float clamp_max = 6.f;
  float gamma = 1.f;        ///< scales the activation's result
  bool residual = false;    ///< add beta * residual, a tensor of the output's shape and layout
  float beta = 1.f;
};

/// Element type of the input, weight and bias (and of the output and residual unless
/// Conv3dDesc::fp32_output). bf16 and fp16 are multiplied exactly and summed in float32.
enum class DataType { Float32, BFloat16, Float16 };

/// Memory order of the activations. NCDHW: input N x C x D x H x W, output N x K x OD x OH x OW,
/// weight K x C/groups x KD x KH x KW (PyTorch's contiguous tensors). NDHWC: channels innermost,
/// input N x D x H x W x C, output N x OD x OH x OW x K, weight K x KD x KH x KW x C/groups (the
/// memory order of PyTorch's channels_last_3d tensors, the weight's too).
enum class Layout { NCDHW, NDHWC };

/// Accuracy class: what error against a float64 reference a result may have.
enum class Precision {
  Fp32,  ///< default: rel-L2 <= 1e-6 and allclose(atol = rtol = 1e-4) against float64
  Tf32,  ///< opt-in, what PyTorch does by default for convolutions: rel-L2 <= 5e-4
};

/// One convolution, field for field what nn.Conv3d(C, K, kernel, stride, padding, dilation,
/// groups, bias) applied to an N x C x D x H x W input means.
struct Conv3dDesc {
  int64_t n = 1;        ///< batch size
  int64_t c = 1;        ///< input channels (in_channels)
  int64_t d = 1;        ///< input depth
  int64_t h = 1;        ///< input height
  int64_t w = 1;        ///< input width
  int64_t k = 1;        ///< output channels (out_channels)
  Dims3 kernel{1};      ///< kernel_size (KD, KH, KW)
  Dims3 stride{1};      ///< stride per axis, >= 1
  Padding padding{};    ///< padding per axis (or per side), or same / valid
  PaddingMode padding_mode = PaddingMode::Zeros;  ///< what the padding reads
  Dims3 dilation{1};    ///< dilation per axis, >= 1
  int64_t groups = 1;   ///< C and K must both be divisible by groups; groups == C is depthwise
  bool bias = false;    ///< add bias[k] to every output of channel k
  Epilogue epilogue{};  ///< activation, scales and residual applied in the kernel's store
  DataType dtype = DataType::Float32;  ///< input, weight, bias (and output, residual)
  bool fp32_output = false;  ///< bf16 / fp16 input: float32 output and residual (PyTorch's out_dtype)
  Layout layout = Layout::NCDHW;
  /// The accuracy class of float32 inputs. Half-precision inputs have one class, set by their
  /// type (tolerance(const Conv3dDesc&)): this field is then ignored, so that PyTorch's
  /// allow_tf32 setting may be passed along unchanged.
  Precision precision = Precision::Fp32;
};

/// The element type of the output and the residual: the input's, or float32 on request.
constexpr DataType output_dtype(const Conv3dDesc& d) { return d.fp32_output ? DataType::Float32 : d.dtype; }

/// Device pointers (CUdeviceptr values or cudaMalloc results) to dense tensors in desc.layout's
/// order: input, weight, bias K (only if desc.bias; the input's type), output, residual (only if
/// desc.epilogue.residual) as the output, in its type; the residual may be the output itself
/// (each output is read, then written, by one thread).
class PreparedWeights;

struct Conv3dTensors {
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* output = nullptr;
  const void* residual = nullptr;
  /// The weights already rewritten for the kernel on the stream's device (prepare_weights(),
  /// <conv3djit/engine.hpp>): the call reads them instead of rewriting `weight`, which must be the
  /// tensor they were made from. Null: the call prepares the weights itself where its kernel needs
  /// them in a layout of its own.
  const PreparedWeights* prepared_weights = nullptr;
  /// The caller has checked each tensor's shape against the description (a binding holding the
  /// arrays' shapes does): the check of the pointers against their allocations is then skipped.
  bool shapes_checked = false;
};

/// Output extents N x K x OD x OH x OW of a valid description.
struct OutputExtents {
  int64_t n = 0, k = 0, d = 0, h = 0, w = 0;
  int64_t elements() const { return n * k * d * h * w; }
};

/// Per-side padding actually applied. `same` with an odd total puts the extra element at the end
/// (right side), exactly as PyTorch does, so before and after can differ.
struct ResolvedPadding {
  Dims3 before{0};
  Dims3 after{0};
};

/// The outcome of validate(): ok, or the error conv3d() would throw.
struct Validation {
  bool ok = true;
  ErrorCategory category = ErrorCategory::InvalidArgument;
  std::string message;
  explicit operator bool() const { return ok; }
};

/// A CUstream; a cudaStream_t is the same handle. nullptr is the legacy default stream of the
/// current context.
using Stream = void*;

/// Checks a description (and, if given, its tensors) without throwing. conv3d() calls this first.
CONV3DJIT_API Validation validate(const Conv3dDesc& desc, const Conv3dTensors* tensors = nullptr) noexcept;

/// Output extents of a description; throws Error(InvalidArgument) if the description is invalid.
CONV3DJIT_API OutputExtents output_extents(const Conv3dDesc& desc);

/// Padding per side after resolving same / valid; throws like output_extents().
CONV3DJIT_API ResolvedPadding resolved_padding(const Conv3dDesc& desc);

/// Runs the convolution on `stream`, asynchronously: it never synchronises. The first call for a
/// shape compiles (or reads from the disk cache) and loads its kernel; after that a call allocates
/// nothing except stream-ordered scratch memory (cuMemAllocAsync / cuMemFreeAsync on `stream`)
/// for the plans that need it, so it can be captured into a CUDA graph. Uses the process-wide
/// default Engine (see engine.hpp).
/// Throws Error; on an invalid call nothing is launched or written.
CONV3DJIT_API void conv3d(const Conv3dDesc& desc, const Conv3dTensors& tensors, Stream stream = nullptr);

/// "identity", "relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "hardswish",
/// "clamp": the names the CLI, manifests and the Python package use.
CONV3DJIT_API const char* activation_name(Activation a) noexcept;
/// The Activation of a name above (any case), or nothing.
CONV3DJIT_API std::optional<Activation> parse_activation(const std::string& name) noexcept;

/// "zeros", "reflect", "replicate", "circular": nn.Conv3d's names.
CONV3DJIT_API const char* padding_mode_name(PaddingMode m) noexcept;
/// The PaddingMode of a name above (any case), or nothing.
CONV3DJIT_API std::optional<PaddingMode> parse_padding_mode(const std::string& name) noexcept;

/// "fp32", "bf16", "fp16".
CONV3DJIT_API const char* dtype_name(DataType t) noexcept;
/// The DataType of a name above or of PyTorch's ("float32", "bfloat16", "float16"; any case), or nothing.
CONV3DJIT_API std::optional<DataType> parse_dtype(const std::string& name) noexcept;

/// "ncdhw", "ndhwc".
CONV3DJIT_API const char* layout_name(Layout l) noexcept;
/// The Layout of a name above (any case), or nothing.
CONV3DJIT_API std::optional<Layout> parse_layout(const std::string& name) noexcept;

/// "N16_C3_D64_H64_W64_K64_k3x5x7_s1x1x1_p0x0x0_d1x1x1_g1_nobias_fp32": a readable one-line name;
/// a padding mode other than zeros follows the padding ("_p1x1x1_replicate"); a half type
/// replaces the class ("_bf16", "_fp16_out32" with float32 output), NDHWC adds "_ndhwc"; an
/// epilogue other than the plain one adds its parts ("_silu", "_a0.5", "_res").
CONV3DJIT_API std::string describe(const Conv3dDesc& desc);

}  // namespace conv3djit
