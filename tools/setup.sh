#!/usr/bin/env bash
# Installs the build dependencies from Debian/Ubuntu packages (the CUDA toolkit is expected in its
# standard prefix, /usr/local/cuda), configures ./build and builds what every command after it
# needs: the library and the conv3djit CLI. tools/main_job.sh and tools/test.sh build the rest of
# what they run themselves (the tests, for test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
packages=(cmake ninja-build g++ libfmt-dev libspdlog-dev catch2 libcli11-dev nlohmann-json3-dev python3-venv)
if command -v apt-get >/dev/null; then
  # apt only for what is missing: on a machine that has everything, setup needs no network.
  missing=()
  for package in "${packages[@]}"; do
    [[ $(dpkg-query -W -f='${Status}\n' "$package" 2>/dev/null) == *"install ok installed"* ]] || missing+=("$package")
  done
  if ((${#missing[@]} > 0)); then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi
test -e /usr/local/cuda/include/nvrtc.h || { echo "CUDA toolkit not found in /usr/local/cuda" >&2; exit 1; }
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target conv3djit conv3djit_cli
