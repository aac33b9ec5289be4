#!/usr/bin/env bash
# One call on the GPU machine: build there, then (by mode) run every test, the JIT cost probe,
# verify/run of the reference problem, a --config sweep on it, and the benchmark suite against
# cuDNN. Logs go to $OUT (or ./device-out); bench JSON to $OUT/bench.json.
# Usage: tools/run_on_gpu.sh [tests|sweep|bench|suites|tune|compile|verify|pointwise|windowed|narrow|walking|all]
# (env: BENCH_MANIFEST, default bench/suite.jsonl; BENCH_CONFIG; SWEEP_CONFIGS; COMPILE_REPEAT;
# suites: SUITES, default every suite, and FUSION=1 to run the fusion benchmark after them;
# verify: VERIFY_MANIFESTS, default the edge sweep and the network layers; CONV3DJIT_SOURCE_COMMIT,
# the commit the JSON reports record, for a copy of the tree whose .git is stale: the value as the
# tree's own git names it, e.g. `CONV3DJIT_SOURCE_COMMIT=d625979 tools/run_on_gpu.sh bench`)
set -u -o pipefail
what=${1:-all}
out=${OUT:-device-out}
mkdir -p "$out"
build=build-device
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
# Prefer the cuDNN PyTorch ships (9.19 on the H200 machine), the one PyTorch users run.
cudnn_lib=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cudnn_lib" ] && export LD_LIBRARY_PATH="$cudnn_lib:${LD_LIBRARY_PATH:-}"
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONV3DJIT_SOURCE_COMMIT="${CONV3DJIT_SOURCE_COMMIT:-}" \
  >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
cmake --build $build -j 16 -- -k 0 >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; }
cli=$build/tools/conv3djit
export CONV3DJIT_CACHE_DIR=$PWD/$build/cache
ref="--input 16,3,64,64,64 --out-channels 64 --kernel 3,5,7"
case $what in tests|all)
  # test_gpu_conv3d's cases are tests of their own (tests/CMakeLists.txt, CASES): 8 at a time
  # compile their kernels on 8 cores.
  ctest --test-dir $build --output-on-failure -j 8 2>&1 | tee "$out/ctest.log" | grep -E "tests passed|Failed|\*\*\*" | head -20
  ctest --test-dir $build -R gpu_jit_costs -V 2>&1 | grep -E "first call|host time|allocation check|rel-L2|TMA" | tee "$out/jit_costs.txt"
  $cli verify $ref 2>&1 | tee "$out/verify.txt" | grep -E "kernel|rel-L2|PASS|FAIL"
  $cli run $ref 2>&1 | tee "$out/run.txt" | grep -E "kernel|median|compute"
esac
case $what in sweep|all)
  for cfg in ${SWEEP_CONFIGS:-tiled:8,1,4,3,8 tiled:8,1,8,3,8 tiled:4,2,4,3,8 tiled:8,1,4,3,4 tiled:4,1,8,3,8 generic}; do
    echo "config $cfg: $($cli run $ref --config $cfg --iters 20 2>&1 | grep -E 'median|error')"
  done | tee "$out/sweep.txt"
esac
# Benches a manifest against cuDNN into $out/NAME.json and prints its rows.
bench_manifest() {  # manifest name
  $cli precompile --manifest "$1" >/dev/null 2>&1
  $cli bench --manifest "$1" --json ${BENCH_CONFIG:+--config $BENCH_CONFIG} >"$out/$2.json" 2>"$out/$2.log"
  echo "bench $2 exit $?"; tail -5 "$out/$2.log"
  python3 - "$out/$2.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(r["device"], r.get("cudnn_version"), "geomean", r.get("geomean_speedup"))
f = lambda v, p: "n/a" if v is None else f"{v:.{p}g}"
for row in r["rows"]:
    print(f'{row["name"]:22} {row["precision"]:5} c3j {f(row["conv3djit_ms"],4):>8} cudnn {f(row["cudnn_ms"],4):>8} x{f(row["speedup"],3):>6}'
          f' err {f(row["conv3djit_rel_l2"],2)}/{f(row["cudnn_rel_l2"],2)} {(row.get("kernel") or row.get("conv3djit_error") or "")[:60]}')
PY
}
case $what in bench|all) bench_manifest "${BENCH_MANIFEST:-bench/suite.jsonl}" bench ;; esac
case $what in pointwise)
  # gemm_sm90's tests; bench/pointwise_half.jsonl on the planner's kernels (gemm_sm90 where it takes
  # the layer) against igemm_sm90_half and gemm_sm90's other tiles, bench/pointwise_tf32.jsonl on
  # the planner's (igemm_sm90) against gemm_sm90's tf32 form and bench/pointwise_ndhwc.jsonl on the
  # planner's against igemm_sm90_half and gemm_sm90's 128 x 128 tile, bench/pointwise_residual.jsonl
  # on the planner's against gemm_sm90's tiles (and its NCDHW rows against split = 1), in
  # alternating rounds of one build; then the
  # manifests against cuDNN (the tf32 one with gemm_sm90 forced).
  ctest --test-dir $build -R gemm_sm90 --output-on-failure 2>&1 | tee "$out/gemm_tests.log" | grep -E "tests passed|Failed|\*\*\*"
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare" -c planner -c igemm_sm90_half \
    -c gemm_sm90:bm=256,bn=112 bench/pointwise_half.jsonl . -- --iters 30 | tee "$out/pointwise_compare.txt"
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare_tf32" -c planner -c gemm_sm90 \
    -c gemm_sm90:bm=128,bn=128 bench/pointwise_tf32.jsonl . -- --iters 30 | tee "$out/pointwise_tf32_compare.txt"
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare_ndhwc" -c planner -c igemm_sm90_half \
    -c gemm_sm90:bm=128,bn=128 bench/pointwise_ndhwc.jsonl . -- --iters 30 | tee "$out/pointwise_ndhwc_compare.txt"
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare_residual" -c planner -c gemm_sm90 \
    -c gemm_sm90:bm=128,bn=128 bench/pointwise_residual.jsonl . -- --iters 30 | tee "$out/pointwise_residual_compare.txt"
  # split = 1 (one warpgroup's epilogue beside the other's products) on the residual rows (n/a on
  # the NDHWC ones, which refuse it).
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare_residual_split" -c planner \
    -c gemm_sm90:bm=128,bn=112,split=1 -c gemm_sm90:bm=128,bn=128,split=1 bench/pointwise_residual.jsonl . -- --iters 30 |
    tee "$out/pointwise_residual_split_compare.txt"
  bench_manifest bench/pointwise_half.jsonl pointwise
  BENCH_CONFIG=gemm_sm90 bench_manifest bench/pointwise_tf32.jsonl pointwise_tf32
  bench_manifest bench/pointwise_ndhwc.jsonl pointwise_ndhwc
esac
case $what in windowed)
  # gemm_sm90's tests (its im2col form among them), then bench/windowed_ndhwc.jsonl and
  # bench/windowed_ncdhw.jsonl on the planner's kernels against gemm_sm90's im2col form in its
  # tiles, with and without row boxes (n/a where a tile refuses the layer), in alternating rounds
  # of one build; then the layers the planner gives that form (bench/im2col_planner.jsonl) against
  # cuDNN.
  ctest --test-dir $build -R gemm_sm90 --output-on-failure 2>&1 | tee "$out/gemm_tests.log" | grep -E "tests passed|Failed|\*\*\*"
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare_windowed" -c planner \
    -c gemm_sm90:bm=128,bn=256 -c gemm_sm90:bm=128,bn=256,rowbox=1 -c gemm_sm90:bm=256,bn=128 \
    -c gemm_sm90:bm=128,bn=128,rowbox=1 bench/windowed_ndhwc.jsonl . -- --iters 30 | tee "$out/windowed_compare.txt"
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare_windowed_ncdhw" -c planner \
    -c gemm_sm90:bm=128,bn=256 -c gemm_sm90:bm=128,bn=256,rowbox=1 -c gemm_sm90:bm=64,bn=192,split=1 \
    -c gemm_sm90:bm=64,bn=192,split=1,rowbox=1 bench/windowed_ncdhw.jsonl . -- --iters 30 |
    tee "$out/windowed_ncdhw_compare.txt"
  bench_manifest bench/im2col_planner.jsonl im2col_planner
esac
case $what in walking)
  # igemm_sm90_k16's GPU tests (test_gpu_half's sm_90 cases), then bench/walking_half.jsonl on the
  # planner's walks against two warpgroups' walks and one-plane tiles, in alternating rounds of one
  # build: the baselines of a change to the walk.
  $build/tests/test_gpu_half "half types on sm_90: igemm_sm90 on a float32 copy*" 2>&1 | tee "$out/k16_tests.log" |
    grep -a -E "test cases|FAILED"
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare_walking" -c planner \
    -c igemm_sm90_k16:wgs=2,bn=64 -c igemm_sm90_k16:wgs=3,bn=64,planes=1 bench/walking_half.jsonl . \
    -- --iters 30 | tee "$out/walking_compare.txt"
esac
case $what in narrow)
  # gemm_sm90's im2col GPU cases (its 32- and 16-channel chunks among them), then
  # bench/narrow_channels.jsonl (input channels off whole 64s) on the planner's kernels against
  # gemm_sm90's 128 x 256 tiles in 64-channel chunks, row boxes in 32- and 16-channel chunks, and
  # igemm_sm90_half, in alternating rounds of one build; then the manifest against cuDNN.
  $build/tests/test_gpu_gemm_sm90 "*layers of any window through im2col boxes*" 2>&1 | tee "$out/gemm_tests.log" |
    grep -a -E "test cases|FAILED"
  COMPARE_BUILD_DIR=$build tools/compare_builds.sh -r 3 -o "$out/compare_narrow" -c planner \
    -c gemm_sm90:bm=128,bn=256 -c gemm_sm90:bm=128,bn=256,rowbox=1,chunk=32 \
    -c gemm_sm90:bm=128,bn=256,rowbox=1,chunk=16 -c igemm_sm90_half bench/narrow_channels.jsonl . \
    -- --iters 30 | tee "$out/narrow_compare.txt"
  bench_manifest bench/narrow_channels.jsonl narrow_channels
esac
case $what in suites)
  # Every suite, one after the other (each JSON beside its log: bench-<suite>.json), then with
  # FUSION=1 the fusion benchmark (its logs in $out/fusion).
  for m in ${SUITES:-bench/suite.jsonl bench/suite_tf32.jsonl bench/suite_ndhwc.jsonl bench/suite_half.jsonl}; do
    bench_manifest "$m" "bench-$(basename "$m" .jsonl)"
  done
  if [ -n "${FUSION:-}" ]; then
    tools/test_python.sh --fusion "$out/fusion" >/dev/null 2>&1
    echo "fusion exit $?"; tail -45 "$out/fusion/bench.log"
  fi
esac
case $what in tune)
  # Tunes each suite into a cache of its own (tune-<suite>.json: every candidate's time beside the
  # planner's choice), then benches the suite against cuDNN with those records.
  for m in ${TUNE_MANIFESTS:-bench/suite.jsonl bench/suite_tf32.jsonl bench/suite_half.jsonl}; do
    name=$(basename $m .jsonl)
    export CONV3DJIT_CACHE_DIR=$PWD/$build/cache-tuned-$name
    $cli tune --manifest $m --json >"$out/tune-$name.json" 2>"$out/tune-$name.log"
    echo "tune $name exit $?"; tail -3 "$out/tune-$name.log"
    [ -n "${TUNE_NO_BENCH:-}" ] && continue
    $cli bench --manifest $m --json >"$out/bench-tuned-$name.json" 2>"$out/bench-tuned-$name.log"
    echo "bench tuned $name exit $?"; tail -2 "$out/bench-tuned-$name.log"
  done
  export CONV3DJIT_CACHE_DIR=$PWD/$build/cache
esac
case $what in verify)
  # Every layer of each manifest against its float64 reference (verify-<manifest>.json), compiled
  # on every core first; the failing rows are printed.
  for m in ${VERIFY_MANIFESTS:-bench/edge_sweep.jsonl bench/network_layers.jsonl}; do
    name=verify-$(basename "$m" .jsonl)
    $cli precompile --manifest "$m" -j 16 >"$out/$name-precompile.log" 2>&1
    $cli verify --manifest "$m" --seed "${VERIFY_SEED:-11}" --json >"$out/$name.json" 2>"$out/$name.log"
    echo "verify $m exit $?"
    python3 - "$out/$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['passed']} passed, {r['failed']} failed")
for row in r["rows"]:
    if not row["passed"]:
        print(" ", row["name"], row["shape"], row.get("kernel"), row.get("rel_l2"), row.get("error", ""))
PY
  done
esac
case $what in compile|all)
  # Cold NVRTC compiles, each kernel's median of COMPILE_REPEAT (interleaved rounds). A fixed
  # Python loop timed before and after shows how fast this host's CPU was meanwhile.
  yardstick() { for i in 1 2 3; do /usr/bin/time -f "%e" python3 -c 's=0
for i in range(6000000): s+=i*i' 2>&1; done | tr '\n' ' '; }
  echo "host yardstick before (s): $(yardstick)" | tee "$out/compile.txt"
  for m in bench/suite.jsonl bench/suite_tf32.jsonl bench/compile_heavy.jsonl; do
    $cli precompile --manifest $m --arch sm_90 --repeat ${COMPILE_REPEAT:-5} --json \
      >"$out/compile-$(basename $m .jsonl).json" 2>/dev/null
  done
  echo "host yardstick after (s): $(yardstick)" | tee -a "$out/compile.txt"
  python3 - "$out"/compile-*.json <<'PY' | tee -a "$out/compile.txt"
import json, sys
for path in sys.argv[1:]:
    kernels = [k for k in json.load(open(path))["kernels"] if k["status"] == "compiled"]
    medians = sorted(k["compile_ms"] for k in kernels)
    print(f"{path.split('/')[-1]}: {len(kernels)} kernels, median of medians {medians[len(medians) // 2]:.0f} ms,"
          f" max median {medians[-1]:.0f}, medians over 1 s: {sum(m > 1000 for m in medians)}")
    for k in sorted(kernels, key=lambda k: -k["compile_ms"])[:6]:
        s = k["compile_ms_samples"]
        print(f"  {k['name']:24} median {k['compile_ms']:6.0f}  min {min(s):6.0f}  max {max(s):6.0f}")
PY
esac
