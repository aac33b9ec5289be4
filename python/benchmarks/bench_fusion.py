"""Times conv3djit's fused epilogue against PyTorch's eager sequence on layers of real networks with
what comes before and after them: one conv3djit call (padding per side and padding modes in the
kernel's loads; bias, activation, scaling, residual in its store) against F.pad where the layer
needs it, cuDNN's convolution (F.conv3d, cudnn.benchmark=True, the row's allow_tf32) and PyTorch's
pointwise ops, in one process on the same tensors and stream: median of CUDA-event timings, L2
flushed before each run, the row's calls taking turns in each round. Each row also times conv3djit's plain convolution of the same layer (its
padding mode kept), so fused / plain is what the epilogue costs, and gives both results' relative
L2 error against the float64 composition (of the same bf16 / fp16 values for the half classes,
whose tensors, output and residual included, are in that type and NCDHW).

    PYTHONPATH=build/python-site python3 python/benchmarks/bench_fusion.py [--runs 20]
        [--precision fp32 tf32 bf16 fp16] [--json OUT.json]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

import conv3djit
from conv3djit import Conv3dDesc
from timing import interleaved_medians, rel_l2


@dataclass
class Row:
    name: str
    desc: dict  # Conv3dDesc's arguments, the epilogue's included, without precision or dtype
    pytorch: Callable  # (x, w, b, r) -> the layer as PyTorch's eager ops; in float64, the reference


ROWS = [
    # A video VAE's causal decoder conv: two frames of padding before in time, none after.
    Row("vae_causal_conv_silu",
        dict(input_shape=(1, 128, 8, 64, 64), out_channels=128, kernel_size=3, padding_before=(2, 1, 1),
             padding_after=(0, 1, 1), bias=True, activation="silu"),
        lambda x, w, b, r: F.silu(F.conv3d(F.pad(x, (1, 1, 1, 1, 2, 0)), w, b))),
    # HunyuanVideo's VAE conv: causal in time like the one above, its padding replicating the edge.
    Row("hunyuan_causal_replicate_silu",
        dict(input_shape=(1, 128, 9, 64, 64), out_channels=128, kernel_size=3, padding_before=(2, 1, 1),
             padding_after=(0, 1, 1), padding_mode="replicate", bias=True, activation="silu"),
        lambda x, w, b, r: F.silu(F.conv3d(F.pad(x, (1, 1, 1, 1, 2, 0), mode="replicate"), w, b))),
    # nn.Conv3d(padding=1, padding_mode='reflect'): PyTorch pads a copy of the input first.
    Row("reflect_conv_relu",
        dict(input_shape=(1, 64, 16, 64, 64), out_channels=64, kernel_size=3, padding=1, padding_mode="reflect",
             bias=True, activation="relu"),
        lambda x, w, b, r: F.relu(F.conv3d(F.pad(x, (1,) * 6, mode="reflect"), w, b))),
    # A 3D ResNet block's second conv: act(conv + bias), then the shortcut.
    Row("resnet3d_block_relu_residual",
        dict(input_shape=(2, 64, 16, 56, 56), out_channels=64, kernel_size=3, padding=1, bias=True,
             activation="relu", residual=True),
        lambda x, w, b, r: F.relu(F.conv3d(x, w, b, padding=1)) + r),
    Row("conv_gelu",
        dict(input_shape=(1, 256, 8, 28, 28), out_channels=256, kernel_size=3, padding=1, bias=True,
             activation="gelu"),
        lambda x, w, b, r: F.gelu(F.conv3d(x, w, b, padding=1))),
    Row("conv_scale_sigmoid_scale",
        dict(input_shape=(2, 64, 16, 32, 32), out_channels=64, kernel_size=3, padding=1, activation="sigmoid",
             alpha=0.5, gamma=2.0),
        lambda x, w, b, r: torch.sigmoid(F.conv3d(x, w, padding=1) * 0.5) * 2.0),
    # The suite's compute-bound layers with surroundings: there the epilogue's cost against the
    # plain convolution shows (the fused/plain column).
    Row("reference_silu_residual",
        dict(input_shape=(16, 3, 64, 64, 64), out_channels=64, kernel_size=(3, 5, 7), bias=True,
             activation="silu", residual=True),
        lambda x, w, b, r: F.silu(F.conv3d(x, w, b)) + r),
    Row("c3d_conv3b_relu_residual",
        dict(input_shape=(8, 256, 8, 28, 28), out_channels=256, kernel_size=3, padding=1, bias=True,
             activation="relu", residual=True),
        lambda x, w, b, r: F.relu(F.conv3d(x, w, b, padding=1)) + r),
    Row("pointwise_silu_residual",
        dict(input_shape=(1, 512, 8, 28, 28), out_channels=512, kernel_size=1, bias=True, activation="silu",
             residual=True),
        lambda x, w, b, r: F.silu(F.conv3d(x, w, b)) + r),
]

# The epilogue's arguments of Conv3dDesc: without them a row's description is its plain convolution.
EPILOGUE = ("activation", "alpha", "slope", "clamp_min", "clamp_max", "gamma", "residual", "beta")


# A row's class: the float32 classes, or a half type for every tensor.
TORCH_TYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def descs_of(row, precision):
    """The row's fused description and its plain convolution's (the same layer, bias kept)."""
    typed = {"dtype": precision} if precision in ("bf16", "fp16") else {"precision": precision}
    fused = Conv3dDesc(**row.desc, **typed)
    plain = Conv3dDesc(**{k: v for k, v in row.desc.items() if k not in EPILOGUE}, **typed)
    return fused, plain


def bench_row(row, precision, runs, flush):
    fused, plain = descs_of(row, precision)
    kind = dict(device="cuda", dtype=TORCH_TYPES[precision])
    x = torch.empty(fused.input_shape, **kind).uniform_(-1, 1)
    # Weights scaled by 1 / sqrt(fan-in), as initialisations do: the sums land in the activations'
    # bends rather than where sigmoid and SiLU saturate.
    fan_in = fused.weight_shape[1] * fused.weight_shape[2] * fused.weight_shape[3] * fused.weight_shape[4]
    w = (torch.empty(fused.weight_shape, device="cuda").uniform_(-1, 1) / fan_in ** 0.5).to(kind["dtype"])
    b = torch.empty(fused.out_channels, **kind).uniform_(-1, 1) if fused.bias else None
    r = torch.empty(fused.output_shape, **kind).uniform_(-1, 1) if fused.residual else None
    engine = conv3djit.default_engine()
    stream = torch.cuda.current_stream().cuda_stream

    def conv3djit_call(desc, residual):
        out = torch.empty(desc.output_shape, **kind)
        engine.run(desc, x, w, b, out=out, residual=residual, stream=stream)
        return out

    calls = {"pytorch": lambda: row.pytorch(x, w, b, r), "fused": lambda: conv3djit_call(fused, r),
             "plain": lambda: conv3djit_call(plain, None)}
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    with torch.no_grad():
        ref64 = row.pytorch(*(None if t is None else t.double() for t in (x, w, b, r)))
        result = {"name": row.name, "precision": precision, "desc": str(fused),
                  "kernel": engine.kernel_for(fused), "plain_kernel": engine.kernel_for(plain)}
        for label, fn in calls.items():
            out = fn()  # warm-up: compile / load, cuDNN's benchmark search
            torch.cuda.synchronize()
            if label != "plain":
                result[f"{label}_rel_l2"] = rel_l2(out, ref64)
        del ref64
        result.update({f"{label}_ms": ms for label, ms in interleaved_medians(calls, runs, flush).items()})
    result["speedup"] = result["pytorch_ms"] / result["fused_ms"]
    result["fused_over_plain"] = result["fused_ms"] / result["plain_ms"]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--precision", nargs="+", choices=list(TORCH_TYPES), default=["fp32", "tf32"])
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    cases = [(row, precision) for precision in args.precision for row in ROWS]

    def precompile(desc):  # compiles release the GIL: all of them at once, before any timing
        try:
            conv3djit.precompile(desc)
        except conv3djit.Error:
            pass  # the row reports it
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(precompile, [d for row, precision in cases for d in descs_of(row, precision)]))

    print(f"{'layer':30} {'class':5} {'PyTorch ms':>10} {'fused ms':>9} {'speedup':>7} {'plain ms':>9} "
          f"{'fused/plain':>11}  rel-L2 PyTorch / conv3djit")
    rows = []
    for row, precision in cases:
        try:
            rows.append(bench_row(row, precision, args.runs, flush))
        except (conv3djit.Error, RuntimeError) as e:  # one failing row must not hide the others
            rows.append({"name": row.name, "precision": precision, "error": str(e)})
        r = rows[-1]
        if "error" in r:
            print(f"{r['name']:30} {precision:5} ERROR {r['error'][:100]}", flush=True)
        else:
            print(f"{r['name']:30} {precision:5} {r['pytorch_ms']:10.3f} {r['fused_ms']:9.3f} {r['speedup']:6.2f}x "
                  f"{r['plain_ms']:9.3f} {r['fused_over_plain']:11.3f}  {r['pytorch_rel_l2']:.1e} / "
                  f"{r['fused_rel_l2']:.1e}", flush=True)
    done = [r for r in rows if "error" not in r]
    geomean = {}
    for precision in args.precision:
        speedups = [r["speedup"] for r in done if r["precision"] == precision]
        if speedups:
            geomean[precision] = statistics.geometric_mean(speedups)
            print(f"geomean speedup {precision}: {geomean[precision]:.2f}x over {len(speedups)} layers")
    if done:
        geomean["all"] = statistics.geometric_mean([r["speedup"] for r in done])
        print(f"geomean speedup: {geomean['all']:.2f}x over {len(done)} rows")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "cudnn": torch.backends.cudnn.version(), "conv3djit": conv3djit.__version__,
                       "runs": args.runs, "rows": rows, "geomean_speedup": geomean}, f, indent=1)


if __name__ == "__main__":
    main()
