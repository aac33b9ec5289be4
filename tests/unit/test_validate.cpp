// validate(), output_extents(), resolved_padding() and conv3d()'s refusal of bad input: every rule
// has a case asserting the category and that the message names the field and value.
#include <limits>
#include <string>

#include "catch.hpp"
#include "conv3djit/conv3d.hpp"
#include "conv3djit/engine.hpp"

using namespace conv3djit;

namespace {

Conv3dDesc reference_problem() {
  Conv3dDesc d;
  d.n = 16; d.c = 3; d.d = d.h = d.w = 64;
  d.k = 64; d.kernel = {3, 5, 7};
  return d;
}

// Fake but non-null device pointers: validation never dereferences them.
Conv3dTensors some_tensors() {
  static float dummy[4];
  return {dummy, dummy + 1, dummy + 2, dummy + 3};
}

void expect_invalid(const Conv3dDesc& d, const std::string& needle,
                    ErrorCategory category = ErrorCategory::InvalidArgument,
                    const Conv3dTensors* t = nullptr) {
  const Validation v = validate(d, t);
  INFO("message: " << v.message);
  CHECK_FALSE(v.ok);
  CHECK(v.category == category);
  CHECK(v.message.find(needle) != std::string::npos);
  // conv3d() refuses the same call with the same error before touching any GPU.
  const Conv3dTensors tensors = t ? *t : some_tensors();
  try {
    conv3d(d, tensors);
    FAIL("conv3d accepted an invalid call");
  } catch (const Error& e) {
    CHECK(e.category() == category);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("the reference problem is valid and has PyTorch's output extents") {
  const Conv3dDesc d = reference_problem();
  CHECK(validate(d).ok);
  const OutputExtents o = output_extents(d);
  CHECK(o.n == 16); CHECK(o.k == 64); CHECK(o.d == 62); CHECK(o.h == 60); CHECK(o.w == 58);
  CHECK(describe(d) == "N16_C3_D64_H64_W64_K64_k3x5x7_s1x1x1_p0x0x0_d1x1x1_g1_nobias_fp32");
}

TEST_CASE("output extents follow floor((in + 2p - dil*(k-1) - 1)/s) + 1") {
  Conv3dDesc d = reference_problem();
  d.d = 17; d.h = 20; d.w = 9;
  d.kernel = {3, 4, 2}; d.stride = {2, 3, 1}; d.padding = Dims3{1, 2, 0}; d.dilation = {2, 1, 3};
  const OutputExtents o = output_extents(d);
  CHECK(o.d == (17 + 2 - 4 - 1) / 2 + 1);
  CHECK(o.h == (20 + 4 - 3 - 1) / 3 + 1);
  CHECK(o.w == (9 + 0 - 3 - 1) / 1 + 1);
}

TEST_CASE("padding same keeps extents and puts the odd element at the end") {
  Conv3dDesc d = reference_problem();
  d.d = 10; d.h = 11; d.w = 12;
  d.kernel = {4, 3, 2}; d.dilation = {1, 2, 3}; d.padding = Padding::same();
  const OutputExtents o = output_extents(d);
  CHECK(o.d == 10); CHECK(o.h == 11); CHECK(o.w == 12);
  const ResolvedPadding p = resolved_padding(d);
  // totals: 3, 4, 3 -> before = total / 2, after = the rest (PyTorch's _conv_forward rule)
  CHECK(p.before == Dims3{1, 2, 1});
  CHECK(p.after == Dims3{2, 2, 2});
}

TEST_CASE("per-side padding: before and after each axis, each checked by name") {
  Conv3dDesc d = reference_problem();
  d.d = 9; d.h = 10; d.w = 11;
  d.kernel = {3, 3, 3};
  d.padding = Padding::per_side({2, 1, 0}, {0, 1, 2});  // causal in time
  const OutputExtents o = output_extents(d);
  CHECK(o.d == 9);
  CHECK(o.h == 10);
  CHECK(o.w == 11);
  CHECK(resolved_padding(d).before == Dims3{2, 1, 0});
  CHECK(resolved_padding(d).after == Dims3{0, 1, 2});
  CHECK(describe(d).find("_p2-0x1-1x0-2_") != std::string::npos);
  d.padding = Padding::per_side({0, 0, 0}, {0, -1, 0});
  expect_invalid(d, "padding_after[H] = -1: padding must be >= 0");
  d.padding = Padding::per_side({0, 0, int64_t{1} << 30}, {0, 0, 0});
  expect_invalid(d, "padding_before[W] = 1073741824: padding must be < 2^30");
}

TEST_CASE("padding valid means none") {
  Conv3dDesc d = reference_problem();
  d.padding = Padding::valid();
  CHECK(output_extents(d).w == 58);
  CHECK(resolved_padding(d).before == Dims3{0});
}

TEST_CASE("non-positive sizes are refused naming the field") {
  const char* names[] = {"n = ", "c = ", "d = ", "h = ", "w = ", "k = "};
  for (int i = 0; i < 6; ++i) {
    for (int64_t bad : {0, -3}) {
      Conv3dDesc d = reference_problem();
      int64_t* fields[] = {&d.n, &d.c, &d.d, &d.h, &d.w, &d.k};
      *fields[i] = bad;
      DYNAMIC_SECTION(names[i] << bad) { expect_invalid(d, std::string(names[i]) + std::to_string(bad)); }
    }
  }
}

TEST_CASE("kernel extents must be positive") {
  Conv3dDesc d = reference_problem();
  d.kernel = {3, 0, 7};
  expect_invalid(d, "kernel[H] = 0");
}

TEST_CASE("stride and dilation below 1 are refused") {
  Conv3dDesc d = reference_problem();
  d.stride = {1, 1, 0};
  expect_invalid(d, "stride[W] = 0: stride must be");
  d = reference_problem();
  d.dilation = {-1, 1, 1};
  expect_invalid(d, "dilation[D] = -1");
}

TEST_CASE("negative padding is refused") {
  Conv3dDesc d = reference_problem();
  d.padding = Dims3{0, -1, 0};
  expect_invalid(d, "padding[H] = -1");
}

TEST_CASE("same padding with stride > 1 is refused as PyTorch does") {
  Conv3dDesc d = reference_problem();
  d.padding = Padding::same();
  d.stride = {1, 2, 1};
  expect_invalid(d, "stride[H] = 2: padding='same'");
}

TEST_CASE("an effective kernel larger than the padded input is refused") {
  Conv3dDesc d = reference_problem();
  d.d = 4; d.kernel = {3, 3, 3}; d.dilation = {2, 1, 1};  // effective 5 > 4
  expect_invalid(d, "kernel[D] = 3 with dilation 2: effective kernel 5 exceeds the padded input 4");
  d.padding = Dims3{1, 0, 0};  // padded 6 >= 5: fine
  CHECK(validate(d).ok);
}

TEST_CASE("channels must divide by groups") {
  Conv3dDesc d = reference_problem();
  d.groups = 2;  // c = 3
  expect_invalid(d, "c = 3: in_channels must be divisible by groups = 2");
  d.c = 4; d.k = 6; d.groups = 4;
  expect_invalid(d, "k = 6: out_channels must be divisible by groups = 4");
  d.groups = 0;
  expect_invalid(d, "groups = 0");
}

TEST_CASE("null pointers are refused") {
  const Conv3dDesc d = reference_problem();
  Conv3dTensors t = some_tensors();
  t.input = nullptr;
  expect_invalid(d, "tensors.input = null", ErrorCategory::InvalidArgument, &t);
  t = some_tensors(); t.weight = nullptr;
  expect_invalid(d, "tensors.weight = null", ErrorCategory::InvalidArgument, &t);
  t = some_tensors(); t.output = nullptr;
  expect_invalid(d, "tensors.output = null", ErrorCategory::InvalidArgument, &t);
  Conv3dDesc with_bias = d;
  with_bias.bias = true;
  t = some_tensors(); t.bias = nullptr;
  expect_invalid(with_bias, "tensors.bias = null", ErrorCategory::InvalidArgument, &t);
  CHECK(validate(d, &t).ok);  // no bias wanted, none given
}

TEST_CASE("epilogue scalars, clamp bounds and the residual tensor are checked by name") {
  Conv3dDesc d = reference_problem();
  d.epilogue.alpha = std::numeric_limits<float>::quiet_NaN();
  expect_invalid(d, "epilogue.alpha = nan: must be finite", ErrorCategory::InvalidArgument);
  d = reference_problem();
  d.epilogue.beta = std::numeric_limits<float>::infinity();
  expect_invalid(d, "epilogue.beta = inf: must be finite", ErrorCategory::InvalidArgument);
  d = reference_problem();
  d.epilogue.activation = Activation::Clamp;
  d.epilogue.clamp_min = 1.f;
  d.epilogue.clamp_max = -1.f;
  expect_invalid(d, "epilogue.clamp_min = 1 > epilogue.clamp_max = -1", ErrorCategory::InvalidArgument);
  d.epilogue.activation = Activation::Relu;  // the bounds matter to Clamp only
  CHECK(validate(d).ok);
  d = reference_problem();
  d.epilogue.activation = static_cast<Activation>(42);
  expect_invalid(d, "epilogue.activation = 42: not an Activation", ErrorCategory::InvalidArgument);
  d = reference_problem();
  d.epilogue.residual = true;
  Conv3dTensors t = some_tensors();
  expect_invalid(d, "tensors.residual = null: desc.epilogue.residual is true", ErrorCategory::InvalidArgument, &t);
  t.residual = t.output;  // in place is allowed
  CHECK(validate(d, &t).ok);
  d.epilogue.residual = false;
  expect_invalid(d, "tensors.residual is given but desc.epilogue.residual is false", ErrorCategory::InvalidArgument, &t);
}

TEST_CASE("activation names: every one round-trips, any case, and describe names the epilogue") {
  for (int a = 0; a <= static_cast<int>(Activation::Clamp); ++a) {
    const Activation act = static_cast<Activation>(a);
    INFO(activation_name(act));
    CHECK(parse_activation(activation_name(act)) == act);
  }
  CHECK(parse_activation("SiLU") == Activation::Silu);
  CHECK_FALSE(parse_activation("swish").has_value());
  Conv3dDesc d = reference_problem();
  const std::string plain = describe(d);
  d.epilogue.activation = Activation::Silu;
  d.epilogue.alpha = 0.5f;
  d.epilogue.residual = true;
  CHECK(describe(d) == plain + "_a0.5_silu_res");
  d.epilogue.activation = Activation::Clamp;
  d.epilogue.alpha = 1.f;
  d.epilogue.beta = 2.f;
  CHECK(describe(d) == plain + "_clamp0-6_res2");
}

TEST_CASE("padding modes follow F.pad's rules: reflect below the extent, circular up to it") {
  Conv3dDesc d = reference_problem();
  d.d = 4, d.h = 5, d.w = 6;
  d.kernel = 1;
  d.padding = Padding::per_side({3, 4, 5}, {3, 4, 5});
  d.padding_mode = PaddingMode::Reflect;
  CHECK(validate(d).ok);
  d.padding = Padding::per_side({3, 5, 5}, {3, 4, 5});
  expect_invalid(d, "padding before H = 5: padding_mode='reflect' needs padding < the input extent h = 5");
  d.padding = Padding::per_side({3, 4, 5}, {3, 4, 6});
  expect_invalid(d, "padding after W = 6: padding_mode='reflect' needs padding < the input extent w = 6");
  d.padding = Padding(Dims3{4, 5, 6});
  d.padding_mode = PaddingMode::Circular;
  CHECK(validate(d).ok);
  d.padding = Padding(Dims3{5, 5, 6});
  expect_invalid(d, "padding before D = 5: padding_mode='circular' needs padding <= the input extent d = 4");
  d.padding_mode = PaddingMode::Replicate;
  d.padding = Padding(Dims3{100, 100, 100});
  CHECK(validate(d).ok);
  // 'same' resolves first: a 1 x 1 x 7 kernel pads W by 3 on each side, more than reflect allows at W = 3.
  d.padding = Padding::same();
  d.kernel = Dims3{1, 1, 7};
  d.w = 3;
  d.padding_mode = PaddingMode::Reflect;
  expect_invalid(d, "padding before W = 3: padding_mode='reflect' needs padding < the input extent w = 3");
  d.padding_mode = static_cast<PaddingMode>(7);
  expect_invalid(d, "padding_mode = 7: must be zeros, reflect, replicate or circular");
}

TEST_CASE("padding mode names round-trip, any case, and describe names a mode other than zeros") {
  for (const PaddingMode m : {PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular}) {
    INFO(padding_mode_name(m));
    CHECK(parse_padding_mode(padding_mode_name(m)) == m);
  }
  CHECK(parse_padding_mode("Replicate") == PaddingMode::Replicate);
  CHECK_FALSE(parse_padding_mode("symmetric").has_value());
  Conv3dDesc d = reference_problem();
  d.padding = Padding(1);
  const std::string zeros = describe(d);
  CHECK(zeros.find("_p1x1x1_d1x1x1_") != std::string::npos);
  d.padding_mode = PaddingMode::Circular;
  CHECK(describe(d).find("_p1x1x1_circular_d1x1x1_") != std::string::npos);
}

TEST_CASE("sizes that overflow int64 are refused") {
  Conv3dDesc d = reference_problem();
  d.n = int64_t{1} << 50;  // input: 2^50 * 3 * 64^3 elements
  expect_invalid(d, "input: element count overflows int64");
  d = reference_problem();
  d.n = int64_t{1} << 30; d.c = 1; d.d = d.h = d.w = 1024; d.kernel = {1, 1, 1};  // output 2^66
  expect_invalid(d, "output: element count overflows int64");
  d = reference_problem();
  d.n = int64_t{1} << 26; d.c = 1; d.k = 1; d.d = d.h = d.w = 1 << 12; d.kernel = {1, 1, 1};
  expect_invalid(d, "input = 4611686018427387904 elements: byte size overflows int64");
}

TEST_CASE("extreme extents with padding are refused without signed overflow") {
  // Found with UBSan: D + padding overflowed before any size was checked.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Conv3dDesc d = reference_problem();
  d.n = 1; d.c = 1; d.d = kMax; d.h = d.w = 4; d.k = 1; d.kernel = {3, 3, 3};
  d.padding = Dims3{1};
  expect_invalid(d, "d = 9223372036854775807 with padding 1 + 1: the padded extent overflows int64");
  d.padding = Padding::same();
  expect_invalid(d, "d = 9223372036854775807 with padding 1 + 1: the padded extent overflows int64");
  d.padding = Dims3{(int64_t{1} << 30) - 1};
  expect_invalid(d, "d = 9223372036854775807 with padding 1073741823 + 1073741823: the padded extent "
                    "overflows int64");
  d.padding = Padding::valid();  // no addition: the element count is what overflows
  expect_invalid(d, "input: element count overflows int64");
  d = reference_problem();
  d.w = kMax - 1; d.padding = Dims3{0, 0, 1};  // W + 1 fits, W + 2 does not
  expect_invalid(d, "w = 9223372036854775806 with padding 1 + 1: the padded extent overflows int64");
  d = reference_problem();
  d.h = kMax; d.padding = Padding::same(); d.kernel = {1, 1, 1};  // no padding needed: fits
  expect_invalid(d, "input: element count overflows int64");
}

TEST_CASE("padding of 2^30 or more is refused, as the message says") {
  Conv3dDesc d = reference_problem();
  d.padding = Dims3{0, 0, int64_t{1} << 30};
  expect_invalid(d, "padding[W] = 1073741824: padding must be < 2^30");
  d.padding = Dims3{0, 0, (int64_t{1} << 30) - 1};
  CHECK(validate(d).ok);
  d.padding = Dims3{std::numeric_limits<int64_t>::max()};
  expect_invalid(d, "padding[D] = 9223372036854775807: padding must be < 2^30");
}

TEST_CASE("extents at the top of int64 are refused by name, never wrapped") {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const char* names[] = {"n", "d", "h", "w", "k"};  // c has its own limit (channels per group)
  for (int i = 0; i < 5; ++i) {
    Conv3dDesc d = reference_problem();
    d.c = 1; d.kernel = {1, 1, 1};
    int64_t* fields[] = {&d.n, &d.d, &d.h, &d.w, &d.k};
    *fields[i] = kMax;
    DYNAMIC_SECTION(names[i] << " = max") {
      const Validation v = validate(d);
      INFO("message: " << v.message);
      CHECK_FALSE(v.ok);
      CHECK(v.category == ErrorCategory::InvalidArgument);
      CHECK(v.message.find("overflows int64") != std::string::npos);
    }
  }
}

TEST_CASE("unsupported dtype and layout are refused as unsupported") {
  Conv3dDesc d = reference_problem();
  d.dtype = static_cast<DataType>(7);
  expect_invalid(d, "dtype = 7", ErrorCategory::Unsupported);
  d = reference_problem();
  d.layout = static_cast<Layout>(3);
  expect_invalid(d, "layout = 3", ErrorCategory::Unsupported);
}

TEST_CASE("half types and NDHWC are valid; their sizes count two bytes an element") {
  for (DataType t : {DataType::BFloat16, DataType::Float16}) {
    for (Layout l : {Layout::NCDHW, Layout::NDHWC}) {
      for (bool wide : {false, true}) {
        Conv3dDesc d = reference_problem();
        d.dtype = t;
        d.layout = l;
        d.fp32_output = wide;
        d.precision = Precision::Tf32;  // ignored for half inputs, never refused
        INFO(describe(d));
        CHECK(validate(d).ok);
        CHECK(output_dtype(d) == (wide ? DataType::Float32 : t));
      }
    }
  }
  Conv3dDesc f = reference_problem();
  f.fp32_output = true;
  CHECK(output_dtype(f) == DataType::Float32);
  // 2^62 input elements: their bf16 bytes (2^63) overflow int64 too.
  Conv3dDesc huge = reference_problem();
  huge.n = int64_t{1} << 32;
  huge.d = huge.h = huge.w = 1 << 10;
  huge.kernel = 1;
  huge.c = 1;
  huge.dtype = DataType::BFloat16;
  expect_invalid(huge, "elements: byte size overflows int64", ErrorCategory::InvalidArgument);
}

TEST_CASE("element types and layouts have names, in any case, PyTorch's too") {
  CHECK(std::string(dtype_name(DataType::Float32)) == "fp32");
  CHECK(std::string(dtype_name(DataType::BFloat16)) == "bf16");
  CHECK(std::string(dtype_name(DataType::Float16)) == "fp16");
  CHECK(parse_dtype("BF16") == DataType::BFloat16);
  CHECK(parse_dtype("bfloat16") == DataType::BFloat16);
  CHECK(parse_dtype("float16") == DataType::Float16);
  CHECK(parse_dtype("float32") == DataType::Float32);
  CHECK_FALSE(parse_dtype("fp8").has_value());
  CHECK(std::string(layout_name(Layout::NDHWC)) == "ndhwc");
  CHECK(parse_layout("NDHWC") == Layout::NDHWC);
  CHECK(parse_layout("ncdhw") == Layout::NCDHW);
  CHECK_FALSE(parse_layout("nhwc").has_value());
  Conv3dDesc d = reference_problem();
  d.dtype = DataType::Float16;
  d.fp32_output = true;
  d.layout = Layout::NDHWC;
  CHECK(describe(d).find("_nobias_fp16_out32_ndhwc") != std::string::npos);
  d.dtype = DataType::BFloat16;
  d.fp32_output = false;
  d.layout = Layout::NCDHW;
  CHECK(describe(d).find("_nobias_bf16") != std::string::npos);
  CHECK(describe(reference_problem()).find("_nobias_fp32") != std::string::npos);
}

TEST_CASE("error categories have stable names") {
  CHECK(std::string(to_string(ErrorCategory::InvalidArgument)) == "invalid_argument");
  CHECK(std::string(to_string(ErrorCategory::NoDevice)) == "no_device");
  const Error e(ErrorCategory::CacheIO, "x");
  CHECK(std::string(e.what()) == "cache_io: x");
}
