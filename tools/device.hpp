#pragma once
// GPU-side helpers for verify and run: the context, RAII device buffers, streams and events, and
// one problem's tensors filled with fresh random inputs. Every CUresult goes through check_cu.
#include <cstdint>
#include <vector>

#include "conv3djit/conv3d.hpp"
#include "conv3djit/engine.hpp"
#include "driver/driver_api.hpp"

namespace conv3djit::cli {

/// Makes device 0's primary context current unless a context already is; throws Error(NoDevice)
/// on a machine without a driver or device.
void make_context_current();

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  ///< 0 bytes allocates nothing (ptr() is null)
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* ptr() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr_)); }
  CUdeviceptr handle() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// Copies all of `from` to host memory (synchronous).
void copy_to_host(const DeviceBuffer& from, void* to);

/// The elements of `type` in `from` as floats (synchronous).
std::vector<float> download_floats(const DeviceBuffer& from, DataType type);

/// Fills a buffer of any element type (float, double, bf16, fp16) with NaN, so that an element a
/// kernel never writes cannot pass a comparison. Ordered on the legacy default stream, which
/// Stream waits for.
void fill_nan(const DeviceBuffer& buffer);

/// A fresh seed for ProblemData when the user gave none.
uint64_t random_seed();

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  /// Milliseconds from `start` to this event; both must have completed.
  float since(const Event& start) const;

 private:
  CUevent event_ = nullptr;
};

/// Where random input values are drawn from: [lo, hi).
struct ValueRange {
  float lo = -1.0f, hi = 1.0f;
};

/// A description's tensors on the device, uniformly random from `seed`: inputs in `input_range`,
/// weights, bias and the residual (if the epilogue has one) in [-1, 1), rounded to their element
/// types and laid out as desc.layout says; the host copies (as floats, which hold every type's
/// values exactly) stay for a CPU reference. The device input starts `input_offset` elements into
/// its buffer (1: an input that is not 16-byte aligned, as a view into a larger tensor can be), and
/// the output and residual `output_offset` elements into theirs.
struct ProblemData {
  /// input_offset / weight_offset / output_offset: elements the input / weight / output and
  /// residual start past their allocation's start (off 16 bytes: the unaligned paths).
  ProblemData(const Conv3dDesc& desc, uint64_t seed, int64_t input_offset = 0, ValueRange input_range = {},
              int64_t weight_offset = 0, int64_t output_offset = 0);

  Conv3dTensors tensors() const;
  /// Bytes a convolution must at least move: inputs (and residual) read once, output written once.
  uint64_t traffic_bytes() const;

  /// The output, copied to the host, as floats.
  std::vector<float> output() const;

  std::vector<float> input, weight, bias, residual;
  DataType dtype = DataType::Float32, out_dtype = DataType::Float32;
  int64_t output_elements = 0;
  int64_t input_offset = 0, weight_offset = 0, output_offset = 0;
  DeviceBuffer d_input, d_weight, d_bias, d_output, d_residual;
};

/// The float64 oracle for data's inputs: reference_conv3d on the CPU, or Engine::run_reference
/// on the GPU (for problems too big for the CPU).
std::vector<double> reference_output(Engine& engine, const Conv3dDesc& desc, const ProblemData& data,
                                     const Stream& stream, bool on_gpu);

}  // namespace conv3djit::cli
