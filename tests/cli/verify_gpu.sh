#!/usr/bin/env bash
# verify_gpu.sh CLI CACHE_DIR
# verify (and a short run) of shapes on the GPU, bf16, fp16 and NDHWC among them; exits 77 (skipped) when verify reports that
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

# Half types and NDHWC, each in its own class: bf16 NCDHW against the CPU reference, fp16 NDHWC
# with a float32 output against the GPU's, bf16 NDHWC with a residual.
out=$(conv verify --input 2,16,5,9,10 --out-channels 16 --kernel 3 --padding 1 --bias --dtype bf16 --seed 2 --json)
rc=$?
echo "$out"
((rc == 0)) && grep -q '"passed":true' <<<"$out" || fail "verify bf16 exited $rc"
grep -q '"rel_l2_limit":0.004' <<<"$out" && grep -q '"kernel":"[a-z0-9_]* bf16 ncdhw ' <<<"$out" ||
  fail "verify bf16: not in the bf16 class or not a bf16 kernel"
out=$(conv verify --input 1,8,4,9,10 --out-channels 8 --kernel 3 --padding 0,1,1 --dtype fp16 --layout ndhwc \
      --fp32-output --reference gpu --json)
rc=$?
echo "$out"
((rc == 0)) && grep -q '"passed":true' <<<"$out" || fail "verify fp16 ndhwc exited $rc"
grep -q '"layout":"ndhwc"' <<<"$out" && grep -q '"output_dtype":"fp32"' <<<"$out" && grep -q '"rel_l2_limit":1e-05' <<<"$out" ||
  fail "verify fp16 ndhwc: not NDHWC with a float32 output in its class"
out=$(conv verify --input 1,16,3,8,8 --out-channels 32 --kernel 3 --padding 0,1,1 --bias --dtype bf16 --layout ndhwc \
      --activation silu --residual)
rc=$?
echo "$out"
((rc == 0)) && grep -q "^PASS" <<<"$out" || fail "verify bf16 ndhwc exited $rc"

# A forced configuration is the kernel verified.
out=$(conv verify --input 2,4,8,9,10 --out-channels 8 --kernel 3 --config generic:2 --json)
rc=$?
echo "$out"
((rc == 0)) || fail "verify --config exited $rc"
grep -q '"passed":true' <<<"$out" && grep -q '"kernel":"direct fp32 ncdhw [^"]* tw=2"' <<<"$out" ||
  fail "verify --config generic:2 did not pass with that kernel"

# The same for bf16 NDHWC on the generic kernel.
out=$(conv verify --input 2,8,4,6,7 --out-channels 8 --kernel 3 --dtype bf16 --layout ndhwc --config generic --json)
rc=$?
echo "$out"
((rc == 0)) && grep -q '"passed":true' <<<"$out" && grep -q '"kernel":"direct bf16 ndhwc ' <<<"$out" ||
  fail "verify --config generic (bf16 ndhwc) did not pass with the direct kernel"

# An input 4 bytes past an alignment boundary (a view into a larger tensor).
out=$(conv run --input 2,4,8,9,10 --out-channels 8 --kernel 3 --warmup 1 --iters 5 --input-offset 1)
rc=$?
echo "$out"
((rc == 0)) || fail "run exited $rc"
grep -q "TFLOP/s" <<<"$out" || fail "run printed no throughput"
# A bf16 input one element (2 bytes) into its allocation.
out=$(conv run --input 2,8,8,9,10 --out-channels 8 --kernel 3 --dtype bf16 --layout ndhwc --warmup 1 --iters 5 \
      --input-offset 1 --json)
rc=$?
echo "$out"
((rc == 0)) && grep -q '"dtype":"bf16"' <<<"$out" || fail "run (bf16 ndhwc, offset 1) exited $rc"

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
# verify --manifest: every line against its float64 reference, in the manifest's order.
out=$(conv verify --manifest "$manifest" --seed 5 --json)
rc=$?
echo "$out"
((rc == 0)) || fail "verify --manifest exited $rc"
got=$(python3 -c 'import json, sys
out = json.load(sys.stdin)
assert out["failed"] == 0 and out["passed"] == len(out["rows"]), out
for i, row in enumerate(out["rows"]):
    assert row["passed"] and row["seed"] == 5 + i and 0 <= row["rel_l2"] <= row["rel_l2_limit"], row
    print(row["name"])' <<<"$out") || fail "verify --manifest: a row failed or is malformed"
[[ "$got" == "$names" ]] || fail "verify --manifest named $got, wanted $names"
# A configuration only the depthwise line can take: the other lines fail with the planner's error,
# and every line is still reported.
out=$(conv verify --manifest "$manifest" --config depthwise:th=2,lanes=3,warps=1,odb=2 --json)
rc=$?
echo "$out"
((rc == 1)) || fail "verify --manifest --config depthwise:... exited $rc, wanted 1"
python3 -c 'import json, sys
out = json.load(sys.stdin)
rows = {row["name"]: row for row in out["rows"]}
assert len(rows) == '"$(wc -w <<<"$names")"', rows
assert rows["depthwise_valid_tf32"]["passed"] and rows["depthwise_valid_tf32"]["kernel"].startswith("depthwise "), rows
assert out["passed"] == 1 and out["failed"] == len(rows) - 1, out
assert all(row["error"] for row in out["rows"] if not row["passed"]), out' <<<"$out" ||
  fail "verify --manifest --config depthwise:...: not one pass and the rest reported as errors"
# run --manifest with that configuration: the depthwise line timed, each other a line with its
# error, every line in the manifest's order, exit 1.
out=$(conv run --manifest "$manifest" --config depthwise:th=2,lanes=3,warps=1,odb=2 --warmup 0 --iters 2 --json)
rc=$?
echo "$out"
((rc == 1)) || fail "run --manifest --config depthwise:... exited $rc, wanted 1"
got=$(python3 -c 'import json, sys
rows = [json.loads(line) for line in sys.stdin]
timed = [row["name"] for row in rows if "median_ms" in row]
assert timed == ["depthwise_valid_tf32"], rows
assert all(row["error"] for row in rows if "median_ms" not in row), rows
for row in rows: print(row["name"])' <<<"$out") || fail "run --manifest --config depthwise:...: not one timed line and errors"
[[ "$got" == "$names" ]] || fail "run --manifest --config depthwise:... named $got, wanted $names"
echo "ok"
