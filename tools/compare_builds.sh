#!/usr/bin/env bash
# Times the shapes of a manifest with several builds of conv3djit on one GPU, side by side: how
# a kernel change is measured against its base. Each source tree is built into
# TREE/build-compare (or TREE/$COMPARE_BUILD_DIR; the CLI only, with its own kernel cache there),
# then every round times the whole manifest with each build in turn (`conv3djit run --manifest`),
# so that clock drift during the comparison falls on all builds alike. Prints, per shape, each build's median of the rounds'
# medians and its ratio to the first build; the JSON lines of every round are kept in OUT_DIR.
# With -c, each build runs each forced configuration as a column of its own (a new family or tile
# against the planner's choice, one build).
#
# Usage: tools/compare_builds.sh [-r ROUNDS] [-o OUT_DIR] [-c CONFIG]... MANIFEST TREE... [-- RUN_FLAGS...]
#   TREE       a source tree, e.g. `git worktree add ../base HEAD~1`, or a copy of one
#   ROUNDS     default 2
#   OUT_DIR    default ./compare-out
#   CONFIG     `--config` of a column ("planner": the planner's choice); default: the planner's only
#   RUN_FLAGS  passed to `conv3djit run` (default: --iters 30); e.g. --precision is per line of
#              the manifest, --config forces one kernel configuration for every shape
set -euo pipefail
rounds=2
out=compare-out
build=${COMPARE_BUILD_DIR:-build-compare}
configs=()
while getopts "r:o:c:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    o) out=$OPTARG ;;
    c) configs+=("$OPTARG") ;;
    *) sed -n '2,/^set /p' "$0" | sed '$d'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
(($# >= 2)) || { echo "usage: $0 [-r ROUNDS] [-o OUT_DIR] [-c CONFIG]... MANIFEST TREE... [-- RUN_FLAGS...]" >&2; exit 2; }
((${#configs[@]} > 0)) || configs=(planner)
manifest=$(realpath "$1")
shift
trees=()
while (($# > 0)) && [[ $1 != -- ]]; do
  trees+=("$(realpath "$1")")
  shift
done
(($# > 0)) && shift  # the --
run_flags=("$@")
((${#run_flags[@]} > 0)) || run_flags=(--iters 30)
mkdir -p "$out"

# Builds run side by side, each on a share of the cores.
jobs=$(($(nproc) / ${#trees[@]}))
((jobs > 0)) || jobs=1
pids=()
for tree in "${trees[@]}"; do
  log="$out/build-$(basename "$tree").log"
  (cmake -S "$tree" -B "$tree/$build" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
     cmake --build "$tree/$build" -j "$jobs" --target conv3djit_cli) >"$log" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "build of ${trees[$i]} failed:" >&2; tail -20 "$out/build-$(basename "${trees[$i]}").log" >&2; exit 1; }
done

# The columns: each build with each configuration.
columns=()
for tree in "${trees[@]}"; do
  for config in "${configs[@]}"; do columns+=("$tree|$config"); done
done
for ((r = 1; r <= rounds; ++r)); do
  for i in "${!columns[@]}"; do
    tree=${columns[$i]%%|*} config=${columns[$i]#*|}
    forced=()
    [[ $config != planner ]] && forced=(--config "$config")
    # (A shape a forced configuration refuses is a line with its error: that cell shows n/a.)
    CONV3DJIT_CACHE_DIR="$tree/$build/cache" "$tree/$build/tools/conv3djit" run \
      --manifest "$manifest" --json "${forced[@]}" "${run_flags[@]}" >"$out/round$r-build$i.jsonl" || true
  done
done

python3 - "$out" "$rounds" "${columns[@]}" <<'PY'
import json, statistics, sys, os
out, rounds, columns = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
trees = [c.split("|")[0] for c in columns]
times = {}  # (build, name) -> medians of the rounds
names = []
for r in range(1, rounds + 1):
    for b in range(len(trees)):
        for line in open(os.path.join(out, f"round{r}-build{b}.jsonl")):
            row = json.loads(line)
            if row["name"] not in names:
                names.append(row["name"])
            if "median_ms" in row:
                times.setdefault((b, row["name"]), []).append(row["median_ms"])
labels = [f"{b}:{os.path.basename(c.split('|')[0])}" + ("" if c.endswith("|planner") else ":" + c.split("|", 1)[1])
          for b, c in enumerate(columns)]
width = max(len(n) for n in names + ["NAME"])
print(f"{'NAME':<{width}}  " + "  ".join(f"{l[-18:]:>18}" for l in labels))
for n in names:
    base = statistics.median(times[(0, n)]) if (0, n) in times else None
    cells = []
    for b in range(len(trees)):
        if (b, n) not in times:
            cells.append("n/a")
            continue
        ms = statistics.median(times[(b, n)])
        cells.append(f"{ms:9.4f}" + ("" if b == 0 or base is None else f" x{base / ms:5.3f}").rjust(9))
    print(f"{n:<{width}}  " + "  ".join(f"{c:>18}" for c in cells))
print(f"(medians over {rounds} round(s) of `conv3djit run` medians, ms; xR = column 0's time / this column's;"
      " n/a: the configuration refused the shape)")
for l in labels:
    print(l)
PY
