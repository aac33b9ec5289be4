#include <fmt/format.h>

#include <cctype>
#include <utility>

#include "conv3djit/conv3d.hpp"

namespace conv3djit {

namespace {
constexpr std::pair<Activation, const char*> kActivations[] = {
    {Activation::Identity, "identity"}, {Activation::Relu, "relu"},           {Activation::LeakyRelu, "leaky_relu"},
    {Activation::Gelu, "gelu"},         {Activation::GeluTanh, "gelu_tanh"}, {Activation::Silu, "silu"},
    {Activation::Sigmoid, "sigmoid"},   {Activation::Tanh, "tanh"},           {Activation::Hardswish, "hardswish"},
    {Activation::Clamp, "clamp"}};

constexpr std::pair<PaddingMode, const char*> kPaddingModes[] = {{PaddingMode::Zeros, "zeros"},
                                                                  {PaddingMode::Reflect, "reflect"},
                                                                  {PaddingMode::Replicate, "replicate"},
                                                                  {PaddingMode::Circular, "circular"}};

constexpr std::pair<DataType, const char*> kDataTypes[] = {
    {DataType::Float32, "fp32"}, {DataType::BFloat16, "bf16"}, {DataType::Float16, "fp16"},
    {DataType::Float32, "float32"}, {DataType::BFloat16, "bfloat16"}, {DataType::Float16, "float16"}};

constexpr std::pair<Layout, const char*> kLayouts[] = {{Layout::NCDHW, "ncdhw"}, {Layout::NDHWC, "ndhwc"}};

template <class E, size_t N>
const char* name_of(const std::pair<E, const char*> (&table)[N], E value) noexcept {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "unknown";
}

template <class E, size_t N>
std::optional<E> parse_name(const std::pair<E, const char*> (&table)[N], const std::string& name) noexcept {
  std::string lower;
  for (char ch : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const auto& [value, known] : table) {
    if (lower == known) return value;
  }
  return std::nullopt;
}

// The parts of an epilogue that differ from the plain convolution's, in formula order.
std::string epilogue_suffix(const Epilogue& e) {
  const Epilogue plain;
  std::string s;
  if (e.alpha != plain.alpha) s += fmt::format("_a{}", e.alpha);
  if (e.activation == Activation::LeakyRelu) s += fmt::format("_leaky_relu{}", e.slope);
  else if (e.activation == Activation::Clamp) s += fmt::format("_clamp{}-{}", e.clamp_min, e.clamp_max);
  else if (e.activation != Activation::Identity) s += fmt::format("_{}", activation_name(e.activation));
  if (e.gamma != plain.gamma) s += fmt::format("_g{}", e.gamma);
  if (e.residual) s += e.beta == plain.beta ? std::string("_res") : fmt::format("_res{}", e.beta);
  return s;
}
}  // namespace

const char* activation_name(Activation a) noexcept { return name_of(kActivations, a); }

std::optional<Activation> parse_activation(const std::string& name) noexcept {
  return parse_name(kActivations, name);
}

const char* padding_mode_name(PaddingMode m) noexcept { return name_of(kPaddingModes, m); }

std::optional<PaddingMode> parse_padding_mode(const std::string& name) noexcept {
  return parse_name(kPaddingModes, name);
}

const char* dtype_name(DataType t) noexcept { return name_of(kDataTypes, t); }

std::optional<DataType> parse_dtype(const std::string& name) noexcept { return parse_name(kDataTypes, name); }

const char* layout_name(Layout l) noexcept { return name_of(kLayouts, l); }

std::optional<Layout> parse_layout(const std::string& name) noexcept { return parse_name(kLayouts, name); }

std::string describe(const Conv3dDesc& d) {
  std::string pad;
  switch (d.padding.mode) {
    case Padding::Mode::Same: pad = "same"; break;
    case Padding::Mode::Valid: pad = "valid"; break;
    case Padding::Mode::Explicit:
      pad = fmt::format("{}x{}x{}", d.padding.amount.d, d.padding.amount.h, d.padding.amount.w);
      break;
    case Padding::Mode::PerSide:  // before-after on each axis: causal in time is p2-0x1-1x1-1
      pad = fmt::format("{}-{}x{}-{}x{}-{}", d.padding.amount.d, d.padding.after.d, d.padding.amount.h,
                        d.padding.after.h, d.padding.amount.w, d.padding.after.w);
      break;
  }
  if (d.padding_mode != PaddingMode::Zeros) pad += fmt::format("_{}", padding_mode_name(d.padding_mode));
  // Float32 inputs name their accuracy class; half inputs have one class, their type's.
  std::string type = d.dtype == DataType::Float32 ? (d.precision == Precision::Tf32 ? "tf32" : "fp32")
                                                  : std::string(dtype_name(d.dtype));
  if (d.dtype != DataType::Float32 && d.fp32_output) type += "_out32";
  if (d.layout != Layout::NCDHW) type += fmt::format("_{}", layout_name(d.layout));
  return fmt::format("N{}_C{}_D{}_H{}_W{}_K{}_k{}x{}x{}_s{}x{}x{}_p{}_d{}x{}x{}_g{}_{}_{}{}", d.n, d.c,
                     d.d, d.h, d.w, d.k, d.kernel.d, d.kernel.h, d.kernel.w, d.stride.d, d.stride.h,
                     d.stride.w, pad, d.dilation.d, d.dilation.h, d.dilation.w, d.groups,
                     d.bias ? "bias" : "nobias", type,
                     epilogue_suffix(d.epilogue));
}

}  // namespace conv3djit
