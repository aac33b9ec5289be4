#include "gpu_check.hpp"

#include <vector>

#include "problem.hpp"

namespace conv3djit::test {

GpuCheck check_against_reference(Engine& engine, const Conv3dDesc& desc, uint64_t seed,
                                 const cli::Stream& stream) {
  cli::ProblemData data(desc, seed);
  cli::fill_nan(data.d_output);
  engine.run(desc, data.tensors(), stream.get());
  std::vector<float> got(static_cast<size_t>(data.output_elements));
  stream.synchronize();
  cli::copy_to_host(data.d_output, got.data());

  std::vector<double> ref(got.size());
  const detail::Problem prob = detail::make_problem(desc);
  if (prob.macs() <= 3e8) {
    reference_conv3d(desc, data.input.data(), data.weight.data(), desc.bias ? data.bias.data() : nullptr,
                     ref.data());
  } else {
    cli::DeviceBuffer d_ref(ref.size() * sizeof(double));
    Conv3dTensors t = data.tensors();
    t.output = d_ref.ptr();
    engine.run_reference(desc, t, stream.get());
    stream.synchronize();
    cli::copy_to_host(d_ref, ref.data());
  }
  GpuCheck r;
  r.comparison = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(desc.precision));
  r.kernel = engine.kernel_for(desc);
  return r;
}

}  // namespace conv3djit::test
