// The float64 reference is what every GPU result is judged by, so it is checked here against
// hand-computed numbers, algebraic identities and an independent naive loop. Inputs are
// multiples of 1/8 in [-1, 1]: every product and sum is then exact in float64, so results must
// match bit for bit whatever the summation order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "conv3djit/conv3d.hpp"
#include "conv3djit/half.hpp"
#include "conv3djit/reference.hpp"
#include "config_cases.hpp"
#include "core/problem.hpp"
#include "core/reference_at.hpp"

using namespace conv3djit;

namespace {

std::vector<float> dyadic(std::mt19937& rng, int64_t count) {
  std::uniform_int_distribution<int> eighths(-8, 8);
  std::vector<float> v(count);
  for (float& x : v) x = eighths(rng) / 8.0f;
  return v;
}

int64_t weight_count(const Conv3dDesc& d) {
  return d.k * (d.c / d.groups) * d.kernel.d * d.kernel.h * d.kernel.w;
}

std::vector<double> run_reference(const Conv3dDesc& d, const std::vector<float>& in,
                                  const std::vector<float>& w, const std::vector<float>& b = {}) {
  std::vector<double> out(output_extents(d).elements());
  reference_conv3d(d, in.data(), w.data(), b.empty() ? nullptr : b.data(), out.data());
  return out;
}

// Where padded index i of an axis of n reads (-1: a zero), from the modes' definitions: the
// input mirrored about its edge elements, the edge repeated, the input repeated.
int64_t naive_source(PaddingMode mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PaddingMode::Zeros: return -1;
    case PaddingMode::Reflect:
      while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
      return i;
    case PaddingMode::Replicate: return i < 0 ? 0 : n - 1;
    case PaddingMode::Circular: return ((i % n) + n) % n;
  }
  return -1;
}

// nn.Conv3d written out directly: its padding rules, its output-size formula, and one bounds
// test per tap. Shares nothing with the library beyond the description type.
std::vector<double> naive_conv3d(const Conv3dDesc& d, const std::vector<float>& in,
                                 const std::vector<float>& w, const std::vector<float>& b) {
  int64_t before[3], out[3];
  const int64_t extent[3] = {d.d, d.h, d.w};
  for (int a = 0; a < 3; ++a) {
    const int64_t total = d.dilation[a] * (d.kernel[a] - 1);
    int64_t after = 0;
    switch (d.padding.mode) {
      case Padding::Mode::Explicit: before[a] = after = d.padding.amount[a]; break;
      case Padding::Mode::Valid: before[a] = after = 0; break;
      case Padding::Mode::Same: before[a] = total / 2; after = total - before[a]; break;
      case Padding::Mode::PerSide: before[a] = d.padding.amount[a]; after = d.padding.after[a]; break;
    }
    out[a] = (extent[a] + before[a] + after - total - 1) / d.stride[a] + 1;
  }
  const int64_t cg = d.c / d.groups, kg = d.k / d.groups;
  const int64_t KD = d.kernel.d, KH = d.kernel.h, KW = d.kernel.w;
  std::vector<double> result(d.n * d.k * out[0] * out[1] * out[2]);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t g = 0; g < d.groups; ++g)
      for (int64_t kk = 0; kk < kg; ++kk)
        for (int64_t od = 0; od < out[0]; ++od)
          for (int64_t oh = 0; oh < out[1]; ++oh)
            for (int64_t ow = 0; ow < out[2]; ++ow) {
              const int64_t k = g * kg + kk;
              double acc = d.bias ? b[k] : 0.0;
              for (int64_t cc = 0; cc < cg; ++cc)
                for (int64_t kd = 0; kd < KD; ++kd)
                  for (int64_t kh = 0; kh < KH; ++kh)
                    for (int64_t kw = 0; kw < KW; ++kw) {
                      const PaddingMode m = d.padding_mode;
                      const int64_t id = naive_source(m, od * d.stride.d - before[0] + kd * d.dilation.d, d.d);
                      const int64_t ih = naive_source(m, oh * d.stride.h - before[1] + kh * d.dilation.h, d.h);
                      const int64_t iw = naive_source(m, ow * d.stride.w - before[2] + kw * d.dilation.w, d.w);
                      const int64_t c = g * cg + cc;
                      if (id < 0 || ih < 0 || iw < 0) continue;
                      acc += double{w[(((k * cg + cc) * KD + kd) * KH + kh) * KW + kw]} *
                             in[(((n * d.c + c) * d.d + id) * d.h + ih) * d.w + iw];
                    }
              result[(((n * d.k + k) * out[0] + od) * out[1] + oh) * out[2] + ow] = acc;
            }
  return result;
}

// Exact equality, reporting the first differing element rather than a wall of failures.
void require_same(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
      REQUIRE(got[i] == want[i]);
    }
  }
}

Conv3dDesc desc_2d(int64_t h, int64_t w, Dims3 kernel) {
  Conv3dDesc d;
  d.h = h, d.w = w, d.kernel = kernel;
  return d;
}

// The category reference_conv3d throws for d, given a null bias.
ErrorCategory category_of(const Conv3dDesc& d) {
  std::vector<float> buffer(1 << 12);
  std::vector<double> out(1 << 12);
  try {
    reference_conv3d(d, buffer.data(), buffer.data(), nullptr, out.data());
  } catch (const Error& e) {
    return e.category();
  }
  FAIL("reference_conv3d did not throw");
  return ErrorCategory::InvalidArgument;
}

}  // namespace

TEST_CASE("reference: hand-computed small convolutions", "[reference]") {
  const std::vector<float> ramp = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // a 3x3 plane

  SECTION("2x2 ones over a 3x3 ramp") {
    require_same(run_reference(desc_2d(3, 3, {1, 2, 2}), ramp, std::vector<float>(4, 1)),
                 {12, 16, 24, 28});
  }
  SECTION("3x3 ones with padding 1 sums each neighbourhood") {
    Conv3dDesc d = desc_2d(3, 3, {1, 3, 3});
    d.padding = Dims3{0, 1, 1};
    require_same(run_reference(d, ramp, std::vector<float>(9, 1)),
                 {12, 21, 16, 27, 45, 33, 24, 39, 28});
  }
  SECTION("stride 2 and dilation 2 along W") {
    Conv3dDesc d = desc_2d(1, 7, {1, 1, 2});
    d.stride = Dims3{1, 1, 2};
    d.dilation = Dims3{1, 1, 2};
    // out[o] = x[2o] + 10 x[2o + 2], three outputs: floor((7 - 2 - 1) / 2) + 1.
    require_same(run_reference(d, {0, 1, 2, 3, 4, 5, 6}, {1, 10}), {20, 42, 64});
  }
  SECTION("difference along D (cross-correlation, no flip)") {
    Conv3dDesc d;
    d.d = 3;
    d.kernel = Dims3{2, 1, 1};
    require_same(run_reference(d, {1, 4, 9}, {1, -1}), {-3, -5});
  }
  SECTION("same with an even kernel pads one element at the end") {
    Conv3dDesc d = desc_2d(1, 3, {1, 1, 2});
    d.padding = Padding::same();
    require_same(run_reference(d, {1, 2, 3}, {1, 1}), {3, 5, 3});
  }
  SECTION("two groups with bias") {
    Conv3dDesc d = desc_2d(1, 2, {1, 1, 1});
    d.c = d.k = d.groups = 2;
    d.bias = true;
    require_same(run_reference(d, {1, 2, 3, 4}, {2, 3}, {1, -1}), {3, 5, 8, 11});
  }
}

TEST_CASE("reference: a delta kernel reproduces the shifted input", "[reference]") {
  std::mt19937 rng(7);
  Conv3dDesc d;
  d.c = d.k = 1;
  d.d = 4, d.h = 5, d.w = 6;
  d.kernel = Dims3{3, 3, 3};
  d.padding = Dims3{1, 2, 0};
  d.dilation = Dims3{1, 2, 1};
  const std::vector<float> in = dyadic(rng, d.d * d.h * d.w);
  const OutputExtents e = output_extents(d);
  for (int64_t tap = 0; tap < 27; tap += 4) {
    const int64_t a = tap / 9, b = tap / 3 % 3, c = tap % 3;
    DYNAMIC_SECTION("delta at (" << a << ", " << b << ", " << c << ")") {
      std::vector<float> w(27, 0);
      w[tap] = 1;
      std::vector<double> want;
      for (int64_t od = 0; od < e.d; ++od)
        for (int64_t oh = 0; oh < e.h; ++oh)
          for (int64_t ow = 0; ow < e.w; ++ow) {
            const int64_t id = od - 1 + a, ih = oh - 2 + 2 * b, iw = ow + c;
            const bool inside = id >= 0 && id < d.d && ih >= 0 && ih < d.h && iw >= 0 && iw < d.w;
            want.push_back(inside ? in[(id * d.h + ih) * d.w + iw] : 0.0);
          }
      require_same(run_reference(d, in, w), want);
    }
  }
}

TEST_CASE("reference: a 1x1x1 convolution is a matrix product", "[reference]") {
  std::mt19937 rng(11);
  Conv3dDesc d;
  d.n = 2, d.c = 5, d.k = 3, d.d = 2, d.h = 3, d.w = 4;
  const int64_t s = d.d * d.h * d.w;
  const std::vector<float> in = dyadic(rng, d.n * d.c * s), w = dyadic(rng, d.k * d.c);
  std::vector<double> want(d.n * d.k * s, 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t k = 0; k < d.k; ++k)
      for (int64_t c = 0; c < d.c; ++c)
        for (int64_t i = 0; i < s; ++i) {
          want[(n * d.k + k) * s + i] += double{w[k * d.c + c]} * in[(n * d.c + c) * s + i];
        }
  require_same(run_reference(d, in, w), want);
}

TEST_CASE("reference: linear in the input and in the weight", "[reference]") {
  std::mt19937 rng(13);
  Conv3dDesc d;
  d.n = 2, d.c = 4, d.k = 3, d.d = 5, d.h = 4, d.w = 6;
  d.kernel = Dims3{3, 2, 3};
  d.padding = Dims3{1, 1, 0};
  d.stride = Dims3{2, 1, 1};
  const int64_t in_count = d.n * d.c * d.d * d.h * d.w;
  const std::vector<float> x1 = dyadic(rng, in_count), x2 = dyadic(rng, in_count);
  const std::vector<float> w1 = dyadic(rng, weight_count(d)), w2 = dyadic(rng, weight_count(d));
  // 0.5 and -2 keep every value dyadic, so the identities hold exactly.
  auto mix = [](const auto& a, const auto& b) {
    auto m = a;
    for (size_t i = 0; i < a.size(); ++i) m[i] = 0.5f * a[i] - 2.0f * b[i];
    return m;
  };
  SECTION("input") {
    require_same(run_reference(d, mix(x1, x2), w1),
                 mix(run_reference(d, x1, w1), run_reference(d, x2, w1)));
  }
  SECTION("weight") {
    require_same(run_reference(d, x1, mix(w1, w2)),
                 mix(run_reference(d, x1, w1), run_reference(d, x1, w2)));
  }
}

TEST_CASE("reference: groups equal separate convolutions on channel slices", "[reference]") {
  std::mt19937 rng(17);
  Conv3dDesc d;
  d.n = 2, d.c = 6, d.k = 9, d.groups = 3, d.d = 4, d.h = 5, d.w = 3;
  d.kernel = Dims3{2, 3, 2};
  d.padding = Dims3{0, 1, 1};
  const int64_t s = d.d * d.h * d.w;
  const std::vector<float> in = dyadic(rng, d.n * d.c * s), w = dyadic(rng, weight_count(d));
  const std::vector<double> grouped = run_reference(d, in, w);
  const OutputExtents e = output_extents(d);
  const int64_t out_s = e.d * e.h * e.w;

  Conv3dDesc slice = d;
  slice.c = 2, slice.k = 3, slice.groups = 1;
  const int64_t w_per_k = weight_count(slice) / slice.k;
  for (int64_t g = 0; g < d.groups; ++g) {
    DYNAMIC_SECTION("group " << g) {
      std::vector<float> in_g;
      for (int64_t n = 0; n < d.n; ++n) {
        const auto first = in.begin() + (n * d.c + g * 2) * s;
        in_g.insert(in_g.end(), first, first + 2 * s);
      }
      const std::vector<float> w_g(w.begin() + g * 3 * w_per_k, w.begin() + (g + 1) * 3 * w_per_k);
      std::vector<double> want;
      for (int64_t n = 0; n < d.n; ++n) {
        const auto first = grouped.begin() + (n * d.k + g * 3) * out_s;
        want.insert(want.end(), first, first + 3 * out_s);
      }
      require_same(run_reference(slice, in_g, w_g), want);
    }
  }
}

TEST_CASE("reference: same keeps the extents, with even kernels and dilation", "[reference]") {
  std::mt19937 rng(19);
  for (int64_t k = 1; k <= 4; ++k) {
    for (int64_t dil = 1; dil <= 3; ++dil) {
      Conv3dDesc d;
      d.c = 2, d.k = 2, d.d = 5, d.h = 6, d.w = 7;
      d.kernel = Dims3{k, k + 1, 2};
      d.dilation = Dims3{dil, 1, dil};
      d.padding = Padding::same();
      DYNAMIC_SECTION("kernel " << k << "x" << k + 1 << "x2 dilation " << dil << "x1x" << dil) {
        const OutputExtents e = output_extents(d);
        CHECK(e.d == d.d);
        CHECK(e.h == d.h);
        CHECK(e.w == d.w);
        // PyTorch's rule: total = dilation * (k - 1), the odd element goes after.
        const ResolvedPadding p = resolved_padding(d);
        for (int a = 0; a < 3; ++a) {
          const int64_t total = d.dilation[a] * (d.kernel[a] - 1);
          CHECK(p.before[a] == total / 2);
          CHECK(p.after[a] == total - total / 2);
        }
        const std::vector<float> in = dyadic(rng, d.c * d.d * d.h * d.w);
        const std::vector<float> w = dyadic(rng, weight_count(d));
        require_same(run_reference(d, in, w), naive_conv3d(d, in, w, {}));
      }
    }
  }
}

TEST_CASE("reference: per-side padding is F.pad with zeros, then a valid convolution", "[reference]") {
  std::mt19937 rng(29);
  // Causal in time (2 before, 0 after), asymmetric in H, none before and 2 after in W.
  const Dims3 before{2, 1, 0}, after{0, 2, 2};
  Conv3dDesc d;
  d.n = 2, d.c = 3, d.k = 4, d.d = 4, d.h = 5, d.w = 6;
  d.kernel = Dims3{3, 3, 2};
  d.dilation = Dims3{1, 2, 1};
  d.stride = Dims3{1, 1, 2};
  d.padding = Padding::per_side(before, after);
  const std::vector<float> in = dyadic(rng, d.n * d.c * d.d * d.h * d.w);
  const std::vector<float> w = dyadic(rng, weight_count(d));
  // The input padded by hand: zeros around a copy.
  Conv3dDesc padded = d;
  padded.d = d.d + before.d + after.d;
  padded.h = d.h + before.h + after.h;
  padded.w = d.w + before.w + after.w;
  padded.padding = Padding::valid();
  std::vector<float> big(padded.n * padded.c * padded.d * padded.h * padded.w, 0.f);
  for (int64_t nc = 0; nc < d.n * d.c; ++nc)
    for (int64_t z = 0; z < d.d; ++z)
      for (int64_t y = 0; y < d.h; ++y)
        for (int64_t x = 0; x < d.w; ++x)
          big[((nc * padded.d + z + before.d) * padded.h + y + before.h) * padded.w + x + before.w] =
              in[((nc * d.d + z) * d.h + y) * d.w + x];
  const OutputExtents e = output_extents(d);
  CHECK(e.d == 4);  // causal: as many frames out as in
  CHECK(resolved_padding(d).before == before);
  CHECK(resolved_padding(d).after == after);
  require_same(run_reference(d, in, w), run_reference(padded, big, w));
  require_same(run_reference(d, in, w), naive_conv3d(d, in, w, {}));
}

TEST_CASE("reference: padding modes read what F.pad's reflect, replicate and circular put there", "[reference]") {
  // One row of 4 along each axis in turn, padded 2 before and after, read by a 3-tap kernel with
  // a single 1: the outputs are the padded row itself (tap 0: the element 2 before the output's
  // position, tap 2: the output's own), written out from the definitions of the modes.
  struct Expected {
    PaddingMode mode;
    std::vector<double> tap0, tap2;  // outputs 0..5
  };
  const Expected cases[] = {
      // padded: reflect 3 2 | 1 2 3 4 | 3 2, replicate 1 1 | 1 2 3 4 | 4 4, circular 3 4 | 1 2 3 4 | 1 2
      {PaddingMode::Reflect, {3, 2, 1, 2, 3, 4}, {1, 2, 3, 4, 3, 2}},
      {PaddingMode::Replicate, {1, 1, 1, 2, 3, 4}, {1, 2, 3, 4, 4, 4}},
      {PaddingMode::Circular, {3, 4, 1, 2, 3, 4}, {1, 2, 3, 4, 1, 2}},
  };
  const std::vector<float> row = {1, 2, 3, 4};
  for (int axis = 0; axis < 3; ++axis) {
    for (const Expected& e : cases) {
      for (const int tap : {0, 2}) {
        Conv3dDesc d;
        d.d = axis == 0 ? 4 : 1, d.h = axis == 1 ? 4 : 1, d.w = axis == 2 ? 4 : 1;
        d.kernel = Dims3{axis == 0 ? 3 : 1, axis == 1 ? 3 : 1, axis == 2 ? 3 : 1};
        d.padding = Padding(Dims3{axis == 0 ? 2 : 0, axis == 1 ? 2 : 0, axis == 2 ? 2 : 0});
        d.padding_mode = e.mode;
        std::vector<float> w(3, 0.f);
        w[tap] = 1.f;
        INFO("axis " << axis << " " << padding_mode_name(e.mode) << " tap " << tap);
        CHECK(run_reference(d, row, w) == (tap == 0 ? e.tap0 : e.tap2));
      }
    }
  }
}

TEST_CASE("reference: padding modes with strides, dilation, groups and per-side padding match the naive loop",
          "[reference]") {
  // The naive loop maps each padded index by the modes' definitions; the reference pads a copy.
  std::mt19937 rng(31);
  for (const PaddingMode mode : {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular}) {
    Conv3dDesc d;
    d.n = 2, d.c = 4, d.k = 6, d.d = 4, d.h = 5, d.w = 7, d.groups = 2, d.bias = true;
    d.kernel = Dims3{3, 2, 3};
    d.stride = Dims3{1, 2, 1};
    d.dilation = Dims3{1, 1, 2};
    d.padding = Padding::per_side({2, 1, 3}, {0, 4, 1});
    d.padding_mode = mode;
    const std::vector<float> in = dyadic(rng, d.n * d.c * d.d * d.h * d.w);
    const std::vector<float> w = dyadic(rng, weight_count(d));
    const std::vector<float> b = dyadic(rng, d.k);
    INFO(padding_mode_name(mode));
    require_same(run_reference(d, in, w, b), naive_conv3d(d, in, w, b));
  }
}

TEST_CASE("reference: bias adds one value per output channel", "[reference]") {
  std::mt19937 rng(23);
  Conv3dDesc d;
  d.n = 2, d.c = 3, d.k = 4, d.d = 3, d.h = 4, d.w = 5;
  d.kernel = Dims3{2, 2, 3};
  d.padding = Dims3{1, 0, 1};
  const std::vector<float> in = dyadic(rng, d.n * d.c * d.d * d.h * d.w);
  const std::vector<float> w = dyadic(rng, weight_count(d));
  const std::vector<float> bias = {0.5f, -1.0f, 0.25f, 2.0f};
  const std::vector<double> plain = run_reference(d, in, w);
  d.bias = true;
  const std::vector<double> biased = run_reference(d, in, w, bias);
  const OutputExtents e = output_extents(d);
  const int64_t out_s = e.d * e.h * e.w;
  std::vector<double> want(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) want[i] = plain[i] + bias[i / out_s % d.k];
  require_same(biased, want);
}

TEST_CASE("reference: the epilogue is act(alpha * conv + bias) * gamma + beta * residual", "[reference]") {
  std::mt19937 rng(29);
  Conv3dDesc d;
  d.n = 2, d.c = 3, d.k = 4, d.d = 3, d.h = 4, d.w = 5;
  d.kernel = Dims3{2, 2, 3};
  d.padding = Dims3{1, 0, 1};
  d.bias = true;
  const std::vector<float> in = dyadic(rng, d.n * d.c * d.d * d.h * d.w);
  const std::vector<float> w = dyadic(rng, weight_count(d));
  const std::vector<float> bias = {0.5f, -1.0f, 0.25f, 2.0f};
  const std::vector<double> conv = run_reference(d, in, w, bias);  // conv + bias
  const OutputExtents e = output_extents(d);
  const int64_t out_s = e.d * e.h * e.w;
  const std::vector<float> residual = dyadic(rng, e.elements());
  // Each activation as PyTorch defines it, written out here independently.
  const std::pair<Activation, double (*)(double)> cases[] = {
      {Activation::Identity, [](double v) { return v; }},
      {Activation::Relu, [](double v) { return v > 0 ? v : 0.0; }},
      {Activation::LeakyRelu, [](double v) { return v > 0 ? v : 0.125 * v; }},
      {Activation::Gelu, [](double v) { return v * 0.5 * std::erfc(-v / std::sqrt(2.0)); }},
      {Activation::GeluTanh, [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * std::pow(v, 3)))); }},
      {Activation::Silu, [](double v) { return v * (1 / (1 + std::exp(-v))); }},
      {Activation::Sigmoid, [](double v) { return std::exp(v) / (1 + std::exp(v)); }},
      {Activation::Tanh, [](double v) { return (std::exp(2 * v) - 1) / (std::exp(2 * v) + 1); }},
      {Activation::Hardswish, [](double v) { return v <= -3 ? 0.0 : v >= 3 ? v : v * (v + 3) / 6; }},
      {Activation::Clamp, [](double v) { return v < -0.75 ? -0.75 : v > 1.5 ? 1.5 : v; }},
  };
  for (const auto& [act, f] : cases) {
    Conv3dDesc fused = d;
    fused.epilogue.activation = act;
    fused.epilogue.slope = 0.125f;
    fused.epilogue.clamp_min = -0.75f;
    fused.epilogue.clamp_max = 1.5f;
    fused.epilogue.alpha = 0.5f;
    fused.epilogue.gamma = 2.0f;
    fused.epilogue.residual = true;
    fused.epilogue.beta = -0.25f;
    std::vector<double> got(e.elements());
    reference_conv3d(fused, in.data(), w.data(), bias.data(), residual.data(), got.data());
    INFO(activation_name(act));
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double b = bias[i / out_s % d.k];
      const double want = f(0.5 * (conv[i] - b) + b) * 2.0 - 0.25 * residual[i];
      worst = std::max(worst, std::abs(got[i] - want));
    }
    CHECK(worst < 1e-12);
  }
  Conv3dDesc needs_residual = d;
  needs_residual.epilogue.residual = true;
  std::vector<double> out(e.elements());
  CHECK_THROWS_AS(reference_conv3d(needs_residual, in.data(), w.data(), bias.data(), out.data()), Error);
}

TEST_CASE("reference: invalid descriptions and missing tensors throw InvalidArgument",
          "[reference]") {
  Conv3dDesc d = desc_2d(4, 4, {1, 3, 3});
  SECTION("stride 0") {
    d.stride = Dims3{1, 0, 1};
    CHECK(category_of(d) == ErrorCategory::InvalidArgument);
  }
  SECTION("bias requested but null") {
    d.bias = true;
    CHECK(category_of(d) == ErrorCategory::InvalidArgument);
  }
}

TEST_CASE("reference: 40 random small shapes match the naive loop", "[reference]") {
  std::mt19937 rng(20261129);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int i = 0; i < 40; ++i) {
    Conv3dDesc d;
    d.n = pick(1, 2);
    d.groups = pick(1, 3);
    d.c = d.groups * pick(1, 3);
    d.k = d.groups * pick(1, 3);
    d.bias = pick(0, 1) == 1;
    const int64_t mode = pick(0, 2);
    int64_t kernel[3], stride[3], dilation[3], pad[3], extent[3];
    for (int a = 0; a < 3; ++a) {
      kernel[a] = pick(1, 3);
      dilation[a] = pick(1, 2);
      stride[a] = mode == 1 ? 1 : pick(1, 3);  // PyTorch refuses same with stride > 1
      pad[a] = mode == 0 ? pick(0, 2) : 0;
      const int64_t needed = dilation[a] * (kernel[a] - 1) + 1 - 2 * pad[a];
      extent[a] = std::max<int64_t>(needed, 1) + pick(0, 4);
    }
    d.kernel = {kernel[0], kernel[1], kernel[2]};
    d.stride = {stride[0], stride[1], stride[2]};
    d.dilation = {dilation[0], dilation[1], dilation[2]};
    d.padding = mode == 0 ? Padding(Dims3{pad[0], pad[1], pad[2]})
                          : mode == 1 ? Padding::same() : Padding::valid();
    d.d = extent[0], d.h = extent[1], d.w = extent[2];
    const std::vector<float> in = dyadic(rng, d.n * d.c * d.d * d.h * d.w);
    const std::vector<float> w = dyadic(rng, weight_count(d));
    const std::vector<float> b = d.bias ? dyadic(rng, d.k) : std::vector<float>{};
    DYNAMIC_SECTION("#" << i << " " << describe(d)) {
      require_same(run_reference(d, in, w, b), naive_conv3d(d, in, w, b));
    }
  }
}

TEST_CASE("reference: a problem split over threads matches the naive loop", "[reference]") {
  // ~3e6 multiply-adds: enough for the reference to start several threads.
  std::mt19937 rng(29);
  Conv3dDesc d;
  d.n = 2, d.c = 8, d.k = 8, d.groups = 2, d.d = 16, d.h = 16, d.w = 16;
  d.kernel = Dims3{3};
  d.padding = Dims3{1, 0, 2};
  d.stride = Dims3{1, 2, 1};
  d.dilation = Dims3{2, 1, 1};
  d.bias = true;
  const std::vector<float> in = dyadic(rng, d.n * d.c * d.d * d.h * d.w);
  const std::vector<float> w = dyadic(rng, weight_count(d)), b = dyadic(rng, d.k);
  require_same(run_reference(d, in, w, b), naive_conv3d(d, in, w, b));
}

namespace {
// A tensor of logical extents n x c x s (s: the spatial positions) from NCDHW into NDHWC order.
template <class T>
std::vector<T> channels_last(const std::vector<T>& x, int64_t n, int64_t c, int64_t s) {
  std::vector<T> out(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < s; ++p) out[static_cast<size_t>((i * s + p) * c + ch)] = x[static_cast<size_t>((i * c + ch) * s + p)];
  return out;
}

std::vector<uint16_t> as_bits(DataType t, const std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  from_float(t, x.data(), static_cast<int64_t>(x.size()), bits.data());
  return bits;
}
}  // namespace

TEST_CASE("reference: NDHWC is the NCDHW convolution of the same tensors, each laid out channels last",
          "[reference]") {
  std::mt19937 rng(31);
  Conv3dDesc d;
  d.n = 2; d.c = 6; d.d = 4; d.h = 5; d.w = 7; d.k = 4; d.kernel = {2, 3, 3}; d.groups = 2;
  d.stride = {1, 2, 1}; d.padding = Padding::per_side({1, 0, 2}, {0, 1, 1}); d.bias = true;
  d.padding_mode = PaddingMode::Replicate;
  d.epilogue.residual = true;
  d.epilogue.activation = Activation::Relu;
  const OutputExtents o = output_extents(d);
  const int64_t taps = 2 * 3 * 3, in_s = d.d * d.h * d.w, out_s = o.d * o.h * o.w;
  const std::vector<float> in = dyadic(rng, d.n * d.c * in_s), w = dyadic(rng, weight_count(d)), b = dyadic(rng, d.k);
  const std::vector<float> res = dyadic(rng, o.elements());
  std::vector<double> ncdhw(o.elements());
  reference_conv3d(d, in.data(), w.data(), b.data(), res.data(), ncdhw.data());

  Conv3dDesc last = d;
  last.layout = Layout::NDHWC;
  const std::vector<float> in_l = channels_last(in, d.n, d.c, in_s), w_l = channels_last(w, d.k, d.c / d.groups, taps);
  const std::vector<float> res_l = channels_last(res, d.n, d.k, out_s);
  std::vector<double> ndhwc(o.elements());
  reference_conv3d(last, in_l.data(), w_l.data(), b.data(), res_l.data(), ndhwc.data());
  require_same(ndhwc, channels_last(ncdhw, d.n, d.k, out_s));
}

TEST_CASE("reference: half inputs are taken exactly; the residual has the output's type", "[reference]") {
  std::mt19937 rng(5);
  Conv3dDesc d;
  d.n = 1; d.c = 3; d.d = 3; d.h = 6; d.w = 5; d.k = 5; d.kernel = {1, 3, 2}; d.padding = 1; d.bias = true;
  d.epilogue.residual = true;
  const OutputExtents o = output_extents(d);
  // Multiples of 1/8 in [-1, 1] are exact in bf16 and fp16.
  const std::vector<float> in = dyadic(rng, d.n * d.c * d.d * d.h * d.w), w = dyadic(rng, weight_count(d));
  const std::vector<float> b = dyadic(rng, d.k), res = dyadic(rng, o.elements());
  std::vector<double> want(o.elements());
  reference_conv3d(d, in.data(), w.data(), b.data(), res.data(), want.data());
  for (DataType t : {DataType::BFloat16, DataType::Float16}) {
    for (bool wide : {false, true}) {
      Conv3dDesc h = d;
      h.dtype = t;
      h.fp32_output = wide;
      INFO(describe(h));
      const std::vector<uint16_t> in_h = as_bits(t, in), w_h = as_bits(t, w), b_h = as_bits(t, b);
      std::vector<uint16_t> res_h = as_bits(t, res);
      const void* residual = wide ? static_cast<const void*>(res.data()) : res_h.data();
      std::vector<double> got(o.elements());
      reference_conv3d(h, in_h.data(), w_h.data(), b_h.data(), residual, got.data());
      require_same(got, want);
    }
  }
  // Values that are not exact in a half type are rounded by the caller, never by the reference:
  // the float overload of a bf16 description reads its pointers as bf16.
  Conv3dDesc h = d;
  h.dtype = DataType::BFloat16;
  std::vector<uint16_t> one_in(static_cast<size_t>(d.n * d.c * d.d * d.h * d.w), float_to_bf16(1.0f));
  std::vector<uint16_t> one_w(static_cast<size_t>(weight_count(d)), float_to_bf16(1.0f));
  std::vector<uint16_t> zero_b(static_cast<size_t>(d.k), 0), zero_r(static_cast<size_t>(o.elements()), 0);
  std::vector<double> ones(o.elements());
  reference_conv3d(h, one_in.data(), one_w.data(), zero_b.data(), zero_r.data(), ones.data());
  // The centre of the middle plane sees every tap inside: C * KD * KH * KW = 18 ones.
  CHECK(ones[static_cast<size_t>((1 * o.h + 3) * o.w + 2)] == 18.0);
}

TEST_CASE("reference: the half classes and the typed comparison", "[reference]") {
  Conv3dDesc d;
  d.dtype = DataType::BFloat16;
  CHECK(tolerance(d).rel_l2 == 4e-3);
  d.dtype = DataType::Float16;
  CHECK(tolerance(d).rel_l2 == 5e-4);
  d.fp32_output = true;
  CHECK(tolerance(d).rel_l2 == 1e-5);
  d.precision = Precision::Tf32;  // no effect on half inputs
  CHECK(tolerance(d).rel_l2 == 1e-5);
  Conv3dDesc f;
  f.precision = Precision::Tf32;
  CHECK(tolerance(f).rel_l2 == tolerance(Precision::Tf32).rel_l2);

  // An exact bf16 result passes; one that is off by a bf16 step in every element (2^-7
  // relative) fails bf16's 4e-3.
  std::vector<double> ref(1000, 1.0);
  std::vector<uint16_t> got(1000, float_to_bf16(1.0f));
  const Tolerance bf = {4e-3, -1, -1};
  CHECK(compare(got.data(), DataType::BFloat16, ref.data(), 1000, bf).passed);
  std::fill(got.begin(), got.end(), float_to_bf16(1.0f + 0x1p-7f));
  const Comparison off = compare(got.data(), DataType::BFloat16, ref.data(), 1000, bf);
  CHECK_FALSE(off.passed);
  CHECK(std::abs(off.rel_l2 - 0x1p-7) < 1e-12);
  got[3] = 0x7fc0;  // NaN
  CHECK(compare(got.data(), DataType::BFloat16, ref.data(), 1000, {1, -1, -1}).non_finite == 1);
}

TEST_CASE("reference: compare detects non-finite values and tolerance breaches", "[reference]") {
  const Tolerance fp32 = tolerance(Precision::Fp32), tf32 = tolerance(Precision::Tf32);
  SECTION("the classes of docs/design.md") {
    CHECK((fp32.rel_l2 == 1e-6 && fp32.atol == 1e-4 && fp32.rtol == 1e-4));
    CHECK((tf32.rel_l2 == 5e-4 && tf32.atol < 0 && tf32.rtol < 0));
  }
  std::vector<double> ref(10000, 100.0);
  ref[17] = 0;
  std::vector<float> got(ref.begin(), ref.end());
  const int64_t count = static_cast<int64_t>(ref.size());

  SECTION("exact result passes") {
    const Comparison r = compare(got.data(), ref.data(), count, fp32);
    CHECK(r.passed);
    CHECK(r.rel_l2 == 0);
    CHECK(r.max_abs_error == 0);
  }
  SECTION("one element past atol + rtol * |ref| fails fp32 even with a tiny rel_l2") {
    got[17] = 5e-4f;  // ref 0: the bound there is atol = 1e-4
    const Comparison r = compare(got.data(), ref.data(), count, fp32);
    CHECK_FALSE(r.passed);
    CHECK(r.outside_tolerance == 1);
    CHECK(r.rel_l2 < 1e-6);
    CHECK(std::abs(r.max_abs_error - 5e-4) < 1e-9);
    CHECK(compare(got.data(), ref.data(), count, tf32).passed);
  }
  SECTION("a uniform 1e-5 relative error breaks fp32's rel_l2 but not tf32's") {
    for (float& g : got) g *= 1.00001f;
    const Comparison r = compare(got.data(), ref.data(), count, fp32);
    CHECK_FALSE(r.passed);
    CHECK(r.outside_tolerance == 0);
    CHECK(r.rel_l2 > 1e-6);
    CHECK(compare(got.data(), ref.data(), count, tf32).passed);
  }
  SECTION("a single NaN fails every class") {
    got[5000] = std::numeric_limits<float>::quiet_NaN();
    for (const Tolerance& tol : {fp32, tf32}) {
      const Comparison r = compare(got.data(), ref.data(), count, tol);
      CHECK_FALSE(r.passed);
      CHECK(r.non_finite == 1);
      CHECK(std::isinf(r.rel_l2));
    }
    CHECK(compare(got.data(), ref.data(), count, fp32).outside_tolerance == 1);
  }
  SECTION("an infinity fails every class") {
    got[3] = -std::numeric_limits<float>::infinity();
    for (const Tolerance& tol : {fp32, tf32}) {
      const Comparison r = compare(got.data(), ref.data(), count, tol);
      CHECK_FALSE(r.passed);
      CHECK(r.non_finite == 1);
    }
  }
  SECTION("an all-zero reference falls back to the absolute L2 error") {
    const std::vector<double> zeros(4, 0.0);
    const std::vector<float> small = {0, 3e-5f, 0, 4e-5f};
    const Comparison r = compare(small.data(), zeros.data(), 4, tf32);
    CHECK(std::abs(r.rel_l2 - 5e-5) < 1e-9);
    CHECK(r.passed);
  }
}

// reference_at (one output, as tuning samples them) against the whole reference: every layout,
// type, padding mode, the epilogue, groups, strides and dilation.
TEST_CASE("reference_at: each output is the whole reference's", "[reference]") {
  using test::make;
  std::vector<Conv3dDesc> descs = {
      make(2, 3, {5, 6, 7}, 4, {3, 2, 3}, {1, 2, 1}, Dims3{1, 0, 1}, {1, 1, 2}, 1, true),
      make(1, 6, {4, 5, 6}, 6, {3, 3, 3}, 1, 1, 1, 3, true),
      make(1, 4, {4, 5, 6}, 5, {2, 3, 3}, 1, Padding::per_side({1, 1, 2}, {0, 1, 1})),
  };
  Conv3dDesc reflect = make(1, 2, {5, 6, 7}, 3, {3, 3, 3}, 1, 1);
  reflect.padding_mode = PaddingMode::Reflect;
  descs.push_back(reflect);
  Conv3dDesc circular = reflect;
  circular.padding_mode = PaddingMode::Circular;
  descs.push_back(circular);
  Conv3dDesc fused = make(2, 5, {4, 4, 5}, 8, {3, 3, 3}, 1, 1, 1, 1, true);
  fused.epilogue.activation = Activation::Silu;
  fused.epilogue.alpha = 0.5f;
  fused.epilogue.gamma = 1.5f;
  fused.epilogue.residual = true;
  fused.epilogue.beta = -0.75f;
  descs.push_back(fused);
  for (Conv3dDesc base : std::vector<Conv3dDesc>(descs)) {
    base.dtype = DataType::BFloat16;
    base.layout = Layout::NDHWC;
    descs.push_back(base);
  }
  std::mt19937 rng(7);
  for (const Conv3dDesc& d : descs) {
    INFO(describe(d));
    const detail::Problem p = detail::make_problem(d);
    const DataType out_type = output_dtype(d);
    const std::vector<float> in = dyadic(rng, p.input_elements), w = dyadic(rng, p.weight_elements),
                             b = dyadic(rng, d.k), r = dyadic(rng, p.output_elements);
    std::vector<uint16_t> in16(in.size()), w16(w.size()), b16(b.size()), r16(r.size());
    const bool half = d.dtype != DataType::Float32;
    if (half) {
      from_float(d.dtype, in.data(), p.input_elements, in16.data());
      from_float(d.dtype, w.data(), p.weight_elements, w16.data());
      from_float(d.dtype, b.data(), d.k, b16.data());
      from_float(out_type, r.data(), p.output_elements, r16.data());
    }
    const auto ptr = [&](const std::vector<float>& f, const std::vector<uint16_t>& h) -> const void* {
      return half ? static_cast<const void*>(h.data()) : static_cast<const void*>(f.data());
    };
    std::vector<double> whole(p.output_elements);
    reference_conv3d(d, ptr(in, in16), ptr(w, w16), ptr(b, b16), ptr(r, r16), whole.data());
    const detail::TensorReader read = [&](detail::RefTensor t, int64_t i) -> double {
      switch (t) {
        case detail::RefTensor::Input: return in[i];
        case detail::RefTensor::Weight: return w[i];
        case detail::RefTensor::Bias: return b[i];
        case detail::RefTensor::Residual: return r[i];
      }
      return 0;
    };
    int64_t mismatches = 0;
    for (int64_t i = 0; i < p.output_elements; ++i) mismatches += reference_at(p, read, i) != whole[i];
    CHECK(mismatches == 0);
  }
}
