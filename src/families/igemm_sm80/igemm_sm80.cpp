// igemm_sm80: implicit GEMM on mma.sync tensor cores (TF32, or 3xTF32 in the fp32 class, for
// float32 NCDHW; one bf16 / fp16 product for half inputs in NCDHW and NDHWC), sm_80 or newer,
// groups == 1: BM output positions x BN channels a block, the reduction gathered through a table
// of input offsets (docs/kernels/igemm_sm80.md).
#include "igemm_sm80/geometry.cuh"
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {
namespace {

struct Sm80Config {
  int bm, bn;
};

const ConfigTable<Sm80Config, 2> kTable{{{
    {{"bm", FieldRole::Chosen, "output positions a block, a multiple of 32"}, &Sm80Config::bm},
    {{"bn", FieldRole::Chosen,
      "output channels a block, a multiple of 32 (BM x BN / 32 threads in [BM, 1024], float32 at most 256)"},
     &Sm80Config::bn},
}}};

bool half_inputs(const Problem& prob) { return prob.desc.dtype != DataType::Float32; }

int shared_bytes(const Problem& prob, const Sm80Config& c) {
  const long long kred = prob.c_per_group * prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
  if (half_inputs(prob)) return igemm_half_shared_bytes(static_cast<int>(kred), c.bm, c.bn);
  return igemm_shared_bytes(static_cast<int>(kred), c.bm, c.bn, prob.desc.precision == Precision::Fp32 ? 1 : 0);
}

Refusal refusal(const Problem& prob, const DeviceLimits& limits) {
  const Conv3dDesc& d = prob.desc;
  if (d.groups != 1) return "groups == 1";
  if (limits.cc_major < 8) return "sm_80 or newer";
  // The gather table holds 32-bit offsets within one image and 10-bit tap displacements.
  if ((d.kernel.d - 1) * d.dilation.d >= 1024 || (d.kernel.h - 1) * d.dilation.h >= 1024 ||
      (d.kernel.w - 1) * d.dilation.w >= 1024) {
    return "dilated kernel extents below 1024";
  }
  if (d.c * d.d * d.h * d.w >= (int64_t{1} << 31)) return "an image of fewer than 2^31 elements";
  return std::nullopt;
}

// The tile needs BM x BN / 32 threads <= 1024, a multiple of 16 and at least BM; the half kernel
// stages 8-term groups, at least one of A and of B a thread: BM and BN of 32, 64 or 128.
bool fits(const Problem& prob, const DeviceLimits& limits, const Sm80Config& c) {
  const int bm = c.bm, bn = c.bn;
  if (half_inputs(prob) && (bm > 128 || bn > 128)) return false;
  // float32 tiles of 512 threads (128 x 128, 256 x 64) have 128 registers a thread and spill
  // 24-100 bytes in both classes (ptxas -v); 256 threads have 255 and take 126-170.
  if (!half_inputs(prob) && bm * bn / 32 > 256) return false;
  return !refusal(prob, limits) && bm % 32 == 0 && bn % 32 == 0 && bm >= 32 && bn >= 32 && bm * bn / 32 <= 1024 &&
         bm * bn / 32 >= bm && (bm * bn / 32) % 16 == 0 && shared_bytes(prob, c) <= limits.max_smem_per_block_optin;
}

class Sm80Family final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  std::vector<std::string> aliases() const override { return {"igemm"}; }
  const char* arch() const override { return "sm_80 or newer"; }
  Refusal can_implement(const Problem& prob, const DeviceLimits& limits) const override {
    return refusal(prob, limits);
  }
  // float32 NCDHW (TF32 / 3xTF32), and bf16 / fp16 in either layout with either output type.
  Refusal serves_types(const Problem& prob) const override {
    if (half_inputs(prob)) return std::nullopt;
    return Family::serves_types(prob);
  }

  // Tensor cores or FFMA (measured on the H200 suite, docs/kernels/igemm_sm80.md): the implicit
  // GEMM wins once the reduction has many channels (C/groups >= 16: 1.1-2.9x the FFMA kernel) or
  // is long (>= 1000 terms), and for the tf32 class; small C with a short reduction and K < 16
  // (whose columns would mostly be padding) stay on FFMA.
  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    if (half_inputs(prob)) return choose_half(prob, limits);
    if (prob.desc.groups != 1 || declines(prob, limits)) return std::nullopt;
    return choose_float(prob, limits);
  }

  Refusal declines(const Problem& prob, const DeviceLimits&) const override {
    if (half_inputs(prob)) return std::nullopt;
    const long long kred = prob.c_per_group * prob.desc.kernel.d * prob.desc.kernel.h * prob.desc.kernel.w;
    if (prob.out.k < 16) return "fewer than 16 output channels: the FFMA kernels win there";
    if (!(prob.c_per_group >= 16 || kred >= 1000 || prob.desc.precision == Precision::Tf32)) {
      return "fewer than 16 input channels and under 1000 terms in the fp32 class: the FFMA kernels win there";
    }
    return std::nullopt;
  }

  // choose()'s tile, also where it leaves the layer to the FFMA kernels; then the other tiles that
  // fit, of column blocks that are not mostly padding.
  std::vector<Plan> candidates(const Problem& prob, const DeviceLimits& limits, int count) const override {
    std::vector<Plan> plans;
    if (auto first = half_inputs(prob) ? choose_half(prob, limits) : choose_float(prob, limits)) {
      plans.push_back(std::move(*first));
    }
    const Sm80Config tiles[] = {{128, 64}, {64, 64}, {128, 32}, {64, 128}, {128, 128}, {256, 64}, {64, 32}};
    for (const Sm80Config& c : tiles) {
      if (useful_width(prob.out.k, c.bn, 32) && fits(prob, limits, c)) plans.push_back(plan(prob, c));
    }
    return distinct_plans(std::move(plans), count);
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    const Sm80Config c = kTable.apply(Sm80Config{}, forced);
    if (!fits(prob, limits, c)) {
      refuse_config(forced, "groups == 1, sm_80 or newer, BM and BN multiples of 32 with BN >= 32, BM * BN / 32 "
                            "threads in [BM, 1024] (float32: at most 256; bf16 / fp16: BM and BN at most 128), and "
                            "its tables must fit");
    }
    return plan(prob, c);
  }

 private:
  // float32: 128 rows, K <= 32 in one tile of 32 columns, else 64.
  std::optional<Plan> choose_float(const Problem& prob, const DeviceLimits& limits) const {
    const Sm80Config c{128, prob.out.k <= 32 ? 32 : 64};
    if (!fits(prob, limits, c)) return std::nullopt;
    return plan(prob, c);
  }

  // Half inputs: wherever it is valid (against direct's FFMA of converted halves, the only other
  // kernel for them). BN covers K <= 32 in one tile, else 64; BM = 64 where 128-row tiles would
  // make fewer than 256 blocks (a fixed count, not the device's SMs: keys never depend on them).
  std::optional<Plan> choose_half(const Problem& prob, const DeviceLimits& limits) const {
    if (prob.desc.groups != 1) return std::nullopt;
    const long long rows = prob.output_elements / prob.out.k;
    const int bn = prob.out.k <= 32 ? 32 : 64;
    const int bm = ceil_div(rows, 128) * ceil_div(prob.out.k, bn) < 256 ? 64 : 128;
    for (const Sm80Config c : {Sm80Config{bm, bn}, Sm80Config{64, bn}, Sm80Config{32, 32}}) {
      if (fits(prob, limits, c)) return plan(prob, c);
    }
    return std::nullopt;
  }

  Plan plan(const Problem& prob, const Sm80Config& c) const {
    Plan plan = new_plan(prob, *this, kTable, c, c.bm * c.bn / 32, shared_bytes(prob, c));
    plan.grid = checked_grid(ceil_div(prob.output_elements / prob.out.k, c.bm) * ceil_div(prob.out.k, c.bn), *this);
    return plan;
  }

  const KernelDef def_{"igemm_sm80", "igemm_sm80/igemm_sm80.cu", kUsesConvolution, false, kTable.infos()};
};

}  // namespace

const Family& igemm_sm80_family() {
  static const Sm80Family family;
  return family;
}

}  // namespace conv3djit::detail
