// validate(): every rule a description and its tensors must satisfy, each with a message that
// names the field and its value. make_problem() is the throwing form the pipeline uses.
#include <fmt/format.h>

#include <cmath>

#include "core/problem.hpp"

namespace conv3djit {
namespace {

constexpr const char* kAxis[3] = {"D", "H", "W"};
constexpr const char* kExtent[3] = {"d", "h", "w"};  // the description's field of each axis

struct Fail {
  ErrorCategory category;
  std::string message;
};

Fail invalid(std::string message) { return {ErrorCategory::InvalidArgument, std::move(message)}; }

// Checked int64 arithmetic for every derived extent and size: false when the exact result does
// not fit (signed overflow is undefined behaviour, so it must never happen unchecked).
bool checked_add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Product of factors, or a failure naming `what` when it does not fit in int64 (also as bytes).
std::optional<Fail> checked_size(const char* what, std::initializer_list<int64_t> factors, DataType type,
                                 int64_t* out) {
  int64_t total = 1;
  for (int64_t f : factors) {
    if (!checked_mul(total, f, &total)) {
      return invalid(fmt::format("{}: element count overflows int64", what));
    }
  }
  int64_t bytes = 0;
  if (!checked_mul(total, static_cast<int64_t>(detail::element_bytes(type)), &bytes)) {
    return invalid(fmt::format("{} = {} elements: byte size overflows int64", what, total));
  }
  *out = total;
  return std::nullopt;
}

std::optional<Fail> check_epilogue(const Epilogue& e) {
  if (static_cast<int>(e.activation) < 0 || static_cast<int>(e.activation) > static_cast<int>(Activation::Clamp)) {
    return invalid(fmt::format("epilogue.activation = {}: not an Activation", static_cast<int>(e.activation)));
  }
  const std::pair<const char*, float> scalars[] = {{"alpha", e.alpha}, {"slope", e.slope}, {"clamp_min", e.clamp_min},
                                                   {"clamp_max", e.clamp_max}, {"gamma", e.gamma}, {"beta", e.beta}};
  for (const auto& [name, v] : scalars) {
    if (!std::isfinite(v)) return invalid(fmt::format("epilogue.{} = {}: must be finite", name, v));
  }
  if (e.activation == Activation::Clamp && e.clamp_min > e.clamp_max) {
    return invalid(fmt::format("epilogue.clamp_min = {} > epilogue.clamp_max = {}: the clamp's bounds are reversed",
                               e.clamp_min, e.clamp_max));
  }
  return std::nullopt;
}

std::optional<Fail> check(const Conv3dDesc& d, const Conv3dTensors* t, detail::Problem* p) {
  if (d.dtype != DataType::Float32 && d.dtype != DataType::BFloat16 && d.dtype != DataType::Float16) {
    return Fail{ErrorCategory::Unsupported,
                fmt::format("dtype = {}: must be Float32, BFloat16 or Float16", static_cast<int>(d.dtype))};
  }
  if (d.layout != Layout::NCDHW && d.layout != Layout::NDHWC) {
    return Fail{ErrorCategory::Unsupported,
                fmt::format("layout = {}: must be NCDHW or NDHWC", static_cast<int>(d.layout))};
  }
  if (d.precision != Precision::Fp32 && d.precision != Precision::Tf32) {
    return Fail{ErrorCategory::Unsupported,
                fmt::format("precision = {}: must be Fp32 or Tf32", static_cast<int>(d.precision))};
  }
  const std::pair<const char*, int64_t> sizes[] = {{"n", d.n}, {"c", d.c}, {"d", d.d},
                                                   {"h", d.h}, {"w", d.w}, {"k", d.k}};
  for (const auto& [name, v] : sizes) {
    if (v <= 0) return invalid(fmt::format("{} = {}: must be >= 1", name, v));
  }
  if (d.groups <= 0) return invalid(fmt::format("groups = {}: must be >= 1", d.groups));
  if (d.c % d.groups != 0) {
    return invalid(fmt::format("c = {}: in_channels must be divisible by groups = {}", d.c, d.groups));
  }
  if (d.k % d.groups != 0) {
    return invalid(fmt::format("k = {}: out_channels must be divisible by groups = {}", d.k, d.groups));
  }
  const PaddingMode mode = d.padding_mode;
  if (mode != PaddingMode::Zeros && mode != PaddingMode::Reflect && mode != PaddingMode::Replicate &&
      mode != PaddingMode::Circular) {
    return invalid(fmt::format("padding_mode = {}: must be zeros, reflect, replicate or circular", static_cast<int>(mode)));
  }
  const int64_t in[3] = {d.d, d.h, d.w};
  for (int a = 0; a < 3; ++a) {
    // Kernel extents become template arguments: keep them in int range.
    if (d.kernel[a] <= 0 || d.kernel[a] > 1024) {
      return invalid(fmt::format("kernel[{}] = {}: must be in [1, 1024]", kAxis[a], d.kernel[a]));
    }
    if (d.stride[a] < 1 || d.stride[a] > 1024) {
      return invalid(fmt::format("stride[{}] = {}: stride must be in [1, 1024]", kAxis[a], d.stride[a]));
    }
    if (d.dilation[a] < 1 || d.dilation[a] > 1024) {
      return invalid(fmt::format("dilation[{}] = {}: dilation must be in [1, 1024]", kAxis[a], d.dilation[a]));
    }
    const bool explicit_amounts = d.padding.mode == Padding::Mode::Explicit || d.padding.mode == Padding::Mode::PerSide;
    const bool per_side = d.padding.mode == Padding::Mode::PerSide;
    for (const auto& [side, amount] : {std::pair<const char*, int64_t>{per_side ? "padding_before" : "padding", d.padding.amount[a]},
                                       std::pair<const char*, int64_t>{"padding_after", per_side ? d.padding.after[a] : 0}}) {
      if (explicit_amounts && amount < 0) {
        return invalid(fmt::format("{}[{}] = {}: padding must be >= 0", side, kAxis[a], amount));
      }
      if (explicit_amounts && amount >= (int64_t{1} << 30)) {
        return invalid(fmt::format("{}[{}] = {}: padding must be < 2^30", side, kAxis[a], amount));
      }
    }
    if (d.padding.mode == Padding::Mode::Same && d.stride[a] != 1) {
      return invalid(fmt::format("stride[{}] = {}: padding='same' is not supported for strided "
                                 "convolutions (as in PyTorch)", kAxis[a], d.stride[a]));
    }
  }
  if (auto f = check_epilogue(d.epilogue)) return f;
  if (d.c / d.groups > 65536) {
    return invalid(fmt::format("c / groups = {}: channels per group must be <= 65536", d.c / d.groups));
  }

  detail::Problem prob;
  prob.desc = d;
  prob.c_per_group = d.c / d.groups;
  prob.k_per_group = d.k / d.groups;
  int64_t outv[3];
  int64_t before[3] = {0, 0, 0}, after[3] = {0, 0, 0};
  for (int a = 0; a < 3; ++a) {
    // Effective kernel extent - 1. The bounds above keep it small; checked all the same, so that
    // widening them cannot bring back an unchecked product.
    int64_t span = 0;
    if (!checked_mul(d.dilation[a], d.kernel[a] - 1, &span)) {
      return invalid(fmt::format("kernel[{}] = {} with dilation {}: effective kernel extent overflows int64",
                                 kAxis[a], d.kernel[a], d.dilation[a]));
    }
    switch (d.padding.mode) {
      case Padding::Mode::Explicit: before[a] = after[a] = d.padding.amount[a]; break;
      case Padding::Mode::PerSide:
        before[a] = d.padding.amount[a];
        after[a] = d.padding.after[a];
        break;
      case Padding::Mode::Valid: before[a] = after[a] = 0; break;
      case Padding::Mode::Same:  // PyTorch: the odd element of the total goes to the end
        before[a] = span / 2;
        after[a] = span - before[a];
        break;
    }
    // PyTorch's rules (F.pad): a reflection does not repeat the edge, so it reaches extent - 1
    // positions; a wrap must not go around more than once. The kernels' index maps rely on both.
    for (const auto& [side, amount] : {std::pair<const char*, int64_t>{"before", before[a]}, {"after", after[a]}}) {
      if (mode == PaddingMode::Reflect && amount >= in[a]) {
        return invalid(fmt::format("padding {} {} = {}: padding_mode='reflect' needs padding < the input extent {} = {}",
                                   side, kAxis[a], amount, kExtent[a], in[a]));
      }
      if (mode == PaddingMode::Circular && amount > in[a]) {
        return invalid(fmt::format("padding {} {} = {}: padding_mode='circular' needs padding <= the input extent {} = {}",
                                   side, kAxis[a], amount, kExtent[a], in[a]));
      }
    }
    int64_t padded = 0;
    if (!checked_add(in[a], before[a], &padded) || !checked_add(padded, after[a], &padded)) {
      return invalid(fmt::format("{} = {} with padding {} + {}: the padded extent overflows int64",
                                 kExtent[a], in[a], before[a], after[a]));
    }
    if (span >= padded) {  // span + 1 > padded, without the addition
      return invalid(fmt::format("kernel[{}] = {} with dilation {}: effective kernel {} exceeds the "
                                 "padded input {} (output would be empty)",
                                 kAxis[a], d.kernel[a], d.dilation[a], span + 1, padded));
    }
    outv[a] = (padded - span - 1) / d.stride[a] + 1;
  }
  prob.out = {d.n, d.k, outv[0], outv[1], outv[2]};
  prob.pad.before = {before[0], before[1], before[2]};
  prob.pad.after = {after[0], after[1], after[2]};
  if (auto f = checked_size("input", {d.n, d.c, d.d, d.h, d.w}, d.dtype, &prob.input_elements)) return f;
  if (auto f = checked_size("weight", {d.k, prob.c_per_group, d.kernel.d, d.kernel.h, d.kernel.w}, d.dtype,
                            &prob.weight_elements)) return f;
  prob.out_dtype = output_dtype(d);
  if (auto f = checked_size("output", {d.n, d.k, outv[0], outv[1], outv[2]}, prob.out_dtype, &prob.output_elements)) return f;

  if (t != nullptr) {
    if (t->input == nullptr) return invalid("tensors.input = null: a device pointer is required");
    if (t->weight == nullptr) return invalid("tensors.weight = null: a device pointer is required");
    if (t->output == nullptr) return invalid("tensors.output = null: a device pointer is required");
    if (d.bias && t->bias == nullptr) {
      return invalid("tensors.bias = null: desc.bias is true, so a bias pointer is required");
    }
    if (d.epilogue.residual && t->residual == nullptr) {
      return invalid("tensors.residual = null: desc.epilogue.residual is true, so a residual pointer is required");
    }
    if (!d.epilogue.residual && t->residual != nullptr) {
      return invalid("tensors.residual is given but desc.epilogue.residual is false: it would not be read");
    }
  }
  if (p != nullptr) *p = prob;
  return std::nullopt;
}

}  // namespace

Validation validate(const Conv3dDesc& desc, const Conv3dTensors* tensors) noexcept {
  try {
    if (auto f = check(desc, tensors, nullptr)) return {false, f->category, std::move(f->message)};
    return {};
  } catch (const std::exception& e) {  // only allocation failure can get here
    return {false, ErrorCategory::InvalidArgument, e.what()};
  }
}

namespace detail {
Problem make_problem(const Conv3dDesc& desc, const Conv3dTensors* tensors) {
  Problem p;
  if (auto f = check(desc, tensors, &p)) throw Error(f->category, f->message);
  return p;
}
}  // namespace detail

OutputExtents output_extents(const Conv3dDesc& desc) { return detail::make_problem(desc).out; }

ResolvedPadding resolved_padding(const Conv3dDesc& desc) { return detail::make_problem(desc).pad; }

}  // namespace conv3djit
