// The planner: a problem and a device's limits -> the plan of the first family in the registry
// that offers one, or of the family a forced configuration names.
#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {

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
  p.pad_mode = static_cast<int>(prob.desc.padding_mode);
  p.has_bias = d.bias ? 1 : 0;
  const Epilogue& e = d.epilogue;
  p.alpha = e.alpha;
  p.gamma = e.gamma;
  p.beta = e.residual ? e.beta : 0.f;
  p.act_a = e.activation == Activation::Clamp ? e.clamp_min : e.slope;
  p.act_b = e.clamp_max;
  return p;
}

Refusal Family::serves_types(const Problem& prob) const {
  if (prob.desc.dtype != DataType::Float32 || prob.desc.layout != Layout::NCDHW) return "float32 NCDHW tensors";
  return std::nullopt;
}

Refusal serves_half_ncdhw(const Problem& prob) {
  if (prob.desc.dtype == DataType::Float32 || prob.desc.layout != Layout::NCDHW) return "bf16 / fp16 NCDHW tensors";
  return std::nullopt;
}

Refusal serves_half_or_tf32(const Problem& prob) {
  if (prob.desc.dtype == DataType::Float32 && prob.desc.precision != Precision::Tf32) {
    return "bf16 / fp16 tensors, and float32 ones in the tf32 class";
  }
  return std::nullopt;
}

Refusal Family::declines(const Problem&, const DeviceLimits&) const { return std::nullopt; }

std::vector<Plan> Family::candidates(const Problem& prob, const DeviceLimits& limits, int count) const {
  std::vector<Plan> plans;
  if (count <= 0) return plans;
  if (auto plan = choose(prob, limits)) plans.push_back(std::move(*plan));
  return plans;
}

std::vector<Plan> distinct_plans(std::vector<Plan> plans, int count) {
  std::vector<Plan> out;
  for (Plan& plan : plans) {
    if (static_cast<int>(out.size()) >= count) break;
    if (std::none_of(out.begin(), out.end(), [&](const Plan& p) { return p.key == plan.key; })) {
      out.push_back(std::move(plan));
    }
  }
  return out;
}

SpecKey shape_key(const Problem& prob, const KernelDef& def) {
  SpecKey k;
  k.kernel = &def;
  k.dtype = prob.desc.dtype;
  k.out_dtype = prob.out_dtype;
  k.layout = prob.desc.layout;
  const Conv3dDesc& d = prob.desc;
  // Half inputs have one class, their type's: a tf32 request shares their kernels.
  if (def.uses & kUsesClass) k.precision = d.dtype == DataType::Float32 ? d.precision : Precision::Fp32;
  if (def.uses & kUsesEpilogue) {
    const Epilogue& e = d.epilogue;
    k.epilogue = {e.activation, e.alpha != 1.f || e.gamma != 1.f, e.residual};
  }
  if (def.uses & kUsesKernelExtents) {
    k.c_per_group = static_cast<int32_t>(prob.c_per_group);
    k.kd = static_cast<int32_t>(d.kernel.d), k.kh = static_cast<int32_t>(d.kernel.h);
    k.kw = static_cast<int32_t>(d.kernel.w);
  }
  if (def.uses & kUsesStrides) {
    k.sd = static_cast<int32_t>(d.stride.d), k.sh = static_cast<int32_t>(d.stride.h);
    k.sw = static_cast<int32_t>(d.stride.w);
    k.dd = static_cast<int32_t>(d.dilation.d), k.dh = static_cast<int32_t>(d.dilation.h);
    k.dw = static_cast<int32_t>(d.dilation.w);
    k.padding_mode = d.padding_mode;
  }
  return k;
}

unsigned stride_grid(long long threads, unsigned block, const DeviceLimits& limits, int per_sm) {
  const long long blocks = (threads + block - 1) / block;
  return static_cast<unsigned>(std::max<long long>(1, std::min<long long>(blocks, 1LL * limits.sm_count * per_sm)));
}

unsigned checked_grid(long long blocks, const Family& family) {
  if (blocks > 0x7fffffffLL) {
    throw Error(ErrorCategory::Unsupported,
                fmt::format("{}: {} blocks exceed the grid limit", family.kernel().name, blocks));
  }
  return static_cast<unsigned>(blocks);
}

DeviceLimits limits_for_arch(const std::string& arch) {
  static const std::regex pattern("sm_([0-9]{1,3})([0-9])(a|f)?");
  std::smatch m;
  if (!std::regex_match(arch, m, pattern)) {
    throw Error(ErrorCategory::InvalidArgument, fmt::format("arch = '{}': expected sm_XY (e.g. sm_90) or sm_XYa", arch));
  }
  DeviceLimits l;
  l.cc_major = std::stoi(m[1].str());
  l.cc_minor = std::stoi(m[2].str());
  // Shared memory per block (opt-in) and per SM, as the CUDA programming guide lists them, so
  // that a kernel precompiled for an arch is the one its devices would plan.
  const int cc = l.cc_major * 10 + l.cc_minor;
  if (cc == 80 || cc == 87) {
    l.max_smem_per_block_optin = 163 * 1024; l.max_smem_per_sm = 164 * 1024;
  } else if (cc >= 90 && cc < 120) {
    l.max_smem_per_block_optin = 227 * 1024; l.max_smem_per_sm = 228 * 1024;
  } else {
    l.max_smem_per_block_optin = 99 * 1024; l.max_smem_per_sm = 100 * 1024;
  }
  return l;
}

Plan make_plan(const Problem& prob, const DeviceLimits& limits, const std::string& forced) {
  if (!forced.empty()) {
    const ForcedConfig config = parse_config(forced);
    if (Refusal why = config.family->serves_types(prob)) refuse_config(config, *why);
    if (Refusal why = config.family->can_implement(prob, limits)) refuse_config(config, *why);
    return config.family->force(prob, limits, config);
  }
  return explain_plan(prob, limits, nullptr);
}

Plan explain_plan(const Problem& prob, const DeviceLimits& limits, std::vector<FamilyVerdict>* verdicts) {
  for (const Family* family : registry()) {
    Refusal passed = family->serves_types(prob);
    if (passed) {
      passed = "serves " + *passed;
    } else if (auto plan = family->choose(prob, limits)) {
      if (verdicts) verdicts->push_back({family, ""});
      return std::move(*plan);
    } else if (verdicts) {  // (the reasons only where asked for: choose() checked the rules already)
      passed = family->can_implement(prob, limits);
      if (passed) {
        passed = "needs " + *passed;
      } else if (!(passed = family->declines(prob, limits))) {
        passed = "no configuration of it fits this layer";
      }
    }
    if (verdicts) verdicts->push_back({family, *passed});
  }
  // direct, last in the registry, serves every valid description.
  throw Error(ErrorCategory::Unsupported, "no kernel family serves this description");
}

}  // namespace conv3djit::detail
