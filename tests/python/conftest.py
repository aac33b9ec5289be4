"""Shared fixtures. GPU tests skip without a CUDA device, torch tests without PyTorch; each test that
touches a cache gets its own Engine on a fresh folder; cpu_kernel runs conv3djit.torch's op on CPU
tensors."""
import importlib.util

import pytest

import conv3djit

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_GPU = conv3djit.current_device() is not None

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA device")


@pytest.fixture
def engine(tmp_path):
    """An Engine with its own disk cache folder."""
    folder = tmp_path / "cache"
    return conv3djit.Engine(cache_dir=str(folder))


@pytest.fixture
def cpu_kernel(monkeypatch):
    """The op's implementation on CPU tensors: the description conv3djit.torch builds for the call,
    run by the C++ float64 reference (the GPU kernels' oracle, padding modes and epilogue included).
    Returns the list of the descriptions it ran."""
    import torch
    from conv3djit.torch import _op

    calls = []

    def launch(input, weight, bias, stride, padding, padding_kind, dilation, groups, precision, residual, epilogue,
               padding_mode):
        desc = _op._desc(input, weight, bias, stride, padding, padding_kind, dilation, groups, precision, residual,
                         epilogue, padding_mode)
        calls.append(desc)
        host = [None if t is None else t.detach().float().contiguous().numpy() for t in (input, weight, bias, residual)]
        out = conv3djit.reference_conv3d(desc, *host[:3], residual=host[3])
        return torch.from_numpy(out).to(input.dtype)

    monkeypatch.setattr(_op, "_launch", launch)
    return calls
