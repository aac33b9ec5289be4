#pragma once
// Arrays from Python (any DLPack producer: PyTorch, CuPy, JAX, ...) checked against a description,
// as PyTorch checks its own arguments, before anything is launched.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <vector>

#include <conv3djit/conv3d.hpp>

namespace conv3djit::python {

namespace nb = nanobind;

/// Read-only view of an input (inputs may come from frameworks whose arrays are immutable).
using InArray = nb::ndarray<nb::ro>;
/// Writable view of an output.
using OutArray = nb::ndarray<>;

/// The arrays of one call. bias and residual are null exactly when the call has none; input (and
/// with it every array but the weight) is null for the weight alone (prepare_weights).
struct CallArrays {
  const InArray* input = nullptr;
  const InArray* weight = nullptr;
  const InArray* bias = nullptr;
  const OutArray* out = nullptr;
  const InArray* residual = nullptr;
};

/// The DLPack element type of a DataType (bf16: kDLBfloat, fp16: kDLFloat, both 16 bits).
nb::dlpack::dtype element_of(DataType type);

/// "float32", "bfloat16", "int64", ...: a DLPack element type by PyTorch's name.
std::string dtype_text(nb::dlpack::dtype t);

/// "(2, 3)", "(4,)".
std::string shape_text(const std::vector<int64_t>& dims);

/// The axes of an array of `ndim` dims from the outermost to the innermost in a layout's memory:
/// NDHWC puts the second axis of a 5-dim array last (channels_last_3d); others are C order.
std::vector<size_t> memory_order(size_t ndim, Layout layout);

/// The strides (in elements) of a dense array of a logical shape in a layout's memory order: the
/// shape is PyTorch's (N, C, D, H, W) or (K, C / groups, KD, KH, KW) for either layout, NDHWC
/// puts the second axis innermost (channels_last_3d). Arrays of other ranks (a bias): C order.
std::vector<int64_t> dense_strides(const std::vector<int64_t>& shape, Layout layout);

/// Whether strides are the wanted ones on every axis longer than 1 (PyTorch gives size-1 axes
/// arbitrary strides).
bool has_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                 const std::vector<int64_t>& wanted);

/// What is wrong with the arrays for desc (device, dtype, shape, strides, overlap), naming the
/// array and the value: an InvalidArgument or Unsupported failure, or an ok Validation. Shapes
/// are PyTorch's (N, C, D, H, W) in both layouts; the strides must be desc.layout's dense ones.
/// input, weight and bias hold desc.dtype, out and the residual output_dtype(desc); the residual
/// has the output's shape and layout and may be out itself or one of the inputs, not part of
/// either. `out_double`: out holds float64 (the GPU reference).
Validation check_arrays(const Conv3dDesc& desc, const CallArrays& arrays, bool out_double = false);

/// The arrays of a call. Pointers, not optionals: an optional parameter would accept a plain
/// array by copying it into a temporary, whose address would outlive it.
CallArrays arrays_of(const InArray& input, const InArray& weight, const InArray* bias, const OutArray* out,
                     const InArray* residual = nullptr);

/// The array an optional argument holds, or null.
template <class Array>
const Array* given(const std::optional<Array>& a) {
  return a ? &*a : nullptr;
}

/// The Conv3dTensors of arrays that passed check_arrays().
Conv3dTensors tensors_of(const CallArrays& arrays);

/// A stream argument as a CUstream: None (the legacy default stream), an int handle, or an object
/// with __cuda_stream__ (CUDA stream protocol), cuda_stream (torch.cuda.Stream) or ptr (CuPy).
Stream stream_of(nb::handle stream);

}  // namespace conv3djit::python
