#!/usr/bin/env bash
# expect.sh WANT REGEX COMMAND [ARGS...]
# Runs COMMAND and checks both its exit code and its output (stdout and stderr together).
# WANT: a number (that exact exit code) or "usage" (a CLI11 usage error: exit code >= 100).
# REGEX: an extended regular expression the output must contain; !REGEX: one it must not contain.
set -u
want=$1 regex=$2
shift 2
output=$("$@" 2>&1)
rc=$?
printf '%s\n' "$output"
if [[ $want == usage ]]; then
  ((rc >= 100)) || { echo "FAIL: exit code $rc, wanted a usage error (>= 100)"; exit 1; }
elif ((rc != want)); then
  echo "FAIL: exit code $rc, wanted $want"
  exit 1
fi
if [[ $regex == !* ]]; then
  ! grep -Eq -- "${regex:1}" <<<"$output" || { echo "FAIL: output matches: ${regex:1}"; exit 1; }
else
  grep -Eq -- "$regex" <<<"$output" || { echo "FAIL: output does not match: $regex"; exit 1; }
fi
echo "ok: exit code $rc, output checked against $regex"
