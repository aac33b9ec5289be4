// Compiled once into conv3djit_test_main (tests/CMakeLists.txt): Catch2's main (v2: defined here;
// v3: Catch2::Catch2WithMain) and the device check every test executable runs before it. Suites
// that need CUDA devices (conv3djit_test(... GPU), GPUS N) exit with 77, CTest's SKIP_RETURN_CODE,
// when there is no driver or device, multi-GPU suites also when there are fewer than N devices: a
// skip, never a pass.
#ifndef CONV3DJIT_CATCH_V3
#define CATCH_CONFIG_MAIN
#endif
#include "catch.hpp"

#include <cstdio>
#include <cstdlib>

#include "conv3djit/engine.hpp"
#include "driver/driver_api.hpp"

namespace conv3djit::test {

// Called from each executable's generated source during static initialisation, before main.
bool require_devices(int required) {
  if (required >= 1 && !current_device()) {
    std::fprintf(stderr, "SKIP: no CUDA driver or device on this machine\n");
    std::exit(77);
  }
  if (required >= 2) {
    int devices = 0;
    detail::driver().cuDeviceGetCount(&devices);
    if (devices < required) {
      std::fprintf(stderr, "SKIP: %d CUDA device(s) here, this suite needs %d\n", devices, required);
      std::exit(77);
    }
  }
  return true;
}

}  // namespace conv3djit::test
