// The float64 CPU reference: a direct convolution whose only job is to be obviously right and
// fast enough to check ~1e9-MAC problems. Bounds are handled by clipping each loop's range once
// instead of testing every multiply-add.
#include "conv3djit/reference.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <system_error>
#include <thread>
#include <vector>

#include "conv3djit/half.hpp"
#include "core/problem.hpp"
#include "core/reference_at.hpp"

namespace conv3djit {
namespace {

// Work per thread below which starting another thread costs more than it saves.
constexpr double kMacsPerThread = 1 << 20;

struct Range {
  int64_t lo, hi;
};

// Output indices o in [lo, hi) whose input index o * stride + offset lies in [0, extent).
Range valid_outputs(int64_t offset, int64_t stride, int64_t extent, int64_t out_count) {
  const int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t hi = extent - offset <= 0 ? 0 : (extent - offset + stride - 1) / stride;
  return {lo, std::max(lo, std::min(hi, out_count))};
}

struct Tensors {
  const float* input;
  const float* weight;
  const float* bias;      // null when the description has no bias
  const float* residual;  // null without a residual
  double* output;
};

// The epilogue, written out as the formula in conv3d.hpp says (the kernels share another
// definition, kernels/common/epilogue.cuh, which this checks).
double activate(const Epilogue& e, double v) {
  switch (e.activation) {
    case Activation::Identity: return v;
    case Activation::Relu: return std::max(v, 0.0);
    case Activation::LeakyRelu: return v >= 0 ? v : v * e.slope;
    case Activation::Gelu: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case Activation::GeluTanh: return 0.5 * v * (1 + std::tanh(0.79788456080286535588 /* sqrt(2 / pi) */ * (v + 0.044715 * v * v * v)));
    case Activation::Silu: return v / (1 + std::exp(-v));
    case Activation::Sigmoid: return 1 / (1 + std::exp(-v));
    case Activation::Tanh: return std::tanh(v);
    case Activation::Hardswish: return v * std::clamp(v + 3, 0.0, 6.0) / 6;
    case Activation::Clamp: return std::clamp(v, double{e.clamp_min}, double{e.clamp_max});
  }
  return v;
}

// One output plane (n, k, od): OH x OW doubles, small enough to stay in cache while every
// (c, kd, kh, kw) tap adds into it. Planes are independent, so threads never share outputs.
void compute_plane(const detail::Problem& p, const Tensors& t, int64_t plane) {
  const Conv3dDesc& d = p.desc;
  const int64_t od_count = p.out.d, oh_count = p.out.h, ow_count = p.out.w;
  const int64_t od = plane % od_count;
  const int64_t k = plane / od_count % d.k;
  const int64_t n = plane / od_count / d.k;
  const int64_t c_first = k / p.k_per_group * p.c_per_group;
  const int64_t sh = d.stride.h, sw = d.stride.w;

  double* out = t.output + plane * oh_count * ow_count;
  std::fill(out, out + oh_count * ow_count, 0.0);

  for (int64_t c = 0; c < p.c_per_group; ++c) {
    const float* in_channel = t.input + (n * d.c + c_first + c) * d.d * d.h * d.w;
    const float* w_channel =
        t.weight + (k * p.c_per_group + c) * d.kernel.d * d.kernel.h * d.kernel.w;
    for (int64_t kd = 0; kd < d.kernel.d; ++kd) {
      const int64_t id = od * d.stride.d - p.pad.before.d + kd * d.dilation.d;
      if (id < 0 || id >= d.d) continue;
      const float* in_slice = in_channel + id * d.h * d.w;
      for (int64_t kh = 0; kh < d.kernel.h; ++kh) {
        const int64_t ih_offset = kh * d.dilation.h - p.pad.before.h;
        const Range rows = valid_outputs(ih_offset, sh, d.h, oh_count);
        for (int64_t kw = 0; kw < d.kernel.w; ++kw) {
          const int64_t iw_offset = kw * d.dilation.w - p.pad.before.w;
          const Range cols = valid_outputs(iw_offset, sw, d.w, ow_count);
          const double wv = w_channel[(kd * d.kernel.h + kh) * d.kernel.w + kw];
          for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
            const float* in_row = in_slice + (oh * sh + ih_offset) * d.w;
            double* out_row = out + oh * ow_count;
            for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
              out_row[ow] += wv * in_row[ow * sw + iw_offset];
            }
          }
        }
      }
    }
  }
  const Epilogue& e = d.epilogue;
  const double bias = t.bias ? static_cast<double>(t.bias[k]) : 0.0;
  const float* residual = t.residual ? t.residual + plane * oh_count * ow_count : nullptr;
  for (int64_t i = 0; i < oh_count * ow_count; ++i) {
    double v = activate(e, double{e.alpha} * out[i] + bias) * double{e.gamma};
    if (residual) v += double{e.beta} * residual[i];
    out[i] = v;
  }
}

// Where padded index i (-before <= i < n + after) of an axis of extent n reads, for the padding
// modes other than zeros (validation bounds the padding as each mode needs).
int64_t padded_source(PaddingMode mode, int64_t i, int64_t n) {
  switch (mode) {
    case PaddingMode::Reflect: return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
    case PaddingMode::Replicate: return std::clamp<int64_t>(i, 0, n - 1);
    case PaddingMode::Circular: return ((i % n) + n) % n;
    case PaddingMode::Zeros: break;
  }
  return i;
}

}  // namespace

namespace detail {

double reference_at(const Problem& p, const TensorReader& read, int64_t index) {
  const Conv3dDesc& d = p.desc;
  const bool ndhwc = d.layout == Layout::NDHWC;
  const int64_t spatial = p.out.d * p.out.h * p.out.w;
  const int64_t k = ndhwc ? index % d.k : index / spatial % d.k;
  const int64_t pos = ndhwc ? index / d.k % spatial : index % spatial;
  const int64_t n = ndhwc ? index / d.k / spatial : index / spatial / d.k;
  const int64_t ow = pos % p.out.w, oh = pos / p.out.w % p.out.h, od = pos / p.out.w / p.out.h;
  const int64_t c_first = k / p.k_per_group * p.c_per_group;
  const int64_t taps = d.kernel.d * d.kernel.h * d.kernel.w;
  // The input index of a padded coordinate along an axis, or -1 for a zero.
  const auto source = [&](int64_t i, int64_t extent) {
    if (d.padding_mode == PaddingMode::Zeros) return i < 0 || i >= extent ? int64_t{-1} : i;
    return padded_source(d.padding_mode, i, extent);
  };
  double sum = 0;
  for (int64_t kd = 0; kd < d.kernel.d; ++kd) {
    const int64_t id = source(od * d.stride.d - p.pad.before.d + kd * d.dilation.d, d.d);
    if (id < 0) continue;
    for (int64_t kh = 0; kh < d.kernel.h; ++kh) {
      const int64_t ih = source(oh * d.stride.h - p.pad.before.h + kh * d.dilation.h, d.h);
      if (ih < 0) continue;
      for (int64_t kw = 0; kw < d.kernel.w; ++kw) {
        const int64_t iw = source(ow * d.stride.w - p.pad.before.w + kw * d.dilation.w, d.w);
        if (iw < 0) continue;
        const int64_t tap = (kd * d.kernel.h + kh) * d.kernel.w + kw;
        const int64_t at = (id * d.h + ih) * d.w + iw;
        for (int64_t c = 0; c < p.c_per_group; ++c) {
          const int64_t x = ndhwc ? (n * d.d * d.h * d.w + at) * d.c + c_first + c
                                  : ((n * d.c + c_first + c) * d.d * d.h * d.w) + at;
          const int64_t w = ndhwc ? (k * taps + tap) * p.c_per_group + c : (k * p.c_per_group + c) * taps + tap;
          sum += read(RefTensor::Input, x) * read(RefTensor::Weight, w);
        }
      }
    }
  }
  const Epilogue& e = d.epilogue;
  double v = activate(e, double{e.alpha} * sum + (d.bias ? read(RefTensor::Bias, k) : 0.0)) * double{e.gamma};
  if (e.residual) v += double{e.beta} * read(RefTensor::Residual, index);
  return v;
}

}  // namespace detail

namespace {

// The input padded as F.pad(x, ..., mode) pads it: the composition that the kernels' index maps
// must equal.
std::vector<float> padded_input(const detail::Problem& p, const float* input) {
  const Conv3dDesc& d = p.desc;
  const Dims3 b = p.pad.before, a = p.pad.after;
  const int64_t pd = d.d + b.d + a.d, ph = d.h + b.h + a.h, pw = d.w + b.w + a.w;
  std::vector<float> out(static_cast<size_t>(d.n * d.c * pd * ph * pw));
  for (int64_t nc = 0; nc < d.n * d.c; ++nc) {
    for (int64_t z = 0; z < pd; ++z) {
      const int64_t sz = padded_source(d.padding_mode, z - b.d, d.d);
      for (int64_t y = 0; y < ph; ++y) {
        const int64_t sy = padded_source(d.padding_mode, y - b.h, d.h);
        const float* src = input + ((nc * d.d + sz) * d.h + sy) * d.w;
        float* dst = out.data() + ((nc * pd + z) * ph + y) * pw;
        for (int64_t x = 0; x < pw; ++x) dst[x] = src[padded_source(d.padding_mode, x - b.w, d.w)];
      }
    }
  }
  return out;
}

// Moves a tensor of logical extents n x c x d x h x w between NDHWC (channels innermost) and
// NCDHW: to_ncdhw reads NDHWC and writes NCDHW, else the other way.
template <class T>
std::vector<T> relaid(const T* data, int64_t n, int64_t c, int64_t spatial, bool to_ncdhw) {
  std::vector<T> out(static_cast<size_t>(n * c * spatial));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t s = 0; s < spatial; ++s) {
        const int64_t ncdhw = (i * c + ch) * spatial + s, ndhwc = (i * spatial + s) * c + ch;
        out[static_cast<size_t>(to_ncdhw ? ncdhw : ndhwc)] = data[to_ncdhw ? ndhwc : ncdhw];
      }
    }
  }
  return out;
}

// A tensor of `type` in `layout` as NCDHW floats (exact: every type is a subset of float).
std::vector<float> ncdhw_floats(const void* data, DataType type, Layout layout, int64_t n, int64_t c,
                                int64_t spatial) {
  std::vector<float> values(static_cast<size_t>(n * c * spatial));
  to_float(type, data, static_cast<int64_t>(values.size()), values.data());
  if (layout == Layout::NDHWC) values = relaid(values.data(), n, c, spatial, true);
  return values;
}

void check_tensors(const Conv3dDesc& desc, const void* input, const void* weight, const void* bias,
                   const void* residual, const double* output) {
  if (!input || !weight || !output || (desc.bias && !bias) || (desc.epilogue.residual && !residual)) {
    throw Error(ErrorCategory::InvalidArgument,
                "reference_conv3d: input, weight, output (and bias if desc.bias, residual if "
                "desc.epilogue.residual) must be non-null");
  }
}

}  // namespace

void reference_conv3d(const Conv3dDesc& desc, const float* input, const float* weight,
                      const float* bias, double* output) {
  reference_conv3d(desc, input, weight, bias, nullptr, output);
}

void reference_conv3d(const Conv3dDesc& desc, const void* input, const void* weight, const void* bias,
                      const void* residual, double* output) {
  const detail::Problem p = detail::make_problem(desc);
  check_tensors(desc, input, weight, bias, residual, output);
  if (desc.dtype == DataType::Float32 && p.out_dtype == DataType::Float32 && desc.layout == Layout::NCDHW) {
    reference_conv3d(desc, static_cast<const float*>(input), static_cast<const float*>(weight),
                     static_cast<const float*>(bias), static_cast<const float*>(residual), output);
    return;
  }
  // The float32 NCDHW convolution of the same values, its output then laid out as desc says.
  const Conv3dDesc& d = desc;
  const bool ndhwc = d.layout == Layout::NDHWC;
  const int64_t taps = d.kernel.d * d.kernel.h * d.kernel.w, out_spatial = p.out.d * p.out.h * p.out.w;
  const std::vector<float> x = ncdhw_floats(input, d.dtype, d.layout, d.n, d.c, d.d * d.h * d.w);
  const std::vector<float> w = ncdhw_floats(weight, d.dtype, d.layout, d.k, p.c_per_group, taps);
  std::vector<float> b;
  if (d.bias) b = ncdhw_floats(bias, d.dtype, Layout::NCDHW, 1, d.k, 1);
  std::vector<float> r;
  if (d.epilogue.residual) r = ncdhw_floats(residual, p.out_dtype, d.layout, d.n, d.k, out_spatial);
  Conv3dDesc plain = d;
  plain.dtype = DataType::Float32;
  plain.fp32_output = false;
  plain.layout = Layout::NCDHW;
  if (!ndhwc) {
    reference_conv3d(plain, x.data(), w.data(), d.bias ? b.data() : nullptr, d.epilogue.residual ? r.data() : nullptr,
                     output);
    return;
  }
  std::vector<double> ncdhw(static_cast<size_t>(p.output_elements));
  reference_conv3d(plain, x.data(), w.data(), d.bias ? b.data() : nullptr, d.epilogue.residual ? r.data() : nullptr,
                   ncdhw.data());
  const std::vector<double> laid = relaid(ncdhw.data(), d.n, d.k, out_spatial, false);
  std::copy(laid.begin(), laid.end(), output);
}

void reference_conv3d(const Conv3dDesc& desc, const float* input, const float* weight,
                      const float* bias, const float* residual, double* output) {
  const detail::Problem p = detail::make_problem(desc);
  check_tensors(desc, input, weight, bias, residual, output);
  if (desc.dtype != DataType::Float32 || p.out_dtype != DataType::Float32 || desc.layout != Layout::NCDHW) {
    // Other types and layouts take the untyped overload.
    reference_conv3d(desc, static_cast<const void*>(input), static_cast<const void*>(weight),
                     static_cast<const void*>(bias), static_cast<const void*>(residual), output);
    return;
  }
  if (desc.padding_mode != PaddingMode::Zeros) {
    // The padded copy, convolved without padding.
    const std::vector<float> padded = padded_input(p, input);
    Conv3dDesc unpadded = desc;
    unpadded.d += p.pad.before.d + p.pad.after.d;
    unpadded.h += p.pad.before.h + p.pad.after.h;
    unpadded.w += p.pad.before.w + p.pad.after.w;
    unpadded.padding = Padding(0);
    unpadded.padding_mode = PaddingMode::Zeros;
    reference_conv3d(unpadded, padded.data(), weight, bias, residual, output);
    return;
  }
  const Tensors t{input, weight, desc.bias ? bias : nullptr, desc.epilogue.residual ? residual : nullptr, output};
  const int64_t planes = p.out.n * p.out.k * p.out.d;

  const int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const int64_t wanted = static_cast<int64_t>(p.macs() / kMacsPerThread) + 1;
  const int64_t threads = std::min({hardware, wanted, planes});

  // Planes are handed out one at a time: shapes with few, uneven planes still balance.
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t plane = next++; plane < planes; plane = next++) compute_plane(p, t, plane);
  };
  std::vector<std::thread> helpers;
  try {
    for (int64_t i = 1; i < threads; ++i) helpers.emplace_back(work);
  } catch (const std::system_error&) {
    // Fewer threads only makes it slower: the calling thread takes whatever is left.
  }
  work();
  for (std::thread& h : helpers) h.join();
}

Tolerance tolerance(Precision precision) noexcept {
  switch (precision) {
    case Precision::Fp32: return {1e-6, 1e-4, 1e-4};
    case Precision::Tf32: return {5e-4, -1, -1};
  }
  return {0, 0, 0};  // unreachable for a valid enum; the strictest class
}

Tolerance tolerance(const Conv3dDesc& desc) noexcept {
  if (desc.dtype == DataType::Float32) return tolerance(desc.precision);
  switch (output_dtype(desc)) {
    case DataType::BFloat16: return {4e-3, -1, -1};
    case DataType::Float16: return {5e-4, -1, -1};
    case DataType::Float32: break;
  }
  return {1e-5, -1, -1};
}

Comparison compare(const void* got, DataType type, const double* reference, int64_t count, Tolerance tol) {
  if (type == DataType::Float32) return compare(static_cast<const float*>(got), reference, count, tol);
  std::vector<float> values(static_cast<size_t>(count));
  to_float(type, got, count, values.data());
  return compare(values.data(), reference, count, tol);
}

Comparison compare(const float* got, const double* reference, int64_t count, Tolerance tol) {
  Comparison r;
  // A negative atol or rtol drops that term; both negative turns the elementwise check off.
  const bool elementwise = tol.atol >= 0 || tol.rtol >= 0;
  const double atol = std::max(tol.atol, 0.0), rtol = std::max(tol.rtol, 0.0);
  double err_sq = 0, ref_sq = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double g = got[i], ref = reference[i];
    const double err = std::abs(g - ref);
    if (!std::isfinite(g)) ++r.non_finite;
    // Negated test so that a NaN error counts as outside.
    if (elementwise && !(err <= atol + rtol * std::abs(ref))) ++r.outside_tolerance;
    r.max_abs_error = std::max(r.max_abs_error, err);
    err_sq += err * err;
    ref_sq += ref * ref;
  }
  if (r.non_finite > 0) {
    // NaN does not order, so name the damage explicitly instead of letting it leak into norms.
    r.max_abs_error = r.rel_l2 = std::numeric_limits<double>::infinity();
  } else {
    r.rel_l2 = ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  }
  r.passed = r.non_finite == 0 && r.rel_l2 <= tol.rel_l2 && r.outside_tolerance == 0;
  return r;
}

}  // namespace conv3djit
