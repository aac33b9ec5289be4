#include <fmt/format.h>

#include "conv3djit/conv3d.hpp"

namespace conv3djit {

std::string describe(const Conv3dDesc& d) {
  std::string pad;
  switch (d.padding.mode) {
    case Padding::Mode::Same: pad = "same"; break;
    case Padding::Mode::Valid: pad = "valid"; break;
    case Padding::Mode::Explicit:
      pad = fmt::format("{}x{}x{}", d.padding.amount.d, d.padding.amount.h, d.padding.amount.w);
      break;
    case Padding::Mode::PerSide:  // before-after on each axis: causal in time is p2-0x1-1x1-1
      pad = fmt::format("{}-{}x{}-{}x{}-{}", d.padding.amount.d, d.padding.after.d, d.padding.amount.h,
                        d.padding.after.h, d.padding.amount.w, d.padding.after.w);
      break;
  }
  return fmt::format("N{}_C{}_D{}_H{}_W{}_K{}_k{}x{}x{}_s{}x{}x{}_p{}_d{}x{}x{}_g{}_{}_{}", d.n, d.c,
                     d.d, d.h, d.w, d.k, d.kernel.d, d.kernel.h, d.kernel.w, d.stride.d, d.stride.h,
                     d.stride.w, pad, d.dilation.d, d.dilation.h, d.dilation.w, d.groups,
                     d.bias ? "bias" : "nobias", d.precision == Precision::Tf32 ? "tf32" : "fp32");
}

}  // namespace conv3djit
