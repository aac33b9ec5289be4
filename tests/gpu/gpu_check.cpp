#include "gpu_check.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "driver/driver_api.hpp"
#include "core/problem.hpp"

namespace conv3djit::test {

Engine& engine_for(const std::string& config) {
  static std::map<std::string, std::unique_ptr<Engine>> engines;
  static std::mutex lock;
  std::lock_guard<std::mutex> guard(lock);
  if (config.empty()) return Engine::global();
  auto& e = engines[config];
  if (!e) {
    EngineOptions options;
    options.kernel_config = config;
    e = std::make_unique<Engine>(options);
  }
  return *e;
}

GpuCheck check_against_reference(Engine& engine, const Conv3dDesc& desc, uint64_t seed,
                                 const cli::Stream& stream, CUcontext call_from, cli::ValueRange input_range,
                                 int64_t input_offset, int64_t weight_offset, int64_t output_offset) {
  cli::ProblemData data(desc, seed, input_offset, input_range, weight_offset, output_offset);
  cli::fill_nan(data.d_output);
  if (call_from != nullptr) {
    CUcontext own = nullptr;
    detail::check_cu(detail::driver().cuCtxGetCurrent(&own), "cuCtxGetCurrent");
    detail::check_cu(detail::driver().cuCtxSetCurrent(call_from), "cuCtxSetCurrent");
    engine.run(desc, data.tensors(), stream.get());
    detail::check_cu(detail::driver().cuCtxSetCurrent(own), "cuCtxSetCurrent");
  } else {
    engine.run(desc, data.tensors(), stream.get());
  }
  stream.synchronize();
  const std::vector<float> got = data.output();

  const std::vector<double> ref =
      cli::reference_output(engine, desc, data, stream, detail::make_problem(desc).macs() > 3e8);
  GpuCheck r;
  r.comparison = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(desc));
  r.kernel = engine.kernel_for(desc);
  return r;
}

}  // namespace conv3djit::test
