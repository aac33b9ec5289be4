#!/usr/bin/env bash
# half_types.sh CLI MANIFEST WORKDIR
# bf16 / fp16 and NDHWC without a GPU: precompile of the manifest for sm_90, then the cache's
# listing: each kernel's element type, its layout where it is not NCDHW and out= for a float32
# output of half inputs, in the readable column and in the key; the same shapes given as flags
# find their kernels cached.
set -u
cli=$1 manifest=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cache=$work/cache
fail() { echo "FAIL: $*"; exit 1; }
conv() { "$cli" --cache-dir "$cache" "$@"; }

out=$(conv precompile --arch sm_90 --manifest "$manifest" --json)
rc=$?
echo "$out"
((rc == 0)) || fail "precompile exited $rc"
grep -q '"failed":0' <<<"$out" || fail "failed kernels"
grep -q '"name":"bf16_ndhwc"' <<<"$out" || fail "no bf16_ndhwc row"

out=$(conv list)
rc=$?
echo "$out"
((rc == 0)) || fail "list exited $rc"
# The readable kernel column: type, then the layout (NDHWC only) and out= where they apply.
grep -Eq "^ +[0-9.]+ [KM]iB .* [a-z0-9_]+ bf16 ndhwc .*sm_90$" <<<"$out" || fail "list: no bf16 ndhwc kernel"
grep -Eq "^ +[0-9.]+ [KM]iB .* [a-z0-9_]+ fp16 out=fp32 .*sm_90$" <<<"$out" || fail "list: no fp16 out=fp32 kernel"
grep -Eq "^ +[0-9.]+ [KM]iB .* [a-z0-9_]+ fp32 ndhwc .*sm_90$" <<<"$out" || fail "list: no fp32 ndhwc kernel"
# The keys the cache compares: the layout always, out= only where the output's type differs.
grep -Eq "^ +[a-z0-9_]+ bf16 ndhwc [^|]*\|arch=sm_90" <<<"$out" || fail "list: no bf16 ndhwc key"
grep -Eq "^ +[a-z0-9_]+ fp16 ncdhw out=fp32 [^|]*\|arch=sm_90" <<<"$out" || fail "list: no fp16 ncdhw out=fp32 key"
! grep -Eq "bf16 (ncdhw|ndhwc) out=" <<<"$out" || fail "list: out= on a kernel whose output is bf16"

out=$(conv list --json)
echo "$out"
grep -q '"kernel":"[a-z0-9_]* bf16 ndhwc [^"]*","key":"[a-z0-9_]* bf16 ndhwc ' <<<"$out" ||
  fail "list --json: no bf16 ndhwc entry"

# The manifest's rows as flags (PyTorch's type names, any case): the same keys, all cached.
out=$(conv precompile --arch sm_90 --input 1,8,6,10,12 --out-channels 16 --kernel 3 --padding 0,1,1 --bias \
      --dtype BFloat16 --layout NDHWC)
rc=$?
echo "$out"
((rc == 0)) && grep -Eq "0 compiled, [0-9]+ cached, 0 failed" <<<"$out" || fail "flags (bf16 ndhwc): not cached"
grep -q "_bias_bf16_ndhwc$" <<<"$out" || fail "flags (bf16 ndhwc): name"
out=$(conv precompile --arch sm_90 --input 1,8,6,10,12 --out-channels 8 --kernel 3 --padding 1 \
      --dtype float16 --fp32-output --residual)
rc=$?
echo "$out"
((rc == 0)) && grep -Eq "0 compiled, [0-9]+ cached, 0 failed" <<<"$out" || fail "flags (fp16 out32): not cached"
grep -q "_fp16_out32_res$" <<<"$out" || fail "flags (fp16 out32): name"
echo "ok"
