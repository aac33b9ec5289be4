// Array checks: everything PyTorch's F.conv3d would refuse, and everything conv3djit does not
// serve yet, is an error naming the array and its value before any launch.
#include "tensors.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <iterator>
#include <vector>

namespace conv3djit::python {

namespace dl = nb::dlpack;

std::string dtype_text(dl::dtype t) {
  const char* kind = "unknown";
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int: kind = "int"; break;
    case dl::dtype_code::UInt: kind = "uint"; break;
    case dl::dtype_code::Float: kind = "float"; break;
    case dl::dtype_code::Bfloat: kind = "bfloat"; break;
    case dl::dtype_code::Complex: kind = "complex"; break;
    case dl::dtype_code::Bool: return "bool";
    default: break;
  }
  return t.lanes == 1 ? fmt::format("{}{}", kind, t.bits) : fmt::format("{}{}x{}", kind, t.bits, t.lanes);
}

dl::dtype element_of(DataType type) {
  switch (type) {
    case DataType::Float32: return nb::dtype<float>();
    case DataType::BFloat16: return {static_cast<uint8_t>(dl::dtype_code::Bfloat), 16, 1};
    case DataType::Float16: return {static_cast<uint8_t>(dl::dtype_code::Float), 16, 1};
  }
  return {};
}

std::string shape_text(const std::vector<int64_t>& dims) {
  return dims.size() == 1 ? fmt::format("({},)", dims[0]) : fmt::format("({})", fmt::join(dims, ", "));
}

std::vector<size_t> memory_order(size_t ndim, Layout layout) {
  if (ndim == 5 && layout == Layout::NDHWC) return {0, 2, 3, 4, 1};
  std::vector<size_t> order(ndim);
  for (size_t i = 0; i < ndim; ++i) order[i] = i;
  return order;
}

std::vector<int64_t> dense_strides(const std::vector<int64_t>& shape, Layout layout) {
  const std::vector<size_t> order = memory_order(shape.size(), layout);
  std::vector<int64_t> strides(shape.size(), 1);
  int64_t expected = 1;
  for (size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = expected;
    expected *= shape[order[i]];
  }
  return strides;
}

bool has_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                 const std::vector<int64_t>& wanted) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 1 && strides[i] != wanted[i]) return false;
  }
  return true;
}

namespace {

// Every element type conv3djit serves; a new one is a line here and one in element_of().
constexpr DataType kServed[] = {DataType::Float32, DataType::BFloat16, DataType::Float16};

std::string served_text() {
  std::string names;
  const size_t count = std::size(kServed);
  for (size_t i = 0; i < count; ++i) {
    names += fmt::format("{}{}", i == 0 ? "" : i + 1 == count ? " and " : ", ", dtype_text(element_of(kServed[i])));
  }
  return names;
}

template <class Array>
std::vector<int64_t> shape_of(const Array& a) {
  std::vector<int64_t> dims(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) dims[i] = static_cast<int64_t>(a.shape(i));
  return dims;
}

template <class Array>
std::vector<int64_t> strides_of(const Array& a) {
  std::vector<int64_t> dims(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) dims[i] = a.stride(i);
  return dims;
}

std::string device_text(int type, int32_t id) {
  if (type == nb::device::cuda::value) return fmt::format("cuda:{}", id);
  if (type == nb::device::cuda_managed::value) return fmt::format("cuda:{} (managed)", id);
  if (type == nb::device::cpu::value) return "cpu";
  if (type == nb::device::cuda_host::value) return "cuda_host (pinned host memory)";
  return fmt::format("DLPack device type {}", type);
}

bool on_cuda(int type) { return type == nb::device::cuda::value || type == nb::device::cuda_managed::value; }

struct Checked {
  const char* name;
  const void* data;
  size_t bytes;
  int device_type;
  int32_t device_id;
  dl::dtype dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

template <class Array>
Checked checked(const char* name, const Array& a) {
  return {name, a.data(), a.nbytes(), a.device_type(), a.device_id(), a.dtype(), shape_of(a), strides_of(a)};
}

Validation fail(ErrorCategory category, std::string message) { return {false, category, std::move(message)}; }

// Why an array's strides are not `layout`'s, and what to do about it.
std::string strides_message(const Checked& a, Layout layout) {
  const std::string head = fmt::format("{}: not contiguous (strides {} elements for shape {})", a.name,
                                       shape_text(a.strides), shape_text(a.shape));
  if (a.shape.size() != 5) return head + ": pass a contiguous copy";
  const Layout other = layout == Layout::NCDHW ? Layout::NDHWC : Layout::NCDHW;
  const char* format[] = {"contiguous", "channels_last_3d"};
  std::string text = fmt::format("{}: layout '{}' needs strides {} ({})", head, layout_name(layout),
                                 shape_text(dense_strides(a.shape, layout)), format[static_cast<int>(layout)]);
  if (has_strides(a.shape, a.strides, dense_strides(a.shape, other))) {
    return text + fmt::format("; these are the strides of layout '{}' ({}): describe the call with layout='{}'",
                              layout_name(other), format[static_cast<int>(other)], layout_name(other));
  }
  return text + "; pass a dense copy in that memory format";
}

bool overlaps(const Checked& a, const Checked& b) {
  const auto* a0 = static_cast<const char*>(a.data);
  const auto* b0 = static_cast<const char*>(b.data);
  return a.bytes && b.bytes && a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

bool same_memory(const Checked& a, const Checked& b) { return a.data == b.data && a.bytes == b.bytes; }

}  // namespace

Validation check_arrays(const Conv3dDesc& desc, const CallArrays& arrays, bool out_double) {
  const bool weight_only = arrays.input == nullptr;
  if (!weight_only && desc.bias != (arrays.bias != nullptr)) {
    return fail(ErrorCategory::InvalidArgument,
                desc.bias ? "bias: the description has bias = True, but no bias array was given"
                          : "bias: an array was given, but the description has bias = False");
  }
  if (!weight_only && desc.epilogue.residual != (arrays.residual != nullptr)) {
    return fail(ErrorCategory::InvalidArgument,
                desc.epilogue.residual ? "residual: the description has residual = True, but no residual array was given"
                                       : "residual: an array was given, but the description has residual = False");
  }
  const Validation valid = validate(desc);
  if (!valid) return valid;
  const OutputExtents out = output_extents(desc);
  const int64_t g = desc.groups;

  std::vector<Checked> all;
  std::vector<std::vector<int64_t>> expected;
  if (!weight_only) {
    all.push_back(checked("input", *arrays.input));
    expected.push_back({desc.n, desc.c, desc.d, desc.h, desc.w});
  }
  all.push_back(checked("weight", *arrays.weight));
  expected.push_back({desc.k, desc.c / g, desc.kernel.d, desc.kernel.h, desc.kernel.w});
  if (arrays.bias) {
    all.push_back(checked("bias", *arrays.bias));
    expected.push_back({desc.k});
  }
  const size_t residual_at = all.size();  // the arrays before it are the inputs
  if (arrays.residual) {
    all.push_back(checked("residual", *arrays.residual));
    expected.push_back({out.n, out.k, out.d, out.h, out.w});
  }
  if (arrays.out) {
    all.push_back(checked("out", *arrays.out));
    expected.push_back({out.n, out.k, out.d, out.h, out.w});
  }

  // Shapes first, then element types, strides, and where the arrays lie.
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].shape != expected[i]) {
      return fail(ErrorCategory::InvalidArgument,
                  fmt::format("{}: shape {} does not match the description, which needs {}", all[i].name,
                              shape_text(all[i].shape), shape_text(expected[i])));
    }
  }
  // The input's element type must be one conv3djit serves (else Unsupported) and the
  // description's; every other array must then match the call (else InvalidArgument, as PyTorch
  // refuses mixed types): input, weight and bias desc.dtype, residual and out the output's type.
  for (const Checked& a : all) {
    const std::string name = a.name;
    const bool output_side = name == "out" || name == "residual";
    const dl::dtype want = out_double && name == "out" ? nb::dtype<double>()
                                                       : element_of(output_side ? output_dtype(desc) : desc.dtype);
    if (a.dtype == want) continue;
    bool served = false;
    for (DataType t : kServed) served |= element_of(t) == a.dtype;
    const bool input = !weight_only && &a == &all.front();
    if (input && !served) {
      return fail(ErrorCategory::Unsupported,
                  fmt::format("input: dtype {}: conv3djit serves {}", dtype_text(a.dtype), served_text()));
    }
    if (input) {
      return fail(ErrorCategory::InvalidArgument,
                  fmt::format("input: dtype {}, but the description has dtype = '{}'", dtype_text(a.dtype),
                              dtype_text(want)));
    }
    return fail(ErrorCategory::InvalidArgument,
                fmt::format("{}: dtype {}, but the call needs {}{}", a.name, dtype_text(a.dtype), dtype_text(want),
                            output_side && desc.fp32_output ? " (fp32_output)" : ""));
  }
  // Dense in the layout's memory order; the shapes are PyTorch's for either layout.
  for (const Checked& a : all) {
    if (!has_strides(a.shape, a.strides, dense_strides(a.shape, desc.layout))) {
      return fail(ErrorCategory::Unsupported, strides_message(a, desc.layout));
    }
  }
  const Checked& first = all.front();
  for (const Checked& a : all) {
    if (!on_cuda(a.device_type)) {
      return fail(ErrorCategory::Unsupported, fmt::format("{}: on {}: conv3djit runs on CUDA arrays", a.name,
                                                          device_text(a.device_type, a.device_id)));
    }
    if (a.device_id != first.device_id) {
      return fail(ErrorCategory::InvalidArgument,
                  fmt::format("{}: on {}, but input is on {}: all arrays must be on one device", a.name,
                              device_text(a.device_type, a.device_id), device_text(first.device_type, first.device_id)));
    }
  }
  // out is written while the others are read, so it overlaps none of them, except a residual that
  // is out itself (each output is read, then written, by the thread that computes it). The residual
  // may be an input too (a block's shortcut), but not part of one: that is a mistaken view.
  const Checked* residual = arrays.residual ? &all[residual_at] : nullptr;
  if (arrays.out) {
    const Checked& o = all.back();
    for (size_t i = 0; i + 1 < all.size(); ++i) {
      const bool in_place = &all[i] == residual && same_memory(o, all[i]);
      if (overlaps(o, all[i]) && !in_place) {
        return fail(ErrorCategory::InvalidArgument,
                    fmt::format("out: overlaps {} in memory{}", all[i].name,
                                &all[i] == residual ? " (the residual may be out itself, but not part of it)" : ""));
      }
    }
  }
  for (size_t i = 0; residual && i < residual_at; ++i) {
    if (overlaps(*residual, all[i]) && !same_memory(*residual, all[i])) {
      return fail(ErrorCategory::InvalidArgument,
                  fmt::format("residual: overlaps {} in memory (it may be {} itself, but not part of it)", all[i].name,
                              all[i].name));
    }
  }
  if (!arrays.out) return {};
  Conv3dTensors tensors = tensors_of(arrays);
  return validate(desc, &tensors);
}

CallArrays arrays_of(const InArray& input, const InArray& weight, const InArray* bias, const OutArray* out,
                     const InArray* residual) {
  return {&input, &weight, bias, out, residual};
}

Conv3dTensors tensors_of(const CallArrays& arrays) {
  Conv3dTensors t;
  t.input = arrays.input->data();
  t.weight = arrays.weight->data();
  t.bias = arrays.bias ? arrays.bias->data() : nullptr;
  t.output = arrays.out ? arrays.out->data() : nullptr;
  t.residual = arrays.residual ? arrays.residual->data() : nullptr;
  return t;
}

Stream stream_of(nb::handle stream) {
  auto handle = [](nb::handle value) {
    return reinterpret_cast<Stream>(static_cast<uintptr_t>(nb::cast<uint64_t>(value)));
  };
  if (stream.is_none()) return nullptr;
  if (PyLong_Check(stream.ptr()) && !PyBool_Check(stream.ptr())) return handle(stream);
  if (nb::hasattr(stream, "__cuda_stream__")) return handle(nb::tuple(stream.attr("__cuda_stream__")())[1]);
  if (nb::hasattr(stream, "cuda_stream")) return handle(stream.attr("cuda_stream"));
  if (nb::hasattr(stream, "ptr")) return handle(stream.attr("ptr"));
  throw Error(ErrorCategory::InvalidArgument,
              fmt::format("stream: expected None, an int handle or a stream object (with __cuda_stream__, "
                          "cuda_stream or ptr), got {}",
                          nb::type_name(stream.type()).c_str()));
}

}  // namespace conv3djit::python
