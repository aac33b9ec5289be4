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
               padding_mode, fp32_output=False, prepared=None):
        layout = _op._layout_of(input, weight)
        desc = _op._desc(input, weight, bias, stride, padding, padding_kind, dilation, groups, precision, residual,
                         epilogue, padding_mode, layout, fp32_output)
        calls.append(desc)
        memory_format = _op._FORMATS[layout]

        def host(t):
            """The tensor as the description's element type (float32 for other float types; the
            reference reads bfloat16 and float16 as they are), in the layout's memory format."""
            if t is None:
                return None
            t = t.detach()
            if t.dtype not in (torch.bfloat16, torch.float16):
                t = t.float()
            return t.contiguous(memory_format=memory_format) if t.dim() == 5 else t.contiguous()

        out = conv3djit.reference_conv3d(desc, *(host(t) for t in (input, weight, bias)), residual=host(residual))
        dtype = torch.float32 if fp32_output and input.dtype in (torch.bfloat16, torch.float16) else input.dtype
        return torch.from_numpy(out).to(dtype)

    monkeypatch.setattr(_op, "_launch", launch)
    return calls
