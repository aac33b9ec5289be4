// One main for every test executable, compiled once (conv3djit_test_main in tests/CMakeLists.txt).
// Suites that need CUDA devices (conv3djit_test(... GPU), GPUS N) exit with 77, CTest's
// SKIP_RETURN_CODE, when there is no driver or device, multi-GPU suites also when there are fewer
// than N devices: a skip, never a pass.
#ifndef CONV3DJIT_CATCH_V3
#define CATCH_CONFIG_RUNNER
#endif
#include "catch.hpp"

#include <cstdio>

#include "conv3djit/engine.hpp"
#include "driver/driver_api.hpp"

namespace conv3djit::test {
// The devices this executable needs: 0, 1 or N, defined by a source that tests/CMakeLists.txt
// generates for each test executable.
extern const int required_gpus;
}  // namespace conv3djit::test

int main(int argc, char** argv) {
  const int required = conv3djit::test::required_gpus;
  if (required >= 1 && !conv3djit::current_device()) {
    std::fprintf(stderr, "SKIP: no CUDA driver or device on this machine\n");
    return 77;
  }
  if (required >= 2) {
    int devices = 0;
    conv3djit::detail::driver().cuDeviceGetCount(&devices);
    if (devices < required) {
      std::fprintf(stderr, "SKIP: %d CUDA device(s) here, this suite needs %d\n", devices, required);
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
