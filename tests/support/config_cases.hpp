#pragma once
#include <random>
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

/// tf32 problems whose igemm_sm90 tiles (sm90:2,64,64,512,1,0,2; the first four also in row tiles,
/// sm90:4,64,64,512,1,1,2) load paired inputs in pairs: box shifts of both parities, odd and even KW.
std::vector<Conv3dDesc> pair_load_cases();

/// Epilogues that between them take every activation, scaling and the residual through a store
/// path: each activation with alpha and gamma not 1 (odd ones with a residual too), a residual
/// alone, LeakyRelu's slope and Clamp's bounds not the defaults.
std::vector<Epilogue> epilogue_cases();

/// One forced configuration per store path of every family (staged boxes, paired and single
/// stores, 16-byte and element stores), with the descriptions that reach it, both classes.
std::vector<ConfigCase> epilogue_store_cases();

/// One forced configuration per input-load path of every family that padding modes other than
/// zeros take (cp.async staging, element and 16-byte loads, per-element gathers), with
/// descriptions padded per side and symmetrically within every mode's bounds, in both classes.
std::vector<ConfigCase> padding_mode_cases();

/// Upper bounds of random_depthwise's draws (lower bounds: 1 image, 2 channels, extent 1, tap 1,
/// stride 1, padding 0, dilation 1).
struct DepthwiseRanges {
  int n, c;           // images; channels (= groups)
  Dims3 in, kernel;   // input extents; kernel extents (draws with more than 32 taps are skipped)
  int multiplier;     // output channels per group
  int stride_h;       // stride along H (D and W stay 1: the depthwise kernel's layers)
  Dims3 pad;
  int dilation;       // along each axis
};

/// `count` valid depthwise descriptions drawn from `seed`, every field random within `r`
/// (bias too): the layers the planner gives to depthwise_fp32.
std::vector<Conv3dDesc> random_depthwise(int count, unsigned seed, const DepthwiseRanges& r);

/// A layer drawn from `rng` (not always valid): one group, or 2-4 one time in four; up to 3
/// images, up to `max_c` input and `max_k` output channels a group, extents up to 12 x 14 x
/// `max_w`, kernels up to 4 x 4 x 5, strides up to 2 x 3 x 2, padding up to 2, dilation up to
/// 2 x 2 x 3, a bias one time in two.
Conv3dDesc random_shape(std::mt19937& rng, int max_c, int max_w, int max_k);

/// `count` valid NDHWC descriptions drawn from `seed`: one group or 2-4, C up to 40, W up to 70,
/// every stride, dilation and padding up to 2-3, float32 in either class, bf16 or fp16, a padding
/// mode other than zeros one time in four, an epilogue of epilogue_cases() one time in three.
std::vector<Conv3dDesc> random_ndhwc(int count, unsigned seed);

}  // namespace conv3djit::test
