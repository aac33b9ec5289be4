#!/usr/bin/env bash
# tune_gpu.sh CLI WORKDIR
# tune on the GPU: a manifest of two descriptions tuned into a fresh cache (each winner accurate
# and timed), answered from the records the second time, the records listed by `cache list`,
# exported and imported into a fresh folder where they answer again and `run` launches the winners
# with CONV3DJIT_COMPILE=never; --retune and its limits; the text table. Exits 77 (skipped) when
# tune reports that there is no device (exit code 2).
set -u
cli=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
manifest=$work/layers.jsonl
cat >"$manifest" <<'EOF'
{"name": "dense", "input": [1, 16, 8, 16, 16], "out_channels": 32, "kernel": 3, "padding": 1, "bias": true}
{"name": "strided_bf16", "input": [1, 32, 6, 16, 16], "out_channels": 32, "kernel": 3, "stride": [1, 2, 2], "padding": 1, "dtype": "bf16", "layout": "ndhwc"}
EOF

# check.py MODE FILE: the checks of one `tune --json` report (python3, as the other scripts use).
check() {
  python3 - "$@" <<'PY'
import json, sys
mode, path = sys.argv[1], sys.argv[2]
report = json.load(open(path))
rows = report["descriptions"]
assert [r["name"] for r in rows] == ["dense", "strided_bf16"], [r["name"] for r in rows]
for r in rows:
    assert r["error"] is None, r
    assert r["stored"] is True, r
    assert r["description"] and r["device"], r
    w = r["winner"]
    assert 0 <= w < len(r["candidates"]), r
    best = r["candidates"][w]
    assert best["accurate"] is True and best["median_ms"] is not None and best["median_ms"] > 0, best
    assert best["kernel"] and best["config"], best
    if mode == "record":
        assert r["from_record"] is True and r["tuning_ms"] == 0, r
    else:
        assert r["from_record"] is False and r["tuning_ms"] > 0, r
        first = r["candidates"][0]
        assert first["heuristic"] is True and first["median_ms"] is not None, first
        assert r["speedup"] is not None and r["speedup"] >= 1, r  # the winner is at least as fast
        for c in r["candidates"]:
            assert (c["median_ms"] is None) == (c["error"] is not None), c
        if mode.startswith("max"):
            assert len(r["candidates"]) <= int(mode[3:]), r
t = report["totals"]
assert t["descriptions"] == 2 and t["failed"] == 0, t
if mode == "record":
    assert t["from_records"] == 2 and t["tuned"] == 0 and t["tuning_ms"] == 0, t
else:
    assert t["tuned"] == 2 and t["from_records"] == 0 and t["geomean_speedup"] >= 1, t
PY
}

# The first tuning: every description timed, the winners stored.
out=$("$cli" --cache-dir "$work/cache" tune --manifest "$manifest" --json 2>"$work/tune.err")
rc=$?
echo "$out" | tee "$work/tuned.json"
cat "$work/tune.err"
if ((rc == 2)); then
  grep -q "^error: no_device: no CUDA device" "$work/tune.err" || fail "exit code 2 without a no_device error"
  echo "no CUDA device: skipped"
  exit 77
fi
((rc == 0)) || fail "tune --manifest exited $rc"
check fresh "$work/tuned.json" || fail "tune --manifest: the report of a fresh cache"

# Again: both answered from their records, nothing timed.
"$cli" --cache-dir "$work/cache" tune --manifest "$manifest" --json >"$work/again.json" || fail "tune (again) exited $?"
cat "$work/again.json"
check record "$work/again.json" || fail "tune (again) did not answer from the records"

# `cache list` shows a "tuned <description> on <device> (N SMs)" entry for each description.
"$cli" --cache-dir "$work/cache" list >"$work/list.txt" || fail "list exited $?"
cat "$work/list.txt"
python3 - "$work/tuned.json" "$work/list.txt" <<'PY' || fail "list does not show each description's tuned record"
import json, sys
listed = open(sys.argv[2]).read()
for r in json.load(open(sys.argv[1]))["descriptions"]:
    assert "  tuned %s on " % r["description"] in listed, r["description"]
PY
tuned=$(grep -Ec "  tuned .* on .* \([0-9]+ SMs\)$" "$work/list.txt")
((tuned == 2)) || fail "list shows $tuned tuned entries, wanted 2"

# Exported and imported into a fresh folder, the records answer there too.
"$cli" --cache-dir "$work/cache" export "$work/tuned.c3j" || fail "export exited $?"
"$cli" --cache-dir "$work/imported" import "$work/tuned.c3j" || fail "import exited $?"
CONV3DJIT_COMPILE=never "$cli" --cache-dir "$work/imported" tune --manifest "$manifest" --json >"$work/imported.json" ||
  fail "tune (imported, CONV3DJIT_COMPILE=never) exited $?"
cat "$work/imported.json"
check record "$work/imported.json" || fail "tune (imported) did not answer from the records"

# Production there: no tuning and no compile, and run launches each winner.
CONV3DJIT_COMPILE=never "$cli" --cache-dir "$work/imported" run --manifest "$manifest" --warmup 0 --iters 2 --json \
  >"$work/run.jsonl" || fail "run (imported, CONV3DJIT_COMPILE=never) exited $?"
cat "$work/run.jsonl"
python3 - "$work/tuned.json" "$work/run.jsonl" <<'PY' || fail "run does not launch the tuned winners"
import json, sys
tuned = json.load(open(sys.argv[1]))["descriptions"]
ran = [json.loads(line) for line in open(sys.argv[2])]
assert len(tuned) == len(ran), (len(tuned), len(ran))
for t, r in zip(tuned, ran):
    assert r["kernel"] == t["candidates"][t["winner"]]["kernel"], (r["kernel"], t)
PY

# --retune times again, within --max-candidates; the table marks each winner.
"$cli" --cache-dir "$work/cache" tune --manifest "$manifest" --retune --max-candidates 2 --runs 3 --budget-ms 5000 \
  --json >"$work/retuned.json" || fail "tune --retune exited $?"
cat "$work/retuned.json"
check max2 "$work/retuned.json" || fail "tune --retune --max-candidates 2"
out=$("$cli" --cache-dir "$work/cache" tune --input 1,8,8,12,12 --out-channels 8 --kernel 3 --padding same --runs 3)
rc=$?
echo "$out"
((rc == 0)) || fail "tune (flags, table) exited $rc"
grep -q "^  \* " <<<"$out" || fail "the table marks no winner"
grep -q "(planner's choice)" <<<"$out" || fail "the table names no planner's choice"
grep -Eq "^1 descriptions: 1 tuned, 0 from records, 0 failed; .* s tuning; geometric-mean speedup .*: [0-9.]+x over 1 tuned$" \
  <<<"$out" || fail "no summary line"
out=$("$cli" --cache-dir "$work/cache" tune --input 1,8,8,12,12 --out-channels 8 --kernel 3 --padding same)
echo "$out"
grep -q "from the tuned record" <<<"$out" && grep -q "^1 descriptions: 0 tuned, 1 from records" <<<"$out" ||
  fail "the table of a record"
echo "ok"
