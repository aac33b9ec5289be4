#!/usr/bin/env bash
# Runs every test of an existing build (tools/setup.sh makes it); GPU tests skip without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
