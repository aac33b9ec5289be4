#!/usr/bin/env bash
# One call on the GPU machine: build, run every test (gpu included), then the CLI's verify and run
# on the reference problem (and `bench` when asked). Logs go to $OUT (or ./device-out).
# Usage: tools/device_session.sh [tests|bench|all]
set -u -o pipefail
what=${1:-all}
out=${OUT:-device-out}
mkdir -p "$out"
build=build-device
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
cmake --build $build -j 16 -- -k 0 >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; }
cli=$build/tools/conv3djit
export CONV3DJIT_CACHE_DIR=$PWD/$build/cache-session
if [ "$what" = tests ] || [ "$what" = all ]; then
  ctest --test-dir $build --output-on-failure -j 4 2>&1 | tee "$out/ctest.log" | tail -40
  ctest --test-dir $build -R gpu_jit_costs -V 2>&1 | grep -E "first call|host time|rel-L2" | tee "$out/jit_costs.txt"
fi
ref="--input 16,3,64,64,64 --out-channels 64 --kernel 3,5,7"
if [ -x "$cli" ]; then
  $cli verify $ref 2>&1 | tee "$out/verify.txt"
  $cli run $ref 2>&1 | tee "$out/run.txt"
  if [ "$what" = bench ] || [ "$what" = all ]; then
    if $cli bench --help >/dev/null 2>&1; then
      $cli bench --manifest bench/suite.jsonl --json >"$out/bench.json" 2>"$out/bench.log"
      $cli bench --manifest bench/suite.jsonl 2>&1 | tee "$out/bench.txt" | tail -30
    fi
  fi
fi
