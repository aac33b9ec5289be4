#!/usr/bin/env bash
# deployment.sh CLI WORKDIR
# The deployment's promises through the command line, no GPU needed: precompile fails when it
# could not store, info tells the truth, CONV3DJIT_COMPILE=never refuses a miss, --arch and
# CONV3DJIT_LOG_LEVEL are checked, the cache folder is private and a shared one refused, special
# files at an entry's name neither hang nor disable the cache, archives go through links and pipes,
# and cache commands on folders they cannot use fail naming them.
set -u
cli=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
shape=(--input 1,4,8,8,8 --out-channels 8 --kernel 3 --padding same)
fail() { echo "FAIL: $*"; exit 1; }
# run WANT_RC REGEX ARGS...: the CLI's exit code and combined output.
run() {
  local want=$1 regex=$2
  shift 2
  out=$("$@" 2>&1)
  local rc=$?
  ((rc == want)) || fail "exit code $rc, wanted $want: $* -> $out"
  grep -Eq -- "$regex" <<<"$out" || fail "output of '$*' does not match '$regex': $out"
}

# An unwritable folder: non-zero, naming it, even with the log off.
CONV3DJIT_LOG_LEVEL=off run 1 "not saved in the disk cache '/proc/conv3djit-x': cannot create" \
  "$cli" --cache-dir /proc/conv3djit-x precompile --arch sm_90 "${shape[@]}"
run 0 '"problem":"cannot create files in .*"writable":false' "$cli" --cache-dir /proc/conv3djit-x info --json

# A fresh folder is made 0700 (and every folder above it that precompile had to make).
cache=$work/new/cache
run 0 "1 compiled|2 compiled" "$cli" --cache-dir "$cache" precompile --arch sm_90 "${shape[@]}"
[[ $(stat -c %a "$cache") == 700 && $(stat -c %a "$work/new") == 700 ]] || fail "folders not 0700"
run 0 '"exists":true,.*"problem":"","writable":true' "$cli" --cache-dir "$cache" info --json
run 0 "direct_tiled fp32 class=fp32 epi=bias cg=4 k=3x3x3 s=1x1x1 d=1x1x1 sm_90" "$cli" --cache-dir "$cache" list

# Production: never compile. A miss is its own error; a warmed cache serves.
CONV3DJIT_COMPILE=never run 1 "cache_miss: kernel '.*' for sm_90 is not in the cache .*needed by N1_C4" \
  "$cli" --cache-dir "$work/empty" precompile --arch sm_90 "${shape[@]}"
CONV3DJIT_COMPILE=never run 0 "0 compiled, 1 cached" "$cli" --cache-dir "$cache" precompile --arch sm_90 "${shape[@]}"
CONV3DJIT_COMPILE=Warn run 0 "compiling '.*not in the cache" \
  "$cli" --cache-dir "$work/warn" precompile --arch sm_90 "${shape[@]}"
CONV3DJIT_COMPILE=sometimes run 1 "CONV3DJIT_COMPILE = 'sometimes': expected allow, warn or never" \
  "$cli" --cache-dir "$cache" precompile --arch sm_90 "${shape[@]}"

# --arch: checked before anything is compiled, listing what this NVRTC supports.
for arch in sm_70 sm_95 90 sm_99999999999; do
  run 1 "arch = '$arch'.*supports .*sm_90" "$cli" --cache-dir "$work/arch" precompile --arch "$arch" "${shape[@]}"
done
[[ ! -e $work/arch ]] || fail "a bad --arch wrote the cache"

# An unknown log level is said on stderr, and the warnings it would have hidden still show.
CONV3DJIT_LOG_LEVEL=loud CONV3DJIT_COMPILE=warn run 0 "CONV3DJIT_LOG_LEVEL = 'loud' is not a level.*" \
  "$cli" --cache-dir "$work/loud" precompile --arch sm_90 "${shape[@]}"
grep -q "not in the cache" <<<"$out" || fail "an unknown log level hid a warning: $out"
CONV3DJIT_LOG_LEVEL=ERROR CONV3DJIT_COMPILE=warn run 0 "compiled" \
  "$cli" --cache-dir "$work/quiet" precompile --arch sm_90 "${shape[@]}"
grep -q "not in the cache" <<<"$out" && fail "CONV3DJIT_LOG_LEVEL=ERROR did not quiet warnings: $out"

# A folder others can write is refused; trusting it is the caller's explicit choice.
mkdir -p "$work/shared" && chmod 0777 "$work/shared"
run 1 "writable by other users" "$cli" --cache-dir "$work/shared" precompile --arch sm_90 "${shape[@]}"
run 1 "writable by other users" "$cli" --cache-dir "$work/shared" list
CONV3DJIT_TRUST_SHARED_CACHE=1 run 0 "compiled" "$cli" --cache-dir "$work/shared" precompile --arch sm_90 "${shape[@]}"

# Special files at an entry's name: a FIFO must not hang, a folder must not disable the cache.
entry=$("$cli" --cache-dir "$cache" list --json | grep -o '"path":"[^"]*"' | head -n1 | cut -d'"' -f4)
[[ -f $entry ]] || fail "no entry path from list --json"
for kind in fifo folder; do
  rm -rf "$entry"
  if [[ $kind == fifo ]]; then mkfifo "$entry"; else mkdir -p "$entry/inside"; fi
  out=$(timeout 60 "$cli" --cache-dir "$cache" precompile --arch sm_90 "${shape[@]}" 2>&1)
  rc=$?
  ((rc == 0)) || fail "$kind at an entry's name: exit code $rc: $out"
  grep -q "not a regular file" <<<"$out" || fail "$kind at an entry's name: not reported: $out"
  [[ -f $entry ]] || fail "$kind at an entry's name: the entry was not rebuilt"
done

# Archives: through a link (which stays a link), to standard output and from standard input.
touch "$work/real.c3j" && ln -s "$work/real.c3j" "$work/link.c3j"
run 0 "exported [0-9]+ entries" "$cli" --cache-dir "$cache" export "$work/link.c3j"
[[ -L $work/link.c3j && -s $work/real.c3j ]] || fail "export replaced the link"
"$cli" --cache-dir "$cache" export /dev/stdout 2>/dev/null | "$cli" --cache-dir "$work/piped" import - >"$work/import.out" 2>&1 ||
  fail "export /dev/stdout | import -: $(cat "$work/import.out")"
grep -Eq "imported [1-9][0-9]* entries" "$work/import.out" || fail "import -: $(cat "$work/import.out")"
run 1 "not a conv3djit cache archive" bash -c "echo garbage | '$cli' --cache-dir '$work/piped' import -"

# Cache commands on folders they cannot use: named, and why.
touch "$work/a-file" && ln -s "$work/loop" "$work/loop"
for command in list clear "export $work/out.c3j"; do
  run 1 "'$work/missing' does not exist" "$cli" --cache-dir "$work/missing" $command
  run 1 "'$work/a-file' is not a folder" "$cli" --cache-dir "$work/a-file" $command
  run 1 "'$work/loop'.*symbolic links" "$cli" --cache-dir "$work/loop" $command
done
[[ ! -e $work/out.c3j ]] || fail "export wrote an archive from an unusable folder"
echo "ok: deployment checks"
