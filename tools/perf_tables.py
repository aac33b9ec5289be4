#!/usr/bin/env python3
"""Markdown tables of the benchmark suites against cuDNN, from `conv3djit bench --json` files.

    python3 tools/perf_tables.py [FP32_JSON [TF32_JSON]] [--write FILE]

Without arguments it reads the newest file of bench/results/fp32/ and of bench/results/tf32/
(by the date in the name, then by the commit's date). It prints, for each file, a line naming
the run (file, device, cuDNN, date, commit, kernel-source hash), the table (layer, conv3djit ms,
cuDNN ms, speedup, both rel-L2, registers / local bytes, kernel) and the geometric-mean speedup.
The kernel column is the `kernel` string of the JSON as it is.

--write FILE replaces the text between the lines `<!-- perf_tables: begin -->` and
`<!-- perf_tables: end -->` of FILE with that output (docs/performance.md has them).

Python 3 standard library only.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
BEGIN = "<!-- perf_tables: begin -->"
END = "<!-- perf_tables: end -->"
NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})_([^_]+)_([0-9a-f]{7,40})\.json$")


def commit_time(commit):
    """The commit's committer time from git, or 0 where git cannot resolve it."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "show", "-s", "--format=%ct", commit],
                             capture_output=True, text=True, check=True).stdout.strip()
        return int(out)
    except (OSError, subprocess.CalledProcessError, ValueError):
        return 0


def newest(suite):
    """The newest results file of bench/results/<suite>/ (date in its name, then commit date)."""
    folder = os.path.join(RESULTS, suite)
    candidates = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        m = NAME.match(name)
        if m:
            candidates.append((m.group(1), commit_time(m.group(3)), name))
    if not candidates:
        sys.exit(f"perf_tables: no <date>_<gpu>_<commit>.json file in {folder}")
    return os.path.join(folder, max(candidates)[2])


def fmt_ms(v):
    return "n/a" if v is None else f"{v:.3f}"


def fmt_err(v, passed):
    if v is None:
        return "n/a"
    return f"{v:.1e}" + ("" if passed in (True, None) else " (fails)")


def fmt_regs(row):
    regs, local = row.get("registers"), row.get("local_bytes")
    if regs is None:
        return "n/a"
    return f"{regs} / {'n/a' if local is None else local}"


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def table(path):
    with open(path) as f:
        run = json.load(f)
    rel = os.path.relpath(path, ROOT)
    commit = run.get("commit")
    source = run.get("kernel_sources_sha256")
    lines = []
    lines.append(
        f"`{rel}`: {run.get('device', 'n/a')} ({run.get('arch', 'n/a')}), cuDNN {run.get('cudnn_version') or 'n/a'}, "
        f"{run.get('date', 'n/a')}, commit {commit[:7] if commit else 'n/a'}, kernel sources sha256 "
        f"{source[:12] + '…' if source else 'n/a'}; median of {run.get('iters')} timed calls after "
        f"{run.get('warmup')} warm-ups" + (f", inputs in [{run['input_range'][0]:g}, {run['input_range'][1]:g})"
                                           if run.get("input_range") else "") +
        (f", config {run['config']}" if run.get("config") else "") + ".")
    lines.append("")
    lines.append("| layer | conv3djit ms | cuDNN ms | speedup | conv3djit rel-L2 | cuDNN rel-L2 | registers / local "
                 "| kernel |")
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    speedups = []
    for row in run["rows"]:
        s = row.get("speedup")
        if s is not None and s > 0:
            speedups.append((s, row["name"]))
        kernel = row.get("kernel") or row.get("conv3djit_error") or "n/a"
        lines.append(
            f"| {row['name']} ({row.get('precision', '?')}) | {fmt_ms(row.get('conv3djit_ms'))} | "
            f"{fmt_ms(row.get('cudnn_ms'))} | {'n/a' if s is None else f'{s:.2f}×'} | "
            f"{fmt_err(row.get('conv3djit_rel_l2'), row.get('conv3djit_passed'))} | "
            f"{fmt_err(row.get('cudnn_rel_l2'), row.get('cudnn_passed'))} | {fmt_regs(row)} | `{kernel}` |")
    lines.append("")
    if any(row.get(k) is False for row in run["rows"] for k in ("conv3djit_passed", "cudnn_passed")):
        lines.append("(fails): outside the row's accuracy class (fp32: rel-L2 ≤ 1e-6 and every element within "
                     "atol = rtol = 1e-4; tf32: rel-L2 ≤ 5e-4).")
        lines.append("")
    g = geomean([s for s, _ in speedups])
    recorded = run.get("geomean_speedup")
    if g is not None and recorded is not None and abs(g - recorded) > 1e-6 * recorded:
        print(f"perf_tables: {rel}: geomean of the rows {g:.6f} differs from the file's {recorded:.6f}",
              file=sys.stderr)
    if g is None:
        lines.append("Geometric-mean speedup over cuDNN: n/a (no row where both ran).")
    else:
        low_s, low_name = min(speedups)
        lines.append(f"Geometric-mean speedup over cuDNN: **{g:.2f}×** over {len(speedups)} rows "
                     f"(lowest: {low_name} {low_s:.2f}×).")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fp32", nargs="?", help="fp32-suite JSON (default: newest in bench/results/fp32/)")
    parser.add_argument("tf32", nargs="?", help="tf32-suite JSON (default: newest in bench/results/tf32/)")
    parser.add_argument("--write", metavar="FILE", help="replace FILE's marked section with the output")
    args = parser.parse_args()
    fp32 = args.fp32 or newest("fp32")
    tf32 = args.tf32 or newest("tf32")
    out = ["**fp32 class** (`bench/suite.jsonl`):", ""] + table(fp32) + \
          ["", "**tf32 class** (`bench/suite_tf32.jsonl`):", ""] + table(tf32)
    text = "\n".join(out) + "\n"
    if not args.write:
        sys.stdout.write(text)
        return
    with open(args.write) as f:
        doc = f.read()
    start, stop = doc.find(BEGIN), doc.find(END)
    if start < 0 or stop < start:
        sys.exit(f"perf_tables: {args.write} has no '{BEGIN}' ... '{END}' section")
    doc = doc[:start + len(BEGIN)] + "\n" + text + doc[stop:]
    with open(args.write, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
