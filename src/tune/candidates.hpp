#pragma once
// The plans Engine::tune() times for a problem: the planner's choice first, then the families'
// next best, each with the configuration text that plans it again (so that a tuned record, which
// keeps only that text, gives the same kernel in every process).
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace conv3djit::detail {

struct Candidate {
  Plan plan;
  std::string config;      // forces plan: make_plan(prob, limits, config) launches the same
  bool heuristic = false;  // the planner's own choice
};

/// The configuration text of plan's family and its chosen and optional fields
/// ("igemm_sm80:bm=128,bn=64"), the form EngineOptions::kernel_config takes.
std::string config_text(const Plan& plan);

/// Whether two plans launch the same kernels the same way: keys, grid, block, shared memory and
/// the steps and twin they carry.
bool same_launch(const Plan& a, const Plan& b);

/// At most `count` distinct plans for prob: the heuristic's, then the families' candidates in
/// turns (each family's best, then each one's second, ...), keeping only those whose
/// configuration text plans them again.
std::vector<Candidate> tuning_candidates(const Problem& prob, const DeviceLimits& limits, int count);

}  // namespace conv3djit::detail
