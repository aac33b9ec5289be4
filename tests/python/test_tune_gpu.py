"""Tuning on a CUDA device: Engine.tune on small layers (tf32 NCDHW, bf16 NDHWC), the winner accurate
and timed, answered from its record the second time and timed again with retune; a second Engine on
the same cache folder runs the winner without tuning or compiling, within the class of float64
F.conv3d; tune_mode='first_use' tunes once; an Engine without a disk cache keeps its record in
memory; stream objects; the refusals (a forced configuration, a capturing stream)."""
import pytest

from conftest import needs_gpu, needs_torch

pytestmark = [needs_gpu, needs_torch]

torch = pytest.importorskip("torch")
F = torch.nn.functional

import conv3djit  # noqa: E402
from conv3djit import Conv3dDesc  # noqa: E402

FORMATS = {"ncdhw": torch.contiguous_format, "ndhwc": torch.channels_last_3d}

CASES = {
    "tf32_ncdhw": Conv3dDesc((1, 16, 16, 16, 16), 32, 3, padding=1, precision="tf32"),
    "bf16_ndhwc": Conv3dDesc((1, 16, 16, 16, 16), 32, 3, padding=1, bias=True, dtype="bf16", layout="ndhwc"),
}


def _inputs(desc):
    """Uniform values in [-1, 1) of the description's type and layout; an output poisoned with NaN."""
    dtype, memory_format = getattr(torch, desc.dtype), FORMATS[desc.layout]

    def fresh(shape):
        return torch.empty(shape, device="cuda").uniform_(-1, 1).to(dtype).contiguous(memory_format=memory_format)

    x, w = fresh(desc.input_shape), fresh(desc.weight_shape)
    b = torch.empty(desc.out_channels, device="cuda").uniform_(-1, 1).to(dtype) if desc.bias else None
    out = torch.full(desc.output_shape, float("nan"), device="cuda", dtype=getattr(torch, desc.output_dtype))
    return x, w, b, out.contiguous(memory_format=memory_format)


def _run_and_check(engine, desc):
    """Runs desc on `engine` and checks the output against F.conv3d in float64 of the same inputs."""
    x, w, b, out = _inputs(desc)
    engine.run(desc, x, w, b, out=out)
    torch.cuda.synchronize()
    ref = F.conv3d(x.double(), w.double(), None if b is None else b.double(), desc.stride, desc.padding,
                   desc.dilation, desc.groups)
    result = conv3djit.compare(out.cpu(), ref.cpu().numpy(), conv3djit.tolerance(desc))
    assert result.passed, f"{desc}: {result}"


def _check_tuned(result, desc, max_candidates):
    assert not result.from_record and result.description == conv3djit.describe(desc) and result.device
    assert 1 <= len(result.candidates) <= max_candidates and result.tuning_ms > 0
    heuristic = result.candidates[0]
    assert heuristic.heuristic and not any(c.heuristic for c in result.candidates[1:])
    assert heuristic.median_ms is not None  # the planner's choice is always timed
    assert result.heuristic_ms == heuristic.median_ms and result.tuned_unix > 0
    best = result.best
    assert 0 <= result.winner < len(result.candidates) and best.config == result.candidates[result.winner].config
    assert best.accurate and best.error == "" and best.median_ms > 0
    assert best.rel_l2 is not None and 0 <= best.rel_l2 <= conv3djit.tolerance(desc).rel_l2
    for c in result.candidates:
        assert c.kernel and c.config
        if c.median_ms is None:
            assert c.error, c  # not timed: it says why
        else:
            assert c.ready_ms is not None and c.ready_ms > 0  # its kernels were made ready first
            if c.accurate:
                assert best.median_ms <= c.median_ms
    assert f"median_ms={best.median_ms:.4g}" in repr(result) and repr(best).startswith("TunedCandidate(config=")


@pytest.mark.parametrize("name", CASES)
def test_tuned_record_serves_a_fresh_engine(name, tmp_path):
    desc = CASES[name]
    cache = str(tmp_path / "cache")
    engine = conv3djit.Engine(cache_dir=cache)
    result = engine.tune(desc)
    _check_tuned(result, desc, 6)
    assert result.stored and result.store_problem == ""
    stats = engine.stats()
    assert stats.tunes == 1 and stats.tuning_ms > 0

    again = engine.tune(desc)  # the record answers
    assert again.from_record and again.tuning_ms == 0 and again.stored and again.winner == 0
    assert again.best.config == result.best.config and again.best.kernel == result.best.kernel
    assert again.best.rel_l2 is None and "rel_l2=None" in repr(again.best)
    assert again.heuristic_ms == pytest.approx(result.heuristic_ms, rel=1e-3) and again.tuned_unix == result.tuned_unix
    assert engine.stats().tunes == 1

    fresh = conv3djit.Engine(cache_dir=cache)
    _run_and_check(fresh, desc)
    stats = fresh.stats()
    assert stats.tunes == 0 and stats.compiles == 0, stats
    assert stats.tuned_plans >= 1 and stats.disk_hits >= 1, stats
    assert fresh.kernel_for(desc) == result.best.kernel


def test_retune_times_again(tmp_path):
    desc = CASES["tf32_ncdhw"]
    engine = conv3djit.Engine(cache_dir=str(tmp_path / "cache"), max_candidates=2, tune_runs=3)
    first = engine.tune(desc, torch.cuda.Stream())  # a stream object: its device
    _check_tuned(first, desc, 2)
    assert engine.tune(desc).from_record
    retuned = conv3djit.tune(desc, retune=True, stream=torch.cuda.current_stream().cuda_stream, engine=engine)
    _check_tuned(retuned, desc, 2)
    assert engine.stats().tunes == 2
    same = conv3djit.tune(input_shape=(1, 16, 16, 16, 16), out_channels=32, kernel_size=3, padding=1,
                          precision="tf32", engine=engine)  # the keyword form
    assert same.from_record and same.best.config == retuned.best.config


def test_first_use_tunes_once(tmp_path):
    desc = Conv3dDesc((1, 8, 8, 8, 8), 16, 3, padding=1)
    cache = str(tmp_path / "cache")
    engine = conv3djit.Engine(cache_dir=cache, tune_mode="first_use", max_candidates=3, tune_runs=3)
    _run_and_check(engine, desc)
    _run_and_check(engine, desc)
    stats = engine.stats()
    assert stats.tunes == 1 and stats.tuning_ms > 0, stats
    later = conv3djit.Engine(cache_dir=cache, tune_mode="first_use")
    _run_and_check(later, desc)
    assert later.stats().tunes == 0 and later.stats().tuned_plans >= 1 and later.stats().compiles == 0
    plain = conv3djit.Engine(cache_dir=str(tmp_path / "other"), tune_mode="off")
    _run_and_check(plain, desc)
    assert plain.stats().tunes == 0 and plain.stats().tuned_plans == 0


def test_memory_only_engine_keeps_the_record(tmp_path):
    desc = CASES["tf32_ncdhw"]
    engine = conv3djit.Engine(cache_dir=str(tmp_path / "never"), disk_cache=False, max_candidates=2, tune_runs=3)
    result = engine.tune(desc)
    _check_tuned(result, desc, 2)
    assert not result.stored and "no disk cache" in result.store_problem and "store_problem=" in repr(result)
    again = engine.tune(desc)
    assert again.from_record and not again.stored and again.best.config == result.best.config
    _run_and_check(engine, desc)
    assert engine.stats().tunes == 1 and engine.stats().tuned_plans >= 1
    assert not (tmp_path / "never").exists()


def test_refusals(tmp_path):
    desc = CASES["tf32_ncdhw"]
    config = conv3djit.Engine(cache_dir=str(tmp_path / "a"), max_candidates=1).tune(desc).best.config
    forced = conv3djit.Engine(cache_dir=str(tmp_path / "b"), kernel_config=config)
    with pytest.raises(conv3djit.InvalidArgument, match="forced configuration"):
        forced.tune(desc)
    engine = conv3djit.Engine(cache_dir=str(tmp_path / "c"))
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        with pytest.raises(conv3djit.InvalidArgument, match="capturing a CUDA graph"):
            engine.tune(desc, stream)
    assert engine.stats().tunes == 0
