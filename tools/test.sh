#!/usr/bin/env bash
# Builds everything (the tests on top of tools/setup.sh's library and CLI) and runs every test;
# GPU tests skip without a device. Then the Python package's tests (tools/test_python.sh: a venv
# with nanobind and scikit-build-core from PyPI, `pip install .`, pytest). Then builds again with AddressSanitizer and UBSan
# (CONV3DJIT_SANITIZE, in $SANITIZE_DIR, default build-sanitize) only what the unit and CLI tests
# need, and runs those tests there. SANITIZE=0 leaves the second pass out.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)"
BUILD_DIR=$build tools/test_python.sh

[ "${SANITIZE:-1}" = 0 ] && exit 0
sanitize=${SANITIZE_DIR:-build-sanitize}
# -O0 -g1: half of -O1's build time under the sanitizers (CLI11 and Catch2 are header-heavy),
# fast enough for these tests, and line numbers in reports.
[ -f "$sanitize/CMakeCache.txt" ] ||
  cmake -S . -B "$sanitize" -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1" \
    -DCONV3DJIT_SANITIZE=ON >/dev/null
# The unit test executables are named as their tests; the CLI tests need the tool and the fuzzer.
# Left out: GPU tests (under ASan the CUDA driver needs settings of its own, and CI has no GPU)
# and the packaging test (it installs the whole build and builds a consumer: no sanitizer matter).
selection=(-L 'unit|cli' -LE gpu -E '^package_')
mapfile -t unit_tests < <(ctest --test-dir "$sanitize" -N "${selection[@]}" | sed -n 's/^ *Test *#[0-9]*: \(test_[a-z0-9_]*\)$/\1/p')
cmake --build "$sanitize" -j "$(nproc)" --target conv3djit_cli fuzz_cli "${unit_tests[@]}"
# A finding, leaks included, aborts: a signal, never an exit code that a test could expect.
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=abort_on_error=1:print_stacktrace=1
ctest --test-dir "$sanitize" --output-on-failure --no-tests=error -j "$(nproc)" "${selection[@]}"
