#!/usr/bin/env bash
# The Python package's tests.
#
#   tools/test_python.sh              CI and development machines (PyPI reachable): a virtual
#                                     environment in $BUILD_DIR/python-venv (default build/) with
#                                     nanobind, scikit-build-core, pytest and numpy; `pip install .`
#                                     into it (incremental build folder $BUILD_DIR/python-build);
#                                     pytest tests/python (GPU and torch tests skip where absent).
#   tools/test_python.sh --gpu [DIR]  the GPU machine (no network): builds with the interpreter's own
#                                     packages (pip --no-build-isolation --no-index when
#                                     scikit-build-core is there, else CMake directly) and runs every
#                                     test, the GPU and PyTorch ones included.
#   tools/test_python.sh --bench [DIR]  the same build, then python/benchmarks/bench_dropin.py (the
#                                     drop-in against cuDNN on the suites, and the per-call overhead).
#   tools/test_python.sh --fusion [DIR] the same build, then python/benchmarks/bench_fusion.py in every
#                                     class (fused epilogues and padding against PyTorch's eager ops;
#                                     FUSION_PRECISIONS="tf32 bf16" for some of them).
# GPU modes write their logs to DIR (default $OUT, else ./device-out); read summary.txt first.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}

mode=${1:-}
if [ "$mode" != "--gpu" ] && [ "$mode" != "--bench" ] && [ "$mode" != "--fusion" ]; then
  set -e
  venv=$build/python-venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" ||
    { echo "test_python.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  py=$venv/bin/python
  "$py" -c "import nanobind, scikit_build_core, pytest, numpy" 2>/dev/null ||
    "$py" -m pip install -q --disable-pip-version-check nanobind scikit-build-core pytest numpy
  "$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps . \
    --config-settings=build-dir="$build/python-build"
  # From outside the source tree, so that `import conv3djit` finds the installed package.
  cd "$build" && exec "$(basename "$venv")/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/tests/python"
fi

root=$PWD
out=${2:-${OUT:-device-out}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
py=${PYTHON:-python3}
stage=$root/$build/python-site
export CONV3DJIT_CACHE_DIR=$root/$build/python-cache

note "== conv3djit Python $mode on $(hostname), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"
"$py" - <<'PY' 2>&1 | tee -a "$summary"
import importlib, sys
print("python:", sys.executable, sys.version.split()[0])
for name in ("torch", "nanobind", "scikit_build_core", "pytest", "numpy", "cupy"):
    try:
        m = importlib.import_module(name)
        print(f"{name}: {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"{name}: missing ({type(e).__name__})")
try:
    import torch
    print("torch.cuda:", torch.version.cuda, "available:", torch.cuda.is_available())
except Exception:
    pass
PY
cmake --version | head -1 | tee -a "$summary"

rm -rf "$stage"
build_log=$out/build.log
if "$py" -c "import scikit_build_core" 2>/dev/null &&
   "$py" -m pip install --no-build-isolation --no-index --no-deps --target "$stage" . \
     --config-settings=build-dir="$build/python-build-gpu" >"$build_log" 2>&1; then
  note "build: pip --no-build-isolation (scikit-build-core): ok"
else
  note "build: pip route unavailable or failed (see build.log); building with CMake directly"
  rm -rf "$stage"
  cmake -S . -B "$build/python-cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONV3DJIT_PYTHON=ON \
        -DCONV3DJIT_BUILD_TESTS=OFF -DCONV3DJIT_BUILD_TOOLS=OFF -DPython_EXECUTABLE="$(command -v "$py")" \
        >>"$build_log" 2>&1 &&
  cmake --build "$build/python-cmake" -j "$(nproc)" >>"$build_log" 2>&1 &&
  cmake --install "$build/python-cmake" --component python --prefix "$stage" >>"$build_log" 2>&1 ||
  { note "build: FAILED; the end of build.log:"; grep -E "error|Error|FAILED" "$build_log" | head -30 | tee -a "$summary"
    tail -20 "$build_log"; exit 1; }
  note "build: CMake: ok"
fi
export PYTHONPATH=$stage${PYTHONPATH:+:$PYTHONPATH}
(cd / && "$py" - <<'PY') 2>&1 | tee -a "$summary"
import conv3djit
print("import: conv3djit", conv3djit.__version__, "from", conv3djit.__file__)
print("device:", conv3djit.current_device(), "| NVRTC", conv3djit.nvrtc_version())
try:
    import conv3djit.torch
    print("import: conv3djit.torch ok")
except ImportError as e:
    print("import: conv3djit.torch unavailable:", e)
PY

if [ "$mode" = --bench ] || [ "$mode" = --fusion ]; then
  if [ "$mode" = --bench ]; then
    script=bench_dropin
    args=(--json "$out/bench_dropin.json")
  else
    script=bench_fusion
    read -ra precisions <<<"${FUSION_PRECISIONS:-fp32 tf32 bf16 fp16}"
    args=(--precision "${precisions[@]}" --json "$out/bench_fusion.json")
  fi
  timeout 540 "$py" "python/benchmarks/$script.py" "${args[@]}" >"$out/bench.log" 2>&1
  status=$?
  note "benchmark exit $status (bench.log, $script.json):"
  tee -a "$summary" <"$out/bench.log" | tail -50
  exit $status
fi

# From outside the source tree, so that `import conv3djit` finds the staged package.
(cd "$root/$build" && timeout 500 "$py" -m pytest -v -rfEs -p no:cacheprovider --junitxml="$out/pytest.xml" \
   "$root/tests/python") >"$out/pytest.log" 2>&1
status=$?
note "pytest exit $status (full log: pytest.log); failures and skips:"
grep -E "^(FAILED|ERROR|SKIPPED)" "$out/pytest.log" | head -60 | tee -a "$summary"
tail -1 "$out/pytest.log" | tee -a "$summary"
exit $status
