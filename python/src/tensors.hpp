#pragma once
// Arrays from Python (any DLPack producer: PyTorch, CuPy, JAX, ...) checked against a description,
// as PyTorch checks its own arguments, before anything is launched.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>

#include <conv3djit/conv3d.hpp>

namespace conv3djit::python {

namespace nb = nanobind;

/// Read-only view of an input (inputs may come from frameworks whose arrays are immutable).
using InArray = nb::ndarray<nb::ro>;
/// Writable view of an output.
using OutArray = nb::ndarray<>;

/// The arrays of one call. bias and residual are null exactly when the call has none.
struct CallArrays {
  const InArray* input = nullptr;
  const InArray* weight = nullptr;
  const InArray* bias = nullptr;
  const OutArray* out = nullptr;
  const InArray* residual = nullptr;
};

/// What is wrong with the arrays for desc (device, dtype, shape, contiguity, overlap), naming the
/// array and the value: an InvalidArgument or Unsupported failure, or an ok Validation. The
/// residual has the output's shape and element type; it may be out itself or one of the inputs,
/// not part of either. `out_double`: out holds float64 (the GPU reference; its residual is float32).
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
