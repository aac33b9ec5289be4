// The kernel families, in the planner's order: each offers a plan only where it is measured to
// beat the families after it (docs/kernels/), and direct serves every description. A new family
// is its two folders (src/families/<f>/, kernels/<f>/) and its line here.
#include "plan/family.hpp"

namespace conv3djit::detail {

const Family& gemm_sm90_family();
const Family& igemm_sm90_k16_family();
const Family& igemm_sm90_family();
const Family& igemm_sm90_half_family();
const Family& igemm_sm80_family();
const Family& grouped_mma_family();
const Family& direct_tiled_family();
const Family& depthwise_family();
const Family& grouped_family();
const Family& direct_family();

const std::vector<const Family*>& registry() {
  static const std::vector<const Family*> families = {
      &igemm_sm90_k16_family(), &igemm_sm90_family(),  &gemm_sm90_family(), &igemm_sm90_half_family(),
      &igemm_sm80_family(),     &grouped_mma_family(), &depthwise_family(),       &grouped_family(),
      &direct_tiled_family(),   &direct_family(),
  };
  return families;
}

}  // namespace conv3djit::detail
