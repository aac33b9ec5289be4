"""Tuning without a GPU: the Engine's tuning options and their checks, tune_mode and $CONV3DJIT_TUNE,
the tuning counters of EngineStats, the result classes, and Engine.tune / conv3djit.tune refusing
before anything runs (a wrong description, a wrong stream, no device)."""
import pytest

import conv3djit
from conv3djit import Conv3dDesc

LAYER = dict(input_shape=(1, 16, 16, 16, 16), out_channels=32, kernel_size=3, padding=1)


def test_tuning_options_accepted(tmp_path):
    for mode in (None, "off", "first_use"):
        conv3djit.Engine(cache_dir=str(tmp_path), tune_mode=mode)
    conv3djit.Engine(cache_dir=str(tmp_path), max_candidates=1, tune_budget_ms=0.5, tune_runs=1)
    conv3djit.Engine(cache_dir=str(tmp_path), max_candidates=64, tune_budget_ms=float("inf"), tune_runs=100)


@pytest.mark.parametrize("mode", ["always", "on", "", "First_Use"])
def test_unknown_tune_mode_names_the_value(mode):
    with pytest.raises(conv3djit.InvalidArgument, match=f"tune_mode = '{mode}': expected None, 'off' or 'first_use'"):
        conv3djit.Engine(tune_mode=mode)


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(max_candidates=0), r"max_candidates = 0: expected an int >= 1"),
    (dict(max_candidates=-3), r"max_candidates = -3: expected an int >= 1"),
    (dict(tune_budget_ms=0), r"tune_budget_ms = 0: expected a number > 0"),
    (dict(tune_budget_ms=-10.5), r"tune_budget_ms = -10.5: expected a number > 0"),
    (dict(tune_budget_ms=float("nan")), r"tune_budget_ms = nan: expected a number > 0"),
    (dict(tune_runs=0), r"tune_runs = 0: expected an int >= 1"),
])
def test_tuning_option_checks(kwargs, pattern):
    with pytest.raises(conv3djit.InvalidArgument, match=pattern):
        conv3djit.Engine(**kwargs)


def test_tune_mode_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CONV3DJIT_TUNE", "first_use")
    conv3djit.Engine(cache_dir=str(tmp_path))
    monkeypatch.setenv("CONV3DJIT_TUNE", "sometimes")
    with pytest.raises(conv3djit.InvalidArgument, match="CONV3DJIT_TUNE = 'sometimes'"):
        conv3djit.Engine(cache_dir=str(tmp_path))
    conv3djit.Engine(cache_dir=str(tmp_path), tune_mode="off")  # the argument beats the environment


def test_fresh_engine_has_tuned_nothing(engine):
    stats = engine.stats()
    assert (stats.tunes, stats.tuning_ms, stats.tuned_plans) == (0, 0.0, 0)
    assert isinstance(stats.tunes, int) and isinstance(stats.tuning_ms, float) and isinstance(stats.tuned_plans, int)
    assert "tunes=0, tuning_ms=0.0, tuned_plans=0" in repr(stats)


def test_precompile_tunes_nothing(engine):
    engine.precompile(Conv3dDesc(**LAYER), "sm_90")
    assert engine.stats().tunes == 0 and engine.stats().tuned_plans == 0


def test_result_classes_are_exported():
    for name in ("TuneResult", "TunedCandidate", "tune"):
        assert name in conv3djit.__all__ and hasattr(conv3djit, name)
    with pytest.raises(TypeError):
        conv3djit.TuneResult()  # made by Engine.tune only
    for field in ("description", "device", "candidates", "winner", "best", "heuristic_ms", "tuning_ms", "tuned_unix",
                  "from_record", "stored", "store_problem"):
        assert hasattr(conv3djit.TuneResult, field)
    for field in ("kernel", "config", "heuristic", "median_ms", "rel_l2", "accurate", "error"):
        assert hasattr(conv3djit.TunedCandidate, field)


def test_tune_checks_the_description_first(engine):
    with pytest.raises(conv3djit.InvalidArgument, match=r"stride\[D\] = 0"):
        engine.tune(Conv3dDesc(**dict(LAYER, padding=0, stride=(0, 1, 1))))
    with pytest.raises(conv3djit.InvalidArgument, match="not both"):
        conv3djit.tune(Conv3dDesc(**LAYER), groups=1, engine=engine)
    with pytest.raises(conv3djit.InvalidArgument, match="stream: expected None, an int handle or a stream object"):
        engine.tune(Conv3dDesc(**LAYER), "fast")


def test_tune_without_a_device_raises_no_device(engine):
    if conv3djit.current_device() is not None:
        pytest.skip("a CUDA device is present")
    desc = Conv3dDesc(**LAYER)
    with pytest.raises(conv3djit.NoDevice):
        engine.tune(desc)
    with pytest.raises(conv3djit.NoDevice):
        engine.tune(desc, 0, retune=True)
    with pytest.raises(conv3djit.NoDevice):
        conv3djit.tune(**LAYER, precision="tf32", engine=engine)
    assert engine.stats().tunes == 0
