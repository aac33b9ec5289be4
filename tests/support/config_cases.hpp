#pragma once
// The (configuration, descriptions) pairs the GPU suite checks against the reference, shared
// with the NVRTC suite, which checks without a GPU that every one of them plans on sm_90.
#include <string>
#include <vector>

#include "conv3djit/conv3d.hpp"

namespace conv3djit::test {

Conv3dDesc make(int64_t n, int64_t c, Dims3 in, int64_t k, Dims3 kernel, Dims3 stride = 1, Padding pad = 0,
                Dims3 dil = 1, int64_t groups = 1, bool bias = false);

struct ConfigCase {
  std::string config;  // EngineOptions::kernel_config
  std::vector<Conv3dDesc> descs;
};

struct ConfigCases {
  std::vector<ConfigCase> forced;                   // every configuration family, forced
  std::vector<std::vector<Conv3dDesc>> automatic;   // the planner's own choice
};

ConfigCases config_cases();

}  // namespace conv3djit::test
