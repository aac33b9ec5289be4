"""Times conv3djit.torch.Conv3d against nn.Conv3d (cuDNN, cudnn.benchmark=True) on a suite, in one
process, on the same tensors and stream: median of CUDA-event timings, L2 flushed before each run,
the two calls taking turns in each round.
Then the per-call host overhead on a tiny layer (GPU time negligible): drop-in, the raw extension
call, and nn.Conv3d, each as the median of many back-to-back calls.

    python3 python/benchmarks/bench_dropin.py [--manifest bench/suite.jsonl ...] [--json OUT.json]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import time

import torch
from torch import nn

import conv3djit
import conv3djit.torch as ct
from timing import interleaved_medians, rel_l2


def bench_layer(name, desc, runs, flush):
    precision = desc.precision
    ref_conv = nn.Conv3d(desc.in_channels, desc.out_channels, desc.kernel_size, desc.stride, desc.padding,
                         desc.dilation, desc.groups, desc.bias).cuda()
    mine = ct.Conv3d(desc.in_channels, desc.out_channels, desc.kernel_size, desc.stride, desc.padding,
                     desc.dilation, desc.groups, desc.bias, precision=precision).cuda()
    mine.load_state_dict(ref_conv.state_dict())
    x = torch.empty(desc.input_shape, device="cuda").uniform_(-1, 1)
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    with torch.no_grad():
        ref64 = nn.functional.conv3d(x.double(), ref_conv.weight.double(),
                                     None if ref_conv.bias is None else ref_conv.bias.double(), desc.stride,
                                     desc.padding, desc.dilation, desc.groups)
        row = {"name": name, "precision": precision, "desc": str(desc),
               "kernel": conv3djit.default_engine().kernel_for(desc)}
        calls = {"conv3djit": lambda: mine(x), "cudnn": lambda: ref_conv(x)}
        for label, fn in calls.items():
            out = fn()  # warm-up: compile / load, cuDNN's benchmark search
            torch.cuda.synchronize()
            row[f"{label}_rel_l2"] = rel_l2(out, ref64)
        del ref64
        row.update({f"{label}_ms": ms for label, ms in interleaved_medians(calls, runs, flush).items()})
    row["speedup"] = row["cudnn_ms"] / row["conv3djit_ms"]
    return row


def host_overhead_us(calls):
    """Median over rounds of the host time per call, back to back, on a layer whose GPU work is a
    few microseconds: what each path costs the CPU."""
    x = torch.rand(1, 4, 4, 4, 4, device="cuda")
    ref_conv = nn.Conv3d(4, 4, 1).cuda()
    mine = ct.Conv3d(4, 4, 1, precision="fp32").cuda()
    desc = conv3djit.Conv3dDesc(tuple(x.shape), 4, 1, bias=True)
    out = torch.empty(desc.output_shape, device="cuda")
    engine = conv3djit.default_engine()
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = (x.data_ptr(), mine.weight.data_ptr(), mine.bias.data_ptr(), out.data_ptr())
    paths = {
        "nn.Conv3d": lambda: ref_conv(x),
        "conv3djit.torch.Conv3d": lambda: mine(x),
        "conv3djit.torch.conv3d": lambda: ct.conv3d(x, mine.weight, mine.bias, precision="fp32"),
        "Engine.run_pointers": lambda: engine.run_pointers(desc, *ptrs[:3], ptrs[3], stream),
        "conv3djit.conv3d (DLPack)": lambda: conv3djit.conv3d(x, mine.weight, mine.bias, out=out),
    }
    result = {}
    with torch.no_grad():
        for name, fn in paths.items():
            for _ in range(200):
                fn()
            rounds = []
            for _ in range(7):
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                rounds.append((time.perf_counter() - t) / calls * 1e6)
            torch.cuda.synchronize()
            result[name] = statistics.median(rounds)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", nargs="+", default=["bench/suite.jsonl", "bench/suite_tf32.jsonl"])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    layers = [layer for path in args.manifest for layer in conv3djit.read_manifest(path)]

    def precompile(desc):  # compiles release the GIL: all of them at once, before any timing
        try:
            conv3djit.precompile(desc)
        except conv3djit.Error:
            pass  # the layer's row reports it
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(precompile, [desc for _, desc in layers]))
    rows = []
    for name, desc in layers:
        try:
            rows.append(bench_layer(name, desc, args.runs, flush))
        except (conv3djit.Error, RuntimeError) as e:  # one failing layer must not hide the others
            rows.append({"name": name, "precision": desc.precision, "error": str(e)})
        r = rows[-1]
        if "error" in r:
            print(f"{name:22} {r['precision']:5} ERROR {r['error'][:100]}", flush=True)
        else:
            print(f"{name:22} {r['precision']:5} conv3djit {r['conv3djit_ms']:8.3f} ms  cuDNN {r['cudnn_ms']:8.3f} ms"
                  f"  x{r['speedup']:5.2f}  rel-L2 {r['conv3djit_rel_l2']:.1e} / {r['cudnn_rel_l2']:.1e}"
                  f"  {r['kernel'].split(' ')[0]}", flush=True)
    overhead = host_overhead_us(args.calls)
    for name, us in overhead.items():
        print(f"host time per call  {name:28} {us:7.2f} us")
    print(f"drop-in overhead over nn.Conv3d: {overhead['conv3djit.torch.Conv3d'] - overhead['nn.Conv3d']:+.2f} us/call")
    done = [r for r in rows if "error" not in r]
    for precision in ("fp32", "tf32"):
        speedups = [r["speedup"] for r in done if r["precision"] == precision]
        if speedups:
            print(f"geomean speedup {precision}: {statistics.geometric_mean(speedups):.2f}x over {len(speedups)} layers")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "cudnn": torch.backends.cudnn.version(), "conv3djit": conv3djit.__version__,
                       "rows": rows, "host_us_per_call": overhead}, f, indent=1)


if __name__ == "__main__":
    main()
