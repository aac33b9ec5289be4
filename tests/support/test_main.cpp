// One main for every test executable. GPU suites (CONV3DJIT_TEST_NEEDS_GPU) exit with 77, CTest's
// SKIP_RETURN_CODE, when there is no driver or device: a skip, never a pass.
#ifndef CONV3DJIT_CATCH_V3
#define CATCH_CONFIG_RUNNER
#endif
#include "catch.hpp"

#include <cstdio>

#include "conv3djit/engine.hpp"

int main(int argc, char** argv) {
#ifdef CONV3DJIT_TEST_NEEDS_GPU
  if (!conv3djit::current_device()) {
    std::fprintf(stderr, "SKIP: no CUDA driver or device on this machine\n");
    return 77;
  }
#endif
  return Catch::Session().run(argc, argv);
}
