#!/usr/bin/env bash
# concurrent_precompile.sh CLI MANIFEST WORKDIR
# 8 processes precompile the same kernels into one fresh cache folder at once: all must succeed,
# together they compile each kernel once (the others wait for it and read it from disk), and
# afterwards every entry is valid (a ninth run finds them all cached) with no temp file left.
set -u
cli=$1 manifest=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cache=$work/cache
pids=()
for i in 1 2 3 4 5 6 7 8; do
  "$cli" --cache-dir "$cache" precompile --arch sm_90 --manifest "$manifest" -j 1 --json >"$work/out$i" 2>"$work/err$i" &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "FAIL: process $((i + 1)) exited non-zero"; cat "$work/err$((i + 1))"; exit 1; }
done
if grep -l "warn\|error" "$work"/err* >/dev/null 2>&1; then
  echo "FAIL: a process logged a warning or error"; cat "$work"/err*; exit 1
fi
out=$("$cli" --cache-dir "$cache" precompile --arch sm_90 --manifest "$manifest" --json)
grep -q '"compiled":0' <<<"$out" || { echo "FAIL: entries were not all valid: $out"; exit 1; }
grep -q '"failed":0' <<<"$out" || { echo "FAIL: $out"; exit 1; }
entries=$(grep -o '"cached":[0-9]*' <<<"$out" | cut -d: -f2)
compiles=0
for i in 1 2 3 4 5 6 7 8; do
  compiles=$((compiles + $(grep -o '"compiled":[0-9]*' "$work/out$i" | head -n1 | cut -d: -f2)))
done
((compiles == entries)) || { echo "FAIL: 8 processes compiled $compiles times for $entries entries"; exit 1; }
leftovers=$(find "$cache" -name '.tmp-*' | wc -l)
[ "$leftovers" -eq 0 ] || { echo "FAIL: $leftovers temp files left"; exit 1; }
echo "8 concurrent processes: OK, $compiles compiles for $entries entries"
