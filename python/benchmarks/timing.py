"""CUDA-event timing shared by the benchmarks."""
import statistics

import torch


def interleaved_medians(calls, runs, flush):
    """Each call's median time in ms over `runs` rounds in which the calls take turns, the L2
    flushed before each: a slow spell of the card (single rows ran 1.3-3x slow in one run of
    three on an H100) then falls on every call of a row alike instead of on one of them."""
    times = {label: [] for label in calls}
    for _ in range(runs):
        for label, fn in calls.items():
            flush.zero_()  # evicts the L2 (60 MB on an H200) and the inputs with it
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[label].append(start.elapsed_time(end))
    return {label: statistics.median(t) for label, t in times.items()}


def rel_l2(got, ref):
    """Relative L2 error of got against the float64 ref."""
    return ((got.double() - ref).norm() / ref.norm()).item()
