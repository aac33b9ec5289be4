#!/usr/bin/env bash
# random_layers.sh CLI GENERATOR WORK_DIR
# Layers drawn by tools/random_layers.py, as a new user would try them: the same seed gives the
# same manifest, every layer of one sweep plans for sm_90, and a smaller sweep compiles.
set -u
cli=$1 generator=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || fail "cannot make $work"
python3 "$generator" --seed 1 --count 300 >"$work/plan.jsonl" || fail "the generator exited $?"
python3 "$generator" --seed 1 --count 300 | cmp -s - "$work/plan.jsonl" || fail "seed 1 drew another manifest"
[[ $(grep -c '^{' "$work/plan.jsonl") == 300 ]] || fail "not 300 layers"

out=$("$cli" plan --arch sm_90 --manifest "$work/plan.jsonl" 2>&1)
rc=$?
((rc == 0)) || { echo "$out" | tail -5; fail "plan exited $rc"; }
planned=$(grep -c '^  kernel ' <<<"$out")
[[ $planned == 300 ]] || fail "$planned of 300 layers planned"

python3 "$generator" --seed 2 --count 40 >"$work/compile.jsonl" || fail "the generator exited $?"
out=$(CONV3DJIT_CACHE_DIR="$work/cache" "$cli" precompile --arch sm_90 --manifest "$work/compile.jsonl" -j 2 2>&1)
rc=$?
echo "$out" | tail -3
((rc == 0)) || fail "precompile exited $rc"
grep -Eq "sm_90: [0-9]+ compiled, [0-9]+ cached, 0 failed" <<<"$out" || fail "a kernel failed to compile"
echo "ok: 300 layers planned, 40 compiled"
