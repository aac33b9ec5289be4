#pragma once
// ptxas' resource lines for the kernel a description plans to, compiled with -v: "Used N
// registers, ... 0 bytes spill stores, 0 bytes spill loads" (NVRTC only, no GPU).
#include <string>

#include "catch.hpp"
#include "conv3djit/conv3d.hpp"
#include "core/problem.hpp"
#include "jit/codegen.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "plan/plan.hpp"

namespace conv3djit::test {

struct PtxasReport {
  std::string kernel, log;
};

/// desc's plan on arch (forced: a --config), compiled with ptxas' report.
inline PtxasReport ptxas_report(const Conv3dDesc& desc, const std::string& arch, const std::string& forced = "") {
  const detail::Problem prob = detail::make_problem(desc);
  const detail::Plan plan = detail::make_plan(prob, detail::limits_for_arch(arch), forced);
  detail::GeneratedKernel gen = detail::generate(plan.key, arch);
  gen.options.push_back("--ptxas-options=-v");
  return {detail::canonical_text(plan.key), detail::nvrtc_compile(gen).notes};
}

/// The same for the preparation kernel (igemm_sm90's weights) of desc's plan.
inline PtxasReport prep_ptxas_report(const Conv3dDesc& desc, const std::string& arch) {
  const detail::Plan plan = detail::make_plan(detail::make_problem(desc), detail::limits_for_arch(arch));
  REQUIRE(plan.prep);
  detail::GeneratedKernel gen = detail::generate(plan.prep->key, arch);
  gen.options.push_back("--ptxas-options=-v");
  return {detail::canonical_text(plan.prep->key), detail::nvrtc_compile(gen).notes};
}

inline void check_no_spills(const PtxasReport& r) {
  INFO(r.kernel << "\n" << r.log);
  CHECK(r.log.find("Used ") != std::string::npos);
  CHECK(r.log.find(" 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") != std::string::npos);
}

}  // namespace conv3djit::test
