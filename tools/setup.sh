#!/usr/bin/env bash
# Installs the build dependencies from Debian/Ubuntu packages (the CUDA toolkit is expected in its
# standard prefix, /usr/local/cuda) and builds conv3djit into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
if command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends \
    cmake ninja-build g++ libfmt-dev libspdlog-dev catch2 libcli11-dev nlohmann-json3-dev >/dev/null
fi
test -e /usr/local/cuda/include/nvrtc.h || { echo "CUDA toolkit not found in /usr/local/cuda" >&2; exit 1; }
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)"
