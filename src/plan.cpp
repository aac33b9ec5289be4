#include "plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

namespace conv3djit::detail {
namespace {

ConvParams make_params(const Problem& prob) {
  const Conv3dDesc& d = prob.desc;
  ConvParams p{};
  p.n = d.n; p.c = d.c; p.d = d.d; p.h = d.h; p.w = d.w;
  p.k = d.k; p.od = prob.out.d; p.oh = prob.out.h; p.ow = prob.out.w;
  p.k_per_group = prob.k_per_group;
  p.c_per_group = static_cast<int>(prob.c_per_group);
  p.kd = static_cast<int>(d.kernel.d); p.kh = static_cast<int>(d.kernel.h); p.kw = static_cast<int>(d.kernel.w);
  p.sd = static_cast<int>(d.stride.d); p.sh = static_cast<int>(d.stride.h); p.sw = static_cast<int>(d.stride.w);
  p.dd = static_cast<int>(d.dilation.d); p.dh = static_cast<int>(d.dilation.h); p.dw = static_cast<int>(d.dilation.w);
  p.pad_d = static_cast<int>(prob.pad.before.d);
  p.pad_h = static_cast<int>(prob.pad.before.h);
  p.pad_w = static_cast<int>(prob.pad.before.w);
  p.has_bias = d.bias ? 1 : 0;
  return p;
}

SpecKey shape_key(const Problem& prob, Algorithm algorithm) {
  SpecKey k;
  k.algorithm = algorithm;
  k.precision = prob.desc.precision;
  k.c_per_group = static_cast<int32_t>(prob.c_per_group);
  const Conv3dDesc& d = prob.desc;
  k.kd = static_cast<int32_t>(d.kernel.d); k.kh = static_cast<int32_t>(d.kernel.h); k.kw = static_cast<int32_t>(d.kernel.w);
  k.sd = static_cast<int32_t>(d.stride.d); k.sh = static_cast<int32_t>(d.stride.h); k.sw = static_cast<int32_t>(d.stride.w);
  k.dd = static_cast<int32_t>(d.dilation.d); k.dh = static_cast<int32_t>(d.dilation.h); k.dw = static_cast<int32_t>(d.dilation.w);
  return k;
}

// A grid-stride launch of `threads` threads in blocks of `block`, capped at `per_sm` blocks per SM.
unsigned stride_grid(long long threads, unsigned block, const DeviceLimits& limits, int per_sm) {
  const long long blocks = (threads + block - 1) / block;
  return static_cast<unsigned>(std::max<long long>(1, std::min<long long>(blocks, 1LL * limits.sm_count * per_sm)));
}

}  // namespace

DeviceLimits limits_for_arch(const std::string& arch) {
  static const std::regex pattern("sm_([0-9]+)([0-9])(a|f)?");
  std::smatch m;
  if (!std::regex_match(arch, m, pattern)) {
    throw Error(ErrorCategory::InvalidArgument,
                fmt::format("arch = '{}': expected sm_XY (e.g. sm_90) or sm_XYa", arch));
  }
  DeviceLimits l;
  l.cc_major = std::stoi(m[1].str());
  l.cc_minor = std::stoi(m[2].str());
  return l;
}

Plan make_plan(const Problem& prob, const DeviceLimits& limits) {
  Plan plan;
  plan.params = make_params(prob);
  plan.key = shape_key(prob, Algorithm::DirectGeneric);
  // Four outputs along W per thread reuse each weight four times; narrow outputs take one.
  const int tw = prob.out.w >= 4 ? 4 : 1;
  plan.key.config[0] = tw;
  plan.block = 256;
  const long long threads = prob.out.n * prob.out.k * prob.out.d * prob.out.h * ((prob.out.w + tw - 1) / tw);
  plan.grid = stride_grid(threads, plan.block, limits, 16);
  return plan;
}

Plan make_reference_plan(const Problem& prob, const DeviceLimits& limits) {
  Plan plan;
  plan.params = make_params(prob);
  plan.key.algorithm = Algorithm::ReferenceFp64;  // shape-generic: no shape fields in its key
  plan.block = 256;
  plan.grid = stride_grid(prob.output_elements, plan.block, limits, 16);
  return plan;
}

}  // namespace conv3djit::detail
