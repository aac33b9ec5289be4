// direct: one thread per TW outputs along W, every tap read from global memory. Slow, but it
// serves every valid description (every element type and layout), so it ends the registry.
#include "plan/family.hpp"
#include "plan/forced_config.hpp"

namespace conv3djit::detail {
namespace {

struct DirectConfig {
  int tw;  // outputs along W a thread
};

const ConfigTable<DirectConfig, 1> kTable{{{
    {{"tw", FieldRole::Optional, "outputs along W a thread: 1, 2, 4 or 8 (default 4)"}, &DirectConfig::tw},
}}};

class DirectFamily final : public Family {
 public:
  const KernelDef& kernel() const override { return def_; }
  std::vector<std::string> aliases() const override { return {"generic"}; }
  Refusal serves_types(const Problem&) const override { return std::nullopt; }  // every type and layout
  Refusal can_implement(const Problem&, const DeviceLimits&) const override { return std::nullopt; }

  // Four outputs along W per thread reuse each weight four times; narrow outputs take one.
  std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const override {
    return plan(prob, limits, DirectConfig{prob.out.w >= 4 ? 4 : 1});
  }

  Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& forced) const override {
    const DirectConfig c = kTable.apply(DirectConfig{4}, forced);
    if (c.tw != 1 && c.tw != 2 && c.tw != 4 && c.tw != 8) refuse_config(forced, "tw 1, 2, 4 or 8");
    return plan(prob, limits, c);
  }

 private:
  Plan plan(const Problem& prob, const DeviceLimits& limits, const DirectConfig& c) const {
    Plan plan = new_plan(prob, *this, kTable, c, 256);
    const long long threads = prob.out.n * prob.out.k * prob.out.d * prob.out.h * ceil_div(prob.out.w, c.tw);
    plan.grid = stride_grid(threads, plan.block, limits, 16);
    return plan;
  }

  const KernelDef def_{"direct", "direct/direct.cu", kUsesConvolution, false, kTable.infos()};
};

}  // namespace

const Family& direct_family() {
  static const DirectFamily family;
  return family;
}

}  // namespace conv3djit::detail
