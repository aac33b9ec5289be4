#!/usr/bin/env bash
# scratch: one device call (not committed)
set -u
out=${OUT:-device-out}; mkdir -p "$out"
OUT=$out bash tools/device_session.sh tests 2>&1 | tail -12
cli=build-device/tools/conv3djit
export CONV3DJIT_CACHE_DIR=$PWD/build-device/cache-session
dw="--input 8,64,16,56,56 --out-channels 64 --kernel 3 --padding 1 --groups 64"
rx="--input 8,256,8,28,28 --out-channels 256 --kernel 3 --padding 1 --groups 32"
for cfg in auto 28,56,4,4,16,1,2 28,56,4,4,16,1,6 28,56,4,4,16,1,8 32,64,4,4,8,1,4 32,64,4,4,16,1,4 8,56,2,4,16,1,4 8,56,2,4,16,1,8 16,56,2,4,16,1,4 16,56,4,4,16,1,4 56,56,4,4,16,1,4 28,56,2,4,16,1,4 16,56,4,4,16,1,6 8,56,1,4,16,1,8 4,56,1,4,16,1,8; do
  c=""; [ $cfg != auto ] && c="--config grouped:$cfg"
  echo "dw $cfg: $($cli run $dw $c --iters 30 2>&1 | grep -E 'median|error' | tr '\n' ' ')"
done | tee "$out/sweep_dw.txt"
for cfg in auto 14,28,1,4,8,8,1 14,28,1,4,8,8,3 7,28,1,4,8,8,2 14,28,1,4,8,4,2 14,28,2,4,8,4,2 14,28,1,4,4,8,2; do
  c=""; [ $cfg != auto ] && c="--config grouped:$cfg"
  echo "rx $cfg: $($cli run $rx $c --iters 30 2>&1 | grep -E 'median|error' | tr '\n' ' ')"
done | tee "$out/sweep_rx.txt"
mkdir -p "$out/fp32" "$out/tf32"
OUT=$out/fp32 bash tools/device_session.sh bench 2>&1 | grep -E "geomean|pointwise|depthwise|resnext|exit"
OUT=$out/tf32 BENCH_MANIFEST=bench/suite_tf32.jsonl bash tools/device_session.sh bench 2>&1 | tail -22
