#!/usr/bin/env bash
# scratch: one device call (not committed)
set -u
out=${OUT:-device-out}; mkdir -p "$out/logs"
nvidia-smi -L
OUT=$out/logs/tests bash tools/device_session.sh tests 2>&1 | tail -8
cp $out/logs/tests/ctest.log $out/ctest.log
build-device/tests/test_gpu_multi_device 2>&1 | tail -3 | tee $out/multi.txt
cli=build-device/tools/conv3djit
export CONV3DJIT_CACHE_DIR=$PWD/build-device/cache-session
dw="--input 8,64,16,56,56 --out-channels 64 --kernel 3 --padding 1 --groups 64"
rx="--input 8,256,8,28,28 --out-channels 256 --kernel 3 --padding 1 --groups 32"
for cfg in auto 28,56,2,4,16,1,2 16,56,2,4,16,1,2 8,56,2,4,16,1,2 16,64,2,4,16,1,2 20,56,2,4,8,1,2 20,56,2,4,16,1,3 28,56,4,4,16,1,2; do
  c=""; [ $cfg != auto ] && c="--config grouped:$cfg"
  echo "dw $cfg: $($cli run $dw $c --iters 30 2>&1 | grep -E 'median|error' | tr '\n' ' ')"
done | tee "$out/sweep.txt"
echo "rx auto: $($cli run $rx --iters 30 2>&1 | grep -E 'median|error' | tr '\n' ' ')" | tee -a "$out/sweep.txt"
/usr/local/cuda/bin/ncu --kernel-name regex:grouped --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats $cli run $dw --iters 1 > $out/ncu_dw.txt 2>&1
grep -E "DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Theoretical Occ" $out/ncu_dw.txt | head -10
OUT=$out/logs/fp32 bash tools/device_session.sh bench 2>&1 | grep -vE "^name|^NVIDIA H200, " | tail -25
cp $out/logs/fp32/bench.json $out/bench_fp32.json
