#!/usr/bin/env bash
# The main job: precompile the reference problem's kernel into the default disk cache (for sm_90
# when there is no GPU), and on a GPU verify it against float64 and time it.
set -euo pipefail
cd "$(dirname "$0")/.."
cli=${BUILD_DIR:-build}/tools/conv3djit
ref=(--input 16,3,64,64,64 --out-channels 64 --kernel 3,5,7)
if "$cli" info | grep -q "^device *none"; then
  "$cli" precompile "${ref[@]}" --arch sm_90
  echo "no GPU here: kernel precompiled for sm_90 only"
else
  "$cli" precompile "${ref[@]}"
  "$cli" verify "${ref[@]}"
  "$cli" run "${ref[@]}"
fi
