#!/usr/bin/env bash
# scratch: one device call (not committed)
set -u
out=${OUT:-device-out}; mkdir -p "$out/logs"
nvidia-smi -L
OUT=$out/logs/tests bash tools/device_session.sh tests 2>&1 | tail -14
cp $out/logs/tests/ctest.log $out/ctest.log
build-device/tests/test_gpu_multi_device -s 2>&1 | grep -E "kernels|passed|failed" | sort -u | tee $out/multi.txt
cli=build-device/tools/conv3djit
export CONV3DJIT_CACHE_DIR=$PWD/build-device/cache-session
ref="--input 16,3,64,64,64 --out-channels 64 --kernel 3,5,7"
for cfg in tiled:8,1,4,3,8 tiled:4,2,4,3,8; do echo "ref $cfg: $($cli run $ref --config $cfg --iters 20 2>&1 | grep -E 'median|error' | tr '\n' ' ')"; done | tee $out/ffma.txt
