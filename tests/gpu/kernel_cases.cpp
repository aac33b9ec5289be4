#include "kernel_cases.hpp"

#include <algorithm>
#include <random>

#include "catch.hpp"
#include "conv3djit/reference.hpp"
#include "gpu_check.hpp"

namespace conv3djit::test {

std::string family_of(const std::string& kernel) { return kernel.substr(0, kernel.find(' ')); }

std::map<std::string, double>& worst_rel_l2() {
  static std::map<std::string, double> worst;
  return worst;
}

namespace {
void require_pass(const GpuCheck& r, const KernelCase& c) {
  const std::string cls = family_of(r.kernel) + " " + dtype_name(c.desc.dtype) +
                          (c.desc.fp32_output ? " -> fp32" : "") + " tol " + std::to_string(tolerance(c.desc).rel_l2);
  double& worst = worst_rel_l2()[cls];
  worst = std::max(worst, r.comparison.rel_l2);
  INFO("kernel " << r.kernel << ": rel-L2 " << r.comparison.rel_l2 << ", max error "
                 << r.comparison.max_abs_error << ", outside tolerance " << r.comparison.outside_tolerance
                 << ", non-finite " << r.comparison.non_finite);
  if (!c.family.empty()) CHECK(family_of(r.kernel) == c.family);
  CHECK(r.comparison.non_finite == 0);
  CHECK(r.comparison.passed);
}
}  // namespace

void check_cases(const std::vector<KernelCase>& cases, bool both_ranges) {
  cli::make_context_current();
  cli::Stream stream;
  std::random_device seeds;
  for (const KernelCase& c : cases) {
    for (const bool unit_range : {false, true}) {
      if (unit_range && !both_ranges) continue;
      const cli::ValueRange range = unit_range ? cli::ValueRange{0.0f, 1.0f} : cli::ValueRange{};
      DYNAMIC_SECTION((c.config.empty() ? "auto" : c.config) << " " << describe(c.desc) << (unit_range ? " [0,1)" : "")) {
        require_pass(check_against_reference(engine_for(c.config), c.desc, seeds(), stream, nullptr, range), c);
      }
    }
  }
}

void check_offsets(Engine& engine, const Conv3dDesc& desc, int64_t input_offset, int64_t weight_offset,
                   int64_t output_offset, const std::string& family) {
  cli::Stream stream;
  std::random_device seeds;
  const GpuCheck r =
      check_against_reference(engine, desc, seeds(), stream, nullptr, {}, input_offset, weight_offset, output_offset);
  INFO(r.kernel << ", offsets " << input_offset << " / " << weight_offset << " / " << output_offset << ": rel-L2 "
                << r.comparison.rel_l2 << ", non-finite " << r.comparison.non_finite);
  if (!family.empty()) CHECK(family_of(r.kernel) == family);
  CHECK(r.comparison.non_finite == 0);
  CHECK(r.comparison.passed);
}

void check_no_local_memory(const std::vector<KernelCase>& cases) {
  cli::Stream stream;
  for (const KernelCase& c : cases) {
    const KernelResources r = engine_for(c.config).resources(c.desc, stream.get());
    INFO(c.config << " " << describe(c.desc) << ": " << r.kernel << " " << r.registers << " registers");
    CHECK(r.local_bytes == 0);
  }
}

}  // namespace conv3djit::test
