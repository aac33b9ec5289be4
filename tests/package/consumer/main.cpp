#include <conv3djit/conv3d.hpp>

#include <iostream>

int main() {
  conv3djit::Conv3dDesc desc;
  desc.n = 16; desc.c = 3; desc.d = desc.h = desc.w = 64;
  desc.k = 64; desc.kernel = {3, 5, 7};
  const auto out = conv3djit::output_extents(desc);
  std::cout << out.n << "x" << out.k << "x" << out.d << "x" << out.h << "x" << out.w << "\n";
  return 0;
}
