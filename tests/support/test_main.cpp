// One main for every test executable. GPU suites (CONV3DJIT_TEST_NEEDS_GPU) exit with 77, CTest's
// SKIP_RETURN_CODE, when there is no driver or device, multi-GPU suites (CONV3DJIT_TEST_NEEDS_GPUS
// = N) also when there are fewer than N devices: a skip, never a pass.
#ifndef CONV3DJIT_CATCH_V3
#define CATCH_CONFIG_RUNNER
#endif
#include "catch.hpp"

#include <cstdio>

#include "conv3djit/engine.hpp"
#ifdef CONV3DJIT_TEST_NEEDS_GPUS
#include "driver/driver_api.hpp"
#endif

int main(int argc, char** argv) {
#ifdef CONV3DJIT_TEST_NEEDS_GPU
  if (!conv3djit::current_device()) {
    std::fprintf(stderr, "SKIP: no CUDA driver or device on this machine\n");
    return 77;
  }
#endif
#ifdef CONV3DJIT_TEST_NEEDS_GPUS
  int devices = 0;
  conv3djit::detail::driver().cuDeviceGetCount(&devices);
  if (devices < CONV3DJIT_TEST_NEEDS_GPUS) {
    std::fprintf(stderr, "SKIP: %d CUDA device(s) here, this suite needs %d\n", devices, CONV3DJIT_TEST_NEEDS_GPUS);
    return 77;
  }
#endif
  return Catch::Session().run(argc, argv);
}
