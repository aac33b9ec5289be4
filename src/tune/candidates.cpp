#include "tune/candidates.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/log.hpp"
#include "plan/family.hpp"

namespace conv3djit::detail {

std::string config_text(const Plan& plan) {
  const KernelDef& def = plan.family->kernel();
  std::vector<std::string> fields;
  for (size_t i = 0; i < def.fields.size(); ++i) {
    if (def.fields[i].role == FieldRole::Derived) continue;
    fields.push_back(fmt::format("{}={}", def.fields[i].name, plan.key.config[i]));
  }
  return fields.empty() ? std::string(def.name) : fmt::format("{}:{}", def.name, fmt::join(fields, ","));
}

namespace {
bool same_step(const std::optional<PrepPlan>& a, const std::optional<PrepPlan>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->key == b->key && a->grid == b->grid && a->block == b->block &&
                a->workspace_bytes == b->workspace_bytes && a->every_call == b->every_call);
}
}  // namespace

bool same_launch(const Plan& a, const Plan& b) {
  if (!(a.key == b.key && a.family == b.family && a.grid == b.grid && a.block == b.block &&
        a.shared_bytes == b.shared_bytes && a.store_channels == b.store_channels && same_step(a.prep, b.prep) &&
        same_step(a.input_copy, b.input_copy))) {
    return false;
  }
  if (static_cast<bool>(a.unaligned) != static_cast<bool>(b.unaligned)) return false;
  return !a.unaligned || same_launch(*a.unaligned, *b.unaligned);
}

std::vector<Candidate> tuning_candidates(const Problem& prob, const DeviceLimits& limits, int count) {
  std::vector<Candidate> out;
  if (count <= 0) return out;
  const auto add = [&](Plan plan, bool heuristic) {
    if (static_cast<int>(out.size()) >= count) return;
    for (const Candidate& c : out) {
      if (same_launch(c.plan, plan)) return;
    }
    std::string config = config_text(plan);
    // A candidate the record could not bring back is no candidate.
    try {
      if (!same_launch(make_plan(prob, limits, config), plan)) {
        log().debug("tuning: '{}' plans another kernel than {}; left out", config, canonical_text(plan.key));
        return;
      }
    } catch (const Error& e) {
      log().debug("tuning: '{}' does not plan again ({}); left out", config, e.what());
      return;
    }
    out.push_back(Candidate{std::move(plan), std::move(config), heuristic});
  };
  add(make_plan(prob, limits, ""), true);
  std::vector<std::vector<Plan>> offered;
  for (const Family* family : registry()) {
    if (family->serves_types(prob) || family->can_implement(prob, limits)) continue;
    offered.push_back(family->candidates(prob, limits, count));
  }
  // The registry's last family (direct) serves everything as the fallback and wins nowhere the
  // others can serve (on the H200 suites it was the slowest candidate of every such row): it
  // takes only the places the others leave.
  std::vector<Plan> fallback;
  if (!registry().back()->serves_types(prob) && !registry().back()->can_implement(prob, limits) && !offered.empty()) {
    fallback = std::move(offered.back());
    offered.pop_back();
  }
  for (size_t turn = 0; static_cast<int>(out.size()) < count; ++turn) {
    bool any = false;
    for (std::vector<Plan>& plans : offered) {
      if (turn >= plans.size()) continue;
      any = true;
      add(std::move(plans[turn]), false);
    }
    if (!any) break;
  }
  for (Plan& plan : fallback) add(std::move(plan), false);
  return out;
}

}  // namespace conv3djit::detail
