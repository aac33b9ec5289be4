#include "codegen.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace conv3djit::detail {

namespace {
// wgmma exists only on the arch-specific target: sm_90 -> sm_90a (compute_90a).
std::string arch_specific(const std::string& arch) { return arch.back() == 'a' ? arch : arch + "a"; }
}  // namespace

GeneratedKernel generate(const SpecKey& k, const std::string& arch) {
  GeneratedKernel g;
  std::string target = arch;
  switch (k.algorithm) {
    case Algorithm::DirectGeneric:
      g.source = "#include \"direct_fp32.cu\"\n";
      g.name_expression = fmt::format("conv3djit::direct_fp32<{},{},{},{},{},{},{},{},{},{},{}>",
                                      k.c_per_group, k.kd, k.kh, k.kw, k.sd, k.sh, k.sw, k.dd,
                                      k.dh, k.dw, k.config[0]);
      break;
    case Algorithm::DirectTiled:
      g.source = "#include \"direct_tiled_fp32.cu\"\n";
      g.name_expression = fmt::format(
          "conv3djit::direct_tiled_fp32<{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}>", k.c_per_group, k.kd,
          k.kh, k.kw, k.sd, k.sh, k.sw, k.dd, k.dh, k.dw, k.config[0], k.config[1], k.config[2], k.config[3],
          k.config[4], k.config[5], k.config[6]);
      break;
    case Algorithm::Grouped:
      g.source = "#include \"grouped_fp32.cu\"\n";
      g.name_expression = fmt::format("conv3djit::grouped_fp32<{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}>",
                                      k.c_per_group, k.kd, k.kh, k.kw, k.sd, k.sh, k.sw, k.dd, k.dh, k.dw,
                                      k.config[0], k.config[1], k.config[2], k.config[3], k.config[4],
                                      k.config[5], k.config[6]);
      break;
    case Algorithm::Depthwise:
      g.source = "#include \"depthwise_fp32.cu\"\n";
      g.name_expression = fmt::format("conv3djit::depthwise_fp32<{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}>",
                                      k.c_per_group, k.kd, k.kh, k.kw, k.sd, k.sh, k.sw, k.dd, k.dh, k.dw,
                                      k.config[0], k.config[1], k.config[2], k.config[3], k.config[4], k.config[5]);
      break;
    case Algorithm::ImplicitGemm:
      g.source = "#include \"igemm_tf32.cu\"\n";
      g.name_expression = fmt::format("conv3djit::igemm_tf32<{},{},{},{},{},{},{},{},{},{},{},{},{}>",
                                      k.c_per_group, k.kd, k.kh, k.kw, k.sd, k.sh, k.sw, k.dd, k.dh,
                                      k.dw, k.config[0], k.config[1],
                                      k.precision == Precision::Fp32 ? 1 : 0);  // 3xTF32 or TF32
      break;
    case Algorithm::ImplicitGemmSm90:
      g.source = "#include \"igemm_sm90.cu\"\n";
      g.name_expression = fmt::format(
          "conv3djit::igemm_sm90<{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}>", k.c_per_group,
          k.kd, k.kh, k.kw, k.sd, k.sh, k.sw, k.dd, k.dh, k.dw, k.config[0], k.config[1], k.config[2], k.config[3],
          k.config[4], k.config[5], k.config[6], k.precision == Precision::Fp32 ? 1 : 0, k.config[7], k.config[8],
          k.config[9], k.config[10]);
      target = arch_specific(arch);
      break;
    case Algorithm::Sm90Weights:
      g.source = "#include \"igemm_sm90.cu\"\n";
      g.name_expression = fmt::format("conv3djit::sm90_weights<{},{},{},{},{},{},{}>", k.c_per_group, k.kd, k.kh,
                                      k.kw, k.config[0], k.config[1], k.precision == Precision::Fp32 ? 1 : 0);
      target = arch_specific(arch);  // same source as igemm_sm90
      break;
    case Algorithm::PitchRows:
      g.source = "#include \"pitch_rows.cu\"\n";
      g.name_expression = "conv3djit::pitch_rows";
      break;
    case Algorithm::ReferenceFp64:
      g.source = "#include \"reference_fp64.cu\"\n";
      g.name_expression = "conv3djit::reference_fp64";
      break;
  }
  // No fast-math: the fp32 class must match float64 within 1e-6 rel-L2. FMA contraction stays on
  // (it only makes results more accurate).
  g.options = {"--gpu-architecture=" + target, "-std=c++17", "--fmad=true"};
  std::sort(g.options.begin(), g.options.end());
  return g;
}

}  // namespace conv3djit::detail
