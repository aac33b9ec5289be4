#!/usr/bin/env bash
# bench_gpu.sh CLI MANIFEST CACHE_DIR
# bench on small shapes: the JSON report's shape, accuracy of conv3djit, cuDNN n/a for asymmetric
# padding, and the text table. Exits 77 (skipped) when bench reports no device (exit code 2).
set -u
cli=$1 manifest=$2 cache=$3
fail() { echo "FAIL: $*"; exit 1; }
conv() { "$cli" --cache-dir "$cache" "$@"; }

out=$(conv bench --manifest "$manifest" --warmup 1 --iters 3 --seed 1 --json)
rc=$?
echo "$out"
((rc == 2)) && { echo "no CUDA device: skipped"; exit 77; }
((rc == 0)) || fail "bench --manifest exited $rc"
rows=$(grep -o '"conv3djit_passed":true' <<<"$out" | wc -l)
expected=$(grep -c '^{' "$manifest")
((rows == expected)) || fail "$rows of $expected rows passed"
for key in device date commit kernel_sources_sha256 rows geomean_speedup conv3djit_ms cudnn_ms speedup cudnn_rel_l2 kernel; do
  grep -q "\"$key\":" <<<"$out" || fail "no \"$key\" in the JSON report"
done

# `same` with an even kernel pads asymmetrically, which cuDNN cannot: n/a, but conv3djit runs.
out=$(conv bench --input 1,4,6,7,8 --out-channels 4 --kernel 2 --padding same --iters 2 --json)
rc=$?
echo "$out"
((rc == 0)) || fail "bench (asymmetric padding) exited $rc"
grep -q '"cudnn_ms":null' <<<"$out" || fail "cuDNN timed an asymmetric padding"
grep -q '"conv3djit_passed":true' <<<"$out" || fail "conv3djit did not pass"

out=$(conv bench --input 2,4,8,9,10 --out-channels 8 --kernel 3 --bias --config generic --iters 2)
rc=$?
echo "$out"
((rc == 0)) || fail "bench (table) exited $rc"
grep -q "^NAME .*SPEEDUP" <<<"$out" || fail "no table header"
grep -q "^geometric-mean speedup" <<<"$out" || fail "no geometric-mean line"
echo "ok"
