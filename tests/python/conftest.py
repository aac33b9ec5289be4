"""Shared fixtures. GPU tests skip without a CUDA device, torch tests without PyTorch; each test that
touches a cache gets its own Engine on a fresh folder."""
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
