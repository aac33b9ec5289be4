#!/usr/bin/env python3
"""Valid nn.Conv3d layers drawn at random (seeded), one manifest line each, on stdout.

Layers a new user might try, toward the edges of what PyTorch accepts: groups, odd channel counts,
kernels of 1 to 7 with strides and dilations up to 4 and 3, extents from 1, every padding mode,
element type, layout and activation, residuals. Every line is valid (the padding modes' rules,
output extents >= 1) and its input at most --max-elements elements. Check a sweep with:

    python3 tools/random_layers.py --seed 7 --count 500 > sweep.jsonl
    conv3djit plan --manifest sweep.jsonl --arch sm_90            # every layer plans
    conv3djit precompile --manifest sweep.jsonl --arch sm_90 -j 8 # compiles, no local memory
    conv3djit verify --manifest sweep.jsonl                       # on a GPU: against float64
"""
import argparse
import json
import random

ACTIVATIONS = ["relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "hardswish", "clamp"]
MODES = ["reflect", "replicate", "circular"]


def valid(extent, kernel, stride, dilation, padding, mode):
    for a in range(3):
        if extent[a] + 2 * padding[a] < dilation[a] * (kernel[a] - 1) + 1:
            return False  # no output along this axis
        if mode == "reflect" and padding[a] >= extent[a]:
            return False  # PyTorch: reflect padding must be below the input's extent
        if mode == "circular" and padding[a] > extent[a]:
            return False  # circular padding wraps at most once
    return True


def layer(rng, name, max_elements):
    while True:
        groups = rng.choice([1, 1, 1, 2, 3, 4, 8, 16])
        c = groups * rng.choice([1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256])
        k = groups * rng.choice([1, 2, 3, 4, 8, 16, 24, 32, 64, 128, 256])
        kernel = [rng.choice([1, 1, 2, 3, 3, 5, 7]) for _ in range(3)]
        stride = [rng.choice([1, 1, 1, 2, 3, 4]) for _ in range(3)]
        dilation = [rng.choice([1, 1, 1, 2, 3]) for _ in range(3)]
        extent = [rng.choice([1, 2, 3, 5, 8, 13, 16, 31, 33, 64]) for _ in range(3)]
        padding = [rng.choice([0, 0, 1, 2, 3]) for _ in range(3)]
        mode = rng.choice(MODES) if rng.random() < 0.3 else "zeros"
        n = rng.choice([1, 1, 2, 3])
        if c > 1024 or k > 1024 or n * c * extent[0] * extent[1] * extent[2] > max_elements:
            continue
        if not valid(extent, kernel, stride, dilation, padding, mode):
            continue
        row = {"name": name, "input": [n, c] + extent, "out_channels": k, "kernel": kernel, "stride": stride,
               "dilation": dilation, "padding": padding, "groups": groups, "bias": rng.random() < 0.5}
        if mode != "zeros":
            row["padding_mode"] = mode
        row["dtype"] = rng.choice(["fp32", "fp32", "bf16", "fp16"])
        row["layout"] = rng.choice(["ncdhw", "ndhwc"])
        if row["dtype"] == "fp32" and rng.random() < 0.4:
            row["precision"] = "tf32"
        if row["dtype"] != "fp32" and rng.random() < 0.2:
            row["fp32_output"] = True
        if rng.random() < 0.4:
            row["activation"] = rng.choice(ACTIVATIONS)
        if rng.random() < 0.25:
            row["residual"] = True
        return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--max-elements", type=int, default=40_000_000, help="the input's elements at most")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"# tools/random_layers.py --seed {args.seed} --count {args.count} --max-elements {args.max_elements}")
    for i in range(args.count):
        print(json.dumps(layer(rng, f"r{i:03d}", args.max_elements)))


if __name__ == "__main__":
    main()
