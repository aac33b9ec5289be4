#!/usr/bin/env bash
# bench_gpu.sh CLI MANIFEST CACHE_DIR
# bench on small shapes: the JSON report's shape, accuracy of conv3djit, cuDNN n/a for asymmetric
# padding, a bf16 NDHWC row with cuDNN in both layouts, and the text table. Exits 77 (skipped) when bench reports no device (exit code 2).
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

# A bf16 row: both sides in the bf16 class, cuDNN also timed in the other layout, its faster one named.
out=$(conv bench --input 1,32,3,16,20 --out-channels 32 --kernel 3 --padding 0,1,1 --bias --dtype bf16 \
      --layout ndhwc --iters 2 --json)
rc=$?
echo "$out"
((rc == 0)) || fail "bench (bf16 ndhwc) exited $rc"
grep -q '"conv3djit_passed":true' <<<"$out" && grep -q '"precision":"bf16"' <<<"$out" &&
  grep -q '"layout":"ndhwc"' <<<"$out" || fail "bench (bf16 ndhwc): conv3djit did not pass in the bf16 class"
for key in cudnn_other_layout cudnn_other_layout_ms cudnn_best_layout cudnn_best_ms speedup_vs_cudnn_best geomean_speedup_vs_cudnn_best; do
  grep -q "\"$key\":" <<<"$out" || fail "no \"$key\" in the bf16 row's report"
done
grep -q '"cudnn_other_layout":"ncdhw"' <<<"$out" || fail "bench (bf16 ndhwc): the other layout is not ncdhw"
grep -q '"cudnn_passed":false' <<<"$out" && fail "bench (bf16 ndhwc): cuDNN outside the bf16 class"
# fp16 with a float32 output: conv3djit runs whatever cuDNN makes of it.
out=$(conv bench --input 1,16,3,8,8 --out-channels 16 --kernel 3 --dtype fp16 --fp32-output --iters 2)
rc=$?
echo "$out"
((rc == 0)) || fail "bench (fp16 out32) exited $rc"
grep -q "^NAME .*LAYOUT .*CUDNN_BEST_LAYOUT" <<<"$out" || fail "no layout columns in a table with a half row"

out=$(conv bench --input 2,4,8,9,10 --out-channels 8 --kernel 3 --bias --config generic --iters 2)
rc=$?
echo "$out"
((rc == 0)) || fail "bench (table) exited $rc"
grep -q "^NAME .*SPEEDUP" <<<"$out" || fail "no table header"
grep -q "CUDNN_BEST_LAYOUT" <<<"$out" && fail "layout columns in a table of fp32 rows"
grep -q "^geometric-mean speedup" <<<"$out" || fail "no geometric-mean line"
echo "ok"
