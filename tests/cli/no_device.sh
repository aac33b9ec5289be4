#!/usr/bin/env bash
# no_device.sh CLI ARGS...
# On a machine without a CUDA device, `CLI ARGS...` must exit 2 with a no_device error; where
# there is a device the check means nothing, so it is skipped (exit 77).
set -u
cli=$1
shift
if ! "$cli" info | grep -q "^device *none"; then
  echo "a CUDA device is present: skipped"
  exit 77
fi
output=$("$cli" "$@" 2>&1)
rc=$?
printf '%s\n' "$output"
((rc == 2)) || { echo "FAIL: exit code $rc, wanted 2 (no device)"; exit 1; }
grep -q "^error: no_device: " <<<"$output" || { echo "FAIL: no 'error: no_device: ' line"; exit 1; }
# The category once: Error::what() starts with it too.
! grep -q "no_device: no_device" <<<"$output" || { echo "FAIL: the category is printed twice"; exit 1; }
echo "ok: exit code 2 with a no_device error"
