#!/usr/bin/env bash
# The main job: build the library and the CLI (no tests; after tools/setup.sh nothing is left to
# build), precompile the reference problem's kernel into the default disk cache (for sm_90 when
# there is no GPU), and on a GPU verify it against float64 and time it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target conv3djit conv3djit_cli
cli=$build/tools/conv3djit
ref=(--input 16,3,64,64,64 --out-channels 64 --kernel 3,5,7)
if "$cli" info | grep -q "^device *none"; then
  "$cli" precompile "${ref[@]}" --arch sm_90
  echo "no GPU here: kernel precompiled for sm_90 only"
else
  "$cli" precompile "${ref[@]}"
  "$cli" verify "${ref[@]}"
  "$cli" run "${ref[@]}"
fi
