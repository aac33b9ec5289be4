#pragma once
// Lists of descriptions, each run by the planner's kernel or a forced configuration and checked
// against the float64 reference, one Catch2 section per case and input range; the worst
// rel-L2 per family and class is kept for the suite's report.
#include <map>
#include <string>
#include <vector>

#include "conv3djit/conv3d.hpp"
#include "conv3djit/engine.hpp"

namespace conv3djit::test {

struct KernelCase {
  std::string config;  // forced configuration, or "" for the planner's choice
  Conv3dDesc desc;
  std::string family;  // the family the kernel must come from, "" for any
};

/// The family of a kernel's key text: "igemm_sm80 bf16 ..." -> "igemm_sm80".
std::string family_of(const std::string& kernel);

/// The worst rel-L2 check_cases saw, by "family type[ -> fp32] tol limit".
std::map<std::string, double>& worst_rel_l2();

/// Each case on fresh inputs in [-1, 1) (and [0, 1) too where both_ranges): its class passes,
/// no output is non-finite, and the kernel comes from the case's family.
void check_cases(const std::vector<KernelCase>& cases, bool both_ranges);

/// desc on `engine` once, its input, weight and output (with the residual) that many elements past
/// their allocations' starts (1: off 16 bytes, off a pair): its class passes, no output is
/// non-finite, and the kernel comes from `family` unless that is empty.
void check_offsets(Engine& engine, const Conv3dDesc& desc, int64_t input_offset, int64_t weight_offset,
                   int64_t output_offset, const std::string& family = "");

/// Each case's kernel (planned or forced) has no local memory: no stack frame, no spills.
void check_no_local_memory(const std::vector<KernelCase>& cases);

}  // namespace conv3djit::test
