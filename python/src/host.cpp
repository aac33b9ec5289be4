// The CPU side of the accuracy checks: the float64 reference of host arrays of every element type
// and layout, the accuracy classes' tolerances and the comparison of a result with the reference.
// Host arrays may have any strides (they are read in the layout's order, copied where they are not
// dense in it), so numpy arrays, their transposes and PyTorch CPU tensors all serve.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include <conv3djit/conv3d.hpp>
#include <conv3djit/half.hpp>
#include <conv3djit/reference.hpp>

#include "bindings.hpp"
#include "tensors.hpp"

using namespace nanobind::literals;

namespace conv3djit::python {
namespace {

namespace dl = nb::dlpack;

/// A read-only host array of any element type and strides.
using HostArray = nb::ndarray<nb::ro, nb::device::cpu>;

std::vector<int64_t> shape_of(const HostArray& a) {
  std::vector<int64_t> dims(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) dims[i] = static_cast<int64_t>(a.shape(i));
  return dims;
}

std::vector<int64_t> strides_of(const HostArray& a) {
  std::vector<int64_t> dims(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) dims[i] = a.stride(i);
  return dims;
}

/// A host array's elements, dense in the memory order a layout gives its axes: the array's own
/// memory where it already is, else a copy.
class DenseHost {
 public:
  DenseHost(const HostArray& a, Layout layout) {
    const size_t bytes = a.itemsize();
    data_ = a.data();
    const std::vector<int64_t> shape = shape_of(a);
    if (a.size() == 0 || has_strides(shape, strides_of(a), dense_strides(shape, layout))) return;
    const std::vector<size_t> order = memory_order(a.ndim(), layout);
    copy_.resize(a.size() * bytes);
    const auto* base = static_cast<const uint8_t*>(a.data());
    std::vector<int64_t> index(a.ndim(), 0);
    int64_t offset = 0;  // of the current element, in elements (strides may be negative)
    for (size_t e = 0; e < a.size(); ++e) {
      std::memcpy(copy_.data() + e * bytes, base + offset * static_cast<int64_t>(bytes), bytes);
      for (size_t i = order.size(); i-- > 0;) {  // the innermost axis first
        const size_t axis = order[i];
        offset += a.stride(axis);
        if (++index[axis] < static_cast<int64_t>(a.shape(axis))) break;
        offset -= a.stride(axis) * static_cast<int64_t>(a.shape(axis));
        index[axis] = 0;
      }
    }
    data_ = copy_.data();
  }
  const void* data() const { return data_; }

 private:
  std::vector<uint8_t> copy_;
  const void* data_ = nullptr;
};

bool is_uint16(dl::dtype t) { return t == nb::dtype<uint16_t>(); }

// Checks one host array of the reference's call: its shape (PyTorch's, whatever the layout) and
// element type (`type`'s, or uint16 holding a half type's bit patterns).
void check_host(const char* name, const HostArray& a, const std::vector<int64_t>& expected, DataType type) {
  const std::vector<int64_t> got = shape_of(a);
  if (got != expected) {
    invalid(fmt::format("{}: shape {} does not match the description, which needs {}", name, shape_text(got),
                        shape_text(expected)));
  }
  if (a.dtype() == element_of(type) || (type != DataType::Float32 && is_uint16(a.dtype()))) return;
  invalid(fmt::format("{}: dtype {}, but the description needs {}{}", name, dtype_text(a.dtype()),
                      dtype_text(element_of(type)), type == DataType::Float32 ? "" : " (or uint16 bit patterns of it)"));
}

nb::ndarray<nb::numpy, double> reference(const Conv3dDesc& d, const HostArray& input, const HostArray& weight,
                                         const std::optional<HostArray>& bias,
                                         const std::optional<HostArray>& residual) {
  if (d.bias != bias.has_value()) invalid(d.bias ? "bias: the description has bias = True, but no bias array was given"
                                                 : "bias: an array was given, but the description has bias = False");
  if (d.epilogue.residual != residual.has_value()) {
    invalid(d.epilogue.residual ? "residual: the description has residual = True, but no residual array was given"
                                : "residual: an array was given, but the description has residual = False");
  }
  const OutputExtents o = output_extents(d);
  const std::vector<int64_t> out_shape = {o.n, o.k, o.d, o.h, o.w};
  check_host("input", input, {d.n, d.c, d.d, d.h, d.w}, d.dtype);
  check_host("weight", weight, {d.k, d.c / d.groups, d.kernel.d, d.kernel.h, d.kernel.w}, d.dtype);
  if (bias) check_host("bias", *bias, {d.k}, d.dtype);
  if (residual) check_host("residual", *residual, out_shape, output_dtype(d));
  const DenseHost x(input, d.layout), w(weight, d.layout);
  const std::optional<DenseHost> b = bias ? std::optional<DenseHost>(std::in_place, *bias, d.layout) : std::nullopt;
  const std::optional<DenseHost> r =
      residual ? std::optional<DenseHost>(std::in_place, *residual, d.layout) : std::nullopt;
  auto* result = new double[static_cast<size_t>(o.elements())];
  nb::capsule owner(result, [](void* p) noexcept { delete[] static_cast<double*>(p); });
  {
    nb::gil_scoped_release release;
    reference_conv3d(d, x.data(), w.data(), b ? b->data() : nullptr, r ? r->data() : nullptr, result);
  }
  // PyTorch's shape, in the layout's memory order: an NDHWC result has channels_last_3d strides.
  const size_t shape[5] = {size_t(o.n), size_t(o.k), size_t(o.d), size_t(o.h), size_t(o.w)};
  const std::vector<int64_t> strides = dense_strides(out_shape, d.layout);
  return nb::ndarray<nb::numpy, double>(result, 5, shape, owner, strides.data());
}

// The values of a result as floats in the C order of its shape.
std::vector<float> floats_of(const HostArray& got) {
  DataType type = DataType::Float32;
  if (got.dtype() == element_of(DataType::BFloat16)) {
    type = DataType::BFloat16;
  } else if (got.dtype() == element_of(DataType::Float16)) {
    type = DataType::Float16;
  } else if (got.dtype() != element_of(DataType::Float32)) {
    invalid(fmt::format("got: dtype {}: expected float32, bfloat16 or float16", dtype_text(got.dtype())));
  }
  const DenseHost dense(got, Layout::NCDHW);
  std::vector<float> values(got.size());
  to_float(type, dense.data(), static_cast<int64_t>(got.size()), values.data());
  return values;
}

Comparison compare_arrays(const HostArray& got, const HostArray& ref, const Tolerance& tol) {
  if (got.size() != ref.size()) invalid(fmt::format("got: {} elements, reference: {}", got.size(), ref.size()));
  if (ref.dtype() != nb::dtype<double>()) {
    invalid(fmt::format("reference: dtype {}: expected float64", dtype_text(ref.dtype())));
  }
  const std::vector<float> values = floats_of(got);
  const DenseHost dense_ref(ref, Layout::NCDHW);
  nb::gil_scoped_release release;
  return compare(values.data(), static_cast<const double*>(dense_ref.data()), static_cast<int64_t>(values.size()),
                 tol);
}

}  // namespace

void bind_host(nb::module_& m) {
  m.def("reference_conv3d", &reference, "desc"_a, "input"_a, "weight"_a, "bias"_a.none() = nb::none(),
        nb::kw_only(), "residual"_a.none() = nb::none(),
        "The float64 CPU reference (float64 accumulation and epilogue, all cores) of host arrays: a numpy float64 "
        "array of shape (N, K, OD, OH, OW), in desc.layout's memory order (channels_last_3d strides for 'ndhwc'). "
        "input, weight and bias hold desc.dtype, the residual desc.output_dtype: float32, float16 (numpy's or "
        "PyTorch's), bfloat16 (PyTorch CPU tensors, through DLPack), or uint16 arrays of the half type's bit "
        "patterns. Shapes are PyTorch's in both layouts; any strides are read.");
  m.def("tolerance", [](const std::string& precision) { return tolerance(precision_of(precision)); }, "precision"_a,
        "The thresholds of the class 'fp32' or 'tf32' (of float32 inputs).");
  m.def("tolerance", [](const Conv3dDesc& desc) { return tolerance(desc); }, "desc"_a,
        "The thresholds of a description's class: its precision's for float32 inputs, else its types' (rel-L2 "
        "4e-3 for a bfloat16 output, 5e-4 for float16, 1e-5 for a float32 output of half inputs).");
  m.def("compare", &compare_arrays, "got"_a, "reference"_a, "tolerance"_a,
        "How far a host result (float32, float16 or bfloat16; any strides) is from a float64 reference of the "
        "same shape, element by element in their shape's order.");
}

}  // namespace conv3djit::python
