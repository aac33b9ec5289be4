#!/usr/bin/env bash
# precompile_cache.sh CLI MANIFEST WORKDIR
# Warms a fresh cache for sm_90 (no GPU needed), checks that a second run finds every kernel
# cached, that flags and manifest agree on a key, that export -> clear -> import restores it, and
# that --repeat times compiles without touching the cache.
set -u
cli=$1 manifest=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cache=$work/cache archive=$work/kernels.archive

fail() { echo "FAIL: $*"; exit 1; }
conv() { "$cli" --cache-dir "$cache" "$@"; }
# The value of an integer field of the one-line JSON report in $out.
field() { grep -o "\"$1\":[0-9]*" <<<"$out" | head -n1 | cut -d: -f2; }
# precompile --json, checking exit code and that stdout is exactly one JSON object.
precompile_json() {
  out=$(conv precompile --arch sm_90 --json "$@")
  local rc=$?
  echo "$out"
  ((rc == 0)) || fail "precompile $* exited $rc"
  [[ $(wc -l <<<"$out") -eq 1 && $out == '{'*'}' ]] || fail "stdout is not one JSON object"
  [[ $(field failed) == 0 ]] || fail "failed kernels"
}

precompile_json --manifest "$manifest" -j 2
kernels=$(field compiled) cold=$out
[[ $kernels -ge 1 && $(field cached) == 0 ]] || fail "cold run: want compiled >= 1, cached 0"
[[ $(grep -o '"status":"compiled"' <<<"$out" | wc -l) -eq $kernels ]] || fail "cold run: statuses"

precompile_json --manifest "$manifest" -j 2
[[ $(field compiled) == 0 && $(field cached) == "$kernels" ]] || fail "warm run: want all $kernels cached"
[[ $(grep -o '"status":"cached"' <<<"$out" | wc -l) -eq $kernels ]] || fail "warm run: statuses"

# The manifest's first line, as flags: the same kernel.
precompile_json --input 1,4,8,8,8 --out-channels 8 --kernel 3 --padding same
[[ $(field compiled) == 0 && $(field cached) == 1 ]] || fail "flags: want the manifest's kernel cached"

# precompile reports every entry it wrote, each on disk, the twins it builds alongside for inputs
# that are not 16-byte aligned included: one here, depthwise_valid_tf32's element-load kernel
# (W = 8 takes 16-byte loads): two depthwise entries.
entries=$kernels
[[ $(grep -o '"on_disk":true' <<<"$cold" | wc -l) -eq $entries ]] || fail "cold run: every entry on disk"
[[ $(grep -o '"kernel":"depthwise ' <<<"$cold" | wc -l) -eq 2 ]] || fail "cold run: the twin is not listed"
out=$(conv list --json) || fail "list exited $?"
[[ $(grep -o '"key":' <<<"$out" | wc -l) -eq $entries ]] || fail "list: want $entries entries: $out"
# Beside each key, its kernel and shape in words.
grep -q '"kernel":"depthwise fp32 class=tf32 epi=bias cg=1 k=1x3x3 s=1x1x1 d=1x1x1 sm_90"' <<<"$out" ||
  fail "list: no readable kernel column"

conv export "$archive" | grep -E "exported $entries entries" || fail "export"
conv clear | grep -E "removed $entries entries" || fail "clear"
conv list | grep -E "^0 entries" || fail "list after clear"
conv import "$archive" | grep -E "imported $entries entries" || fail "import"
# The archive through a pipe: export to standard output, import from standard input.
conv export - 2>/dev/null | "$cli" --cache-dir "$work/piped" import - | grep -E "imported $entries entries" ||
  fail "export - | import -"

# Human output this time: the table's summary line.
out=$(conv precompile --arch sm_90 --manifest "$manifest")
rc=$?
echo "$out"
((rc == 0)) || fail "precompile after import exited $rc"
grep -Eq "sm_90: 0 compiled, $kernels cached, 0 failed" <<<"$out" || fail "after import: want all cached"
# --repeat times cold compiles without the disk cache: a fresh folder stays empty, and the one
# kernel reports both samples.
cache=$work/cache-repeat
precompile_json --input 1,4,8,8,8 --out-channels 8 --kernel 3 --padding same --repeat 2
[[ $(field repeat) == 2 && $(field compiled) == 1 ]] || fail "repeat: want 1 kernel compiled, repeat 2"
grep -Eq '"compile_ms_samples":\[[0-9.e+]+,[0-9.e+]+\]' <<<"$out" || fail "repeat: want two samples"
[[ ! -e $cache || -z $(ls -A "$cache") ]] || fail "repeat wrote the disk cache: $(ls -A "$cache")"
echo "ok: $kernels kernels warmed, cached, exported, cleared, imported; compiles timed"
