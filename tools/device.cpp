#include "device.hpp"

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "conv3djit/engine.hpp"
#include "conv3djit/half.hpp"
#include "conv3djit/reference.hpp"
#include "driver/module_loader.hpp"

namespace conv3djit::cli {

using detail::check_cu;
using detail::driver;

void make_context_current() {
  // The library's own rule for the null stream: the current context, else device 0's primary
  // context (shared with the runtime API and PyTorch), made current.
  detail::context_for_stream(nullptr);
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) check_cu(driver().cuMemAlloc(&ptr_, bytes), "cuMemAlloc");
}

DeviceBuffer::~DeviceBuffer() {
  // Not checked: a destructor must not throw, and a failed free leaves nothing to do.
  if (ptr_ != 0) driver().cuMemFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != 0) driver().cuMemFree(ptr_);
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void copy_to_host(const DeviceBuffer& from, void* to) {
  if (from.bytes() > 0) check_cu(driver().cuMemcpyDtoH(to, from.handle(), from.bytes()), "cuMemcpyDtoH");
}

// A blocking stream: it waits for the uploads and memsets issued on the legacy default stream.
Stream::Stream() { check_cu(driver().cuStreamCreate(&stream_, CU_STREAM_DEFAULT), "cuStreamCreate"); }

Stream::~Stream() { driver().cuStreamDestroy(stream_); }

void Stream::synchronize() const { check_cu(driver().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

Event::Event() { check_cu(driver().cuEventCreate(&event_, CU_EVENT_DEFAULT), "cuEventCreate"); }

Event::~Event() { driver().cuEventDestroy(event_); }

void Event::record(const Stream& stream) { check_cu(driver().cuEventRecord(event_, stream.get()), "cuEventRecord"); }

float Event::since(const Event& start) const {
  float ms = 0;
  check_cu(driver().cuEventElapsedTime(&ms, start.event_, event_), "cuEventElapsedTime");
  return ms;
}

namespace {

// fn(chunk, begin, end) for the chunks of [0, count), on every core: the tensors of the layers of
// 2^31 elements and more took minutes to fill and convert on one.
template <class Fn>
void for_chunks(int64_t count, const Fn& fn) {
  constexpr int64_t kChunk = int64_t{1} << 22;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  std::atomic<int64_t> next{0};
  const auto work = [&] {
    for (int64_t i = next++; i < chunks; i = next++) fn(i, i * kChunk, std::min(count, (i + 1) * kChunk));
  };
  std::vector<std::thread> workers;
  const int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  for (int64_t t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
}

// Uniform values of [lo, hi), each then rounded to `type` (the host keeps what the device holds).
// Chunk i draws from its own generator seeded by (seed, i): the same values whatever the cores.
std::vector<float> random_values(int64_t count, uint64_t seed, DataType type, ValueRange range = {}) {
  std::vector<float> values(static_cast<size_t>(count));
  for_chunks(count, [&](int64_t chunk, int64_t begin, int64_t end) {
    std::mt19937_64 rng(seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(chunk + 1));
    std::uniform_real_distribution<float> uniform(range.lo, range.hi);
    for (int64_t i = begin; i < end; ++i) values[static_cast<size_t>(i)] = uniform(rng);
    if (type != DataType::Float32) {
      std::vector<uint16_t> bits(static_cast<size_t>(end - begin));
      from_float(type, values.data() + begin, end - begin, bits.data());
      to_float(type, bits.data(), end - begin, values.data() + begin);
    }
  });
  return values;
}

/// `host` as elements of `type` into a new buffer, starting `offset` elements into it.
DeviceBuffer upload(const std::vector<float>& host, DataType type, int64_t offset = 0) {
  if (host.empty()) return DeviceBuffer();
  const size_t bytes = static_cast<size_t>(dtype_bytes(type));
  std::vector<unsigned char> typed(host.size() * bytes);
  for_chunks(static_cast<int64_t>(host.size()), [&](int64_t, int64_t begin, int64_t end) {
    from_float(type, host.data() + begin, end - begin, typed.data() + static_cast<size_t>(begin) * bytes);
  });
  DeviceBuffer buffer(typed.size() + static_cast<size_t>(offset) * bytes);
  check_cu(driver().cuMemcpyHtoD(buffer.handle() + static_cast<CUdeviceptr>(offset) * bytes, typed.data(),
                                 typed.size()),
           "cuMemcpyHtoD");
  return buffer;
}

}  // namespace

ProblemData::ProblemData(const Conv3dDesc& desc, uint64_t seed, int64_t offset, ValueRange input_range,
                         int64_t weight_at, int64_t output_at)
    : dtype(desc.dtype),
      out_dtype(output_dtype(desc)),
      input_offset(offset),
      weight_offset(weight_at),
      output_offset(output_at) {
  std::mt19937_64 rng(seed);  // each tensor's seed
  const int64_t weight_elements =
      desc.k * (desc.c / desc.groups) * desc.kernel.d * desc.kernel.h * desc.kernel.w;
  input = random_values(desc.n * desc.c * desc.d * desc.h * desc.w, rng(), dtype, input_range);
  weight = random_values(weight_elements, rng(), dtype);
  const uint64_t bias_seed = rng(), residual_seed = rng();
  if (desc.bias) bias = random_values(desc.k, bias_seed, dtype);
  output_elements = output_extents(desc).elements();
  if (desc.epilogue.residual) residual = random_values(output_elements, residual_seed, out_dtype);
  d_residual = upload(residual, out_dtype, output_offset);
  d_input = upload(input, dtype, input_offset);
  d_weight = upload(weight, dtype, weight_offset);
  d_bias = upload(bias, dtype);
  d_output = DeviceBuffer(static_cast<size_t>(output_elements + output_offset) *
                          static_cast<size_t>(dtype_bytes(out_dtype)));
}

std::vector<float> download_floats(const DeviceBuffer& from, DataType type) {
  const int64_t count = static_cast<int64_t>(from.bytes()) / dtype_bytes(type);
  std::vector<unsigned char> raw(from.bytes());
  copy_to_host(from, raw.data());
  std::vector<float> values(static_cast<size_t>(count));
  to_float(type, raw.data(), count, values.data());
  return values;
}

std::vector<float> ProblemData::output() const {
  std::vector<float> all = download_floats(d_output, out_dtype);
  all.erase(all.begin(), all.begin() + output_offset);
  return all;
}

void fill_nan(const DeviceBuffer& buffer) {
  // A NaN in every element type: as a float (exponent all ones), as a double, and as each 16-bit
  // half (bf16 and fp16 both read 0x7fff as a NaN).
  constexpr unsigned int kNaNWord = 0x7fff7fffu;
  check_cu(driver().cuMemsetD32(buffer.handle(), kNaNWord, buffer.bytes() / 4), "cuMemsetD32");
}

uint64_t random_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

Conv3dTensors ProblemData::tensors() const {
  Conv3dTensors t;
  t.input = static_cast<const unsigned char*>(d_input.ptr()) + input_offset * dtype_bytes(dtype);
  t.weight = static_cast<const unsigned char*>(d_weight.ptr()) + weight_offset * dtype_bytes(dtype);
  t.bias = d_bias.ptr();
  const int64_t out_bytes = dtype_bytes(out_dtype);
  t.output = static_cast<unsigned char*>(d_output.ptr()) + output_offset * out_bytes;
  t.residual = residual.empty() ? nullptr
                                : static_cast<const unsigned char*>(d_residual.ptr()) + output_offset * out_bytes;
  return t;
}

uint64_t ProblemData::traffic_bytes() const {
  return (input.size() + weight.size()) * static_cast<uint64_t>(dtype_bytes(dtype)) + d_bias.bytes() +
         d_output.bytes() + d_residual.bytes();
}

std::vector<double> reference_output(Engine& engine, const Conv3dDesc& desc, const ProblemData& data,
                                     const Stream& stream, bool on_gpu) {
  std::vector<double> reference(static_cast<size_t>(data.output_elements));
  if (!on_gpu) {
    // The host copies are floats holding the tensors' values exactly, in desc's layout.
    Conv3dDesc as_floats = desc;
    as_floats.dtype = DataType::Float32;
    as_floats.fp32_output = false;
    reference_conv3d(as_floats, data.input.data(), data.weight.data(),
                     desc.bias ? data.bias.data() : nullptr, desc.epilogue.residual ? data.residual.data() : nullptr,
                     reference.data());
    return reference;
  }
  DeviceBuffer device_reference(reference.size() * sizeof(double));
  fill_nan(device_reference);
  Conv3dTensors tensors = data.tensors();
  tensors.output = device_reference.ptr();
  engine.run_reference(desc, tensors, stream.get());
  stream.synchronize();
  copy_to_host(device_reference, reference.data());
  return reference;
}

}  // namespace conv3djit::cli
