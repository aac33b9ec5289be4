#!/usr/bin/env bash
# verify_gpu.sh CLI CACHE_DIR
# verify (and a short run) of two shapes on the GPU; exits 77 (skipped) when verify reports that
# there is no device (exit code 2).
set -u
cli=$1 cache=$2
fail() { echo "FAIL: $*"; exit 1; }
conv() { "$cli" --cache-dir "$cache" "$@"; }

out=$(conv verify --input 2,4,8,9,10 --out-channels 8 --kernel 3 --padding same --bias --seed 1 2>&1)
rc=$?
echo "$out"
if ((rc == 2)); then
  grep -q "^error: no_device" <<<"$out" || fail "exit code 2 without a no_device error"
  echo "no CUDA device: skipped"
  exit 77
fi
((rc == 0)) && grep -q "^PASS" <<<"$out" || fail "verify (CPU reference) exited $rc"

out=$(conv verify --input 1,8,6,7,8 --out-channels 8 --kernel 3,1,3 --stride 2 --dilation 1,2,1 \
      --groups 4 --reference gpu --json)
rc=$?
echo "$out"
((rc == 0)) || fail "verify (GPU reference) exited $rc"
grep -q '"passed":true' <<<"$out" || fail "verify (GPU reference) did not pass"

# A forced configuration is the kernel verified.
out=$(conv verify --input 2,4,8,9,10 --out-channels 8 --kernel 3 --config generic:2 --json)
rc=$?
echo "$out"
((rc == 0)) || fail "verify --config exited $rc"
grep -q '"passed":true' <<<"$out" && grep -q '"kernel":"direct fp32 ncdhw [^"]* tw=2"' <<<"$out" ||
  fail "verify --config generic:2 did not pass with that kernel"

# An input 4 bytes past an alignment boundary (a view into a larger tensor).
out=$(conv run --input 2,4,8,9,10 --out-channels 8 --kernel 3 --warmup 1 --iters 5 --input-offset 1)
rc=$?
echo "$out"
((rc == 0)) || fail "run exited $rc"
grep -q "TFLOP/s" <<<"$out" || fail "run printed no throughput"

# A manifest: one JSON line per shape, in the manifest's order, each with its time.
manifest=$(dirname "$0")/shapes.jsonl
out=$(conv run --manifest "$manifest" --warmup 0 --iters 2 --json)
rc=$?
echo "$out"
((rc == 0)) || fail "run --manifest exited $rc"
names=$(grep -o '"name": *"[^"]*"' "$manifest" | sed 's/.*"\([^"]*\)"$/\1/')
got=$(python3 -c 'import json, sys
for line in sys.stdin:
    row = json.loads(line)
    assert row["median_ms"] > 0 and row["min_ms"] <= row["median_ms"], row
    assert row["commit"] and len(row["kernel_sources_sha256"]) == 64, row
    print(row["name"])' <<<"$out") || fail "run --manifest: a line without positive times"
[[ "$got" == "$names" ]] || fail "run --manifest named $got, wanted $names"
echo "ok"
