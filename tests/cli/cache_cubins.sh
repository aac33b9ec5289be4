#!/usr/bin/env bash
# cache_cubins.sh CLI TOOLS WORKDIR
# tools/cache_cubins.py on a cache precompiled for sm_90 (no GPU needed): one ELF file a kernel
# entry, only the entries whose key holds the text asked for, exit 1 when none does, and an
# entry whose checksum no longer holds left out.
set -u
cli=$1 tools=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cache=$work/cache
fail() { echo "FAIL: $*"; exit 1; }
extract() { python3 "$tools/cache_cubins.py" "$cache" "$@"; }

# The reference problem: its igemm_sm90 kernel and the pitched-copy helper beside it.
"$cli" --cache-dir "$cache" precompile --arch sm_90 --input 1,3,16,16,16 --out-channels 64 --kernel 3,5,7 >/dev/null ||
  fail "precompile"
entries=$(find "$cache" -name '*.cubin' | wc -l)
((entries >= 2)) || fail "want at least 2 cache entries, found $entries"

out=$(extract "$work/all") || fail "extract all: exit $?"
echo "$out"
[[ $(ls "$work/all" | wc -l) -eq $entries ]] || fail "want $entries cubins"
for f in "$work"/all/*.cubin; do
  [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == '177ELF' ]] || fail "$f is no ELF file"
done
grep -q "_ZN9conv3djit10igemm_sm90" <<<"$out" || fail "no lowered igemm_sm90 name printed"

extract "$work/some" igemm_sm90 >/dev/null || fail "extract igemm_sm90: exit $?"
[[ $(ls "$work/some" | wc -l) -eq 1 && $(ls "$work/some") == igemm_sm90_* ]] || fail "want the igemm_sm90 kernel alone"

extract "$work/none" no-such-kernel >/dev/null
(($? == 1)) || fail "a text that matches nothing must exit 1"

# The first letter of an entry's key changed: its checksum fails, and it is left out.
victim=$(find "$cache" -name '*.cubin' | head -n1)
printf 'Z' | dd of="$victim" bs=1 seek=16 conv=notrunc status=none
extract "$work/checked" >/dev/null
[[ $(ls "$work/checked" | wc -l) -eq $((entries - 1)) ]] || fail "want the changed entry left out"
echo "cache_cubins: ok ($entries entries)"
