"""bf16, fp16, fp32_output and channels_last_3d through conv3djit.torch without a GPU: the CPU
reference of PyTorch's half tensors, the layout each call picks, the fake implementation's dtype and
strides, torch.compile(fullgraph=True) tracing, the op and the drop-in on CPU tensors (cpu_kernel),
autocast, the backward of a float32 output and convert()."""
import pytest

from conftest import needs_torch

pytestmark = needs_torch

torch = pytest.importorskip("torch")
F = torch.nn.functional

import conv3djit  # noqa: E402
import conv3djit.torch as ct  # noqa: E402
from conv3djit.torch import _module, _op  # noqa: E402

CL = torch.channels_last_3d
HALF = [torch.bfloat16, torch.float16]
# rel-L2 of a result rounded to each output type (the classes of docs/design.md).
REL_L2 = {torch.bfloat16: 4e-3, torch.float16: 5e-4, torch.float32: 1e-5}


def _rel_l2(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def _tensors(dtype, memory_format=torch.contiguous_format, shape=(2, 4, 5, 6, 7), wshape=(6, 2, 3, 2, 3),
             device="cpu"):
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(shape, generator=g) * 2 - 1).to(dtype).contiguous(memory_format=memory_format)
    w = (torch.rand(wshape, generator=g) * 2 - 1).to(dtype).contiguous(memory_format=memory_format)
    b = (torch.rand(wshape[0], generator=g) * 2 - 1).to(dtype)
    return x.to(device), w.to(device), b.to(device)


def _expected(x, w, b, **conv):
    return F.conv3d(x.double(), w.double(), None if b is None else b.double(), **conv)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, CL], ids=["ncdhw", "ndhwc"])
@pytest.mark.parametrize("dtype", HALF + [torch.float32], ids=str)
def test_cpu_reference_of_torch_tensors(dtype, memory_format):
    x, w, b = _tensors(dtype, memory_format)
    layout = "ndhwc" if memory_format == CL else "ncdhw"
    d = conv3djit.Conv3dDesc(tuple(x.shape), 6, (3, 2, 3), padding=(1, 0, 1), groups=2, bias=True,
                             dtype=str(dtype).split(".")[1], layout=layout)
    got = torch.from_numpy(conv3djit.reference_conv3d(d, x, w, b))  # bfloat16 through DLPack
    expected = _expected(x, w, b, padding=(1, 0, 1), groups=2)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert got.is_contiguous(memory_format=memory_format)


def test_layout_follows_f_conv3d():
    x, w, _ = _tensors(torch.bfloat16)
    xl, wl = x.contiguous(memory_format=CL), w.contiguous(memory_format=CL)
    assert _op._layout_of(x, w) == "ncdhw" and _op._layout_of(xl, wl) == "ndhwc"
    assert _op._layout_of(xl, w) == "ndhwc" and _op._layout_of(x, wl) == "ndhwc"  # either, as PyTorch
    assert F.conv3d(x.float(), wl.float(), groups=2).is_contiguous(memory_format=CL)  # PyTorch's own rule
    one = torch.rand(2, 1, 1, 1, 1)  # both formats at once: the weight decides
    assert _op._format_of(one) is None
    assert _op._layout_of(one, torch.rand(6, 1, 1, 1, 1)) == "ncdhw"
    assert _op._format_of(xl[:, :, 1:]) == "ndhwc" and _op._format_of(x[..., ::2]) == "ncdhw"  # views


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, CL], ids=["ncdhw", "ndhwc"])
@pytest.mark.parametrize("dtype", HALF + [torch.float32], ids=str)
def test_fake_dtype_and_strides(dtype, memory_format):
    x, w, b = (t.to("meta") for t in _tensors(dtype, memory_format))
    out = ct.conv3d(x, w, b, padding=(1, 0, 1), groups=2)
    # What PyTorch's CUDA convolutions give, and its CPU ones in float32 (its meta kernel, and its CPU
    # float16 path, give contiguous outputs).
    expected = F.conv3d(*_tensors(torch.float32, memory_format), padding=(1, 0, 1), groups=2)
    assert out.device.type == "meta" and out.dtype == dtype
    assert out.shape == expected.shape and out.stride() == expected.stride()
    wide = ct.conv3d(x, w, b, padding=(1, 0, 1), groups=2, fp32_output=True)
    assert wide.dtype == torch.float32 and wide.stride() == out.stride()


def test_compile_fullgraph_traces_bf16_channels_last():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    def f(x, w, b):
        return torch.relu(ct.conv3d(x, w, b, padding=1, groups=2))

    x, w, b = (t.to("meta") for t in _tensors(torch.bfloat16, CL))
    out = torch.compile(f, fullgraph=True, backend=backend)(x, w, b)
    assert out.dtype == torch.bfloat16 and out.is_contiguous(memory_format=CL)
    assert any("conv3djit.conv3d" in str(node.target) for node in graphs[0].graph.nodes)


def test_compile_fullgraph_traces_the_half_module(monkeypatch):
    monkeypatch.setattr(_module, "_served", lambda input, weight: input.device.type == "meta")
    model = torch.nn.Sequential(ct.Conv3d(4, 8, 3, padding=1), torch.nn.ReLU(), ct.Conv3d(8, 8, 1))
    model = model.to(device="meta", dtype=torch.bfloat16)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    x = torch.empty(2, 4, 6, 6, 6, device="meta", dtype=torch.bfloat16).contiguous(memory_format=CL)
    out = torch.compile(model, fullgraph=True, backend=backend)(x)
    assert out.shape == (2, 8, 6, 6, 6) and out.dtype == torch.bfloat16 and out.is_contiguous(memory_format=CL)
    assert sum("conv3djit.conv3d" in str(n.target) for n in graphs[0].graph.nodes) == 2


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_op_on_half_channels_last(dtype, cpu_kernel):
    x, w, b = _tensors(dtype)
    xl = x.contiguous(memory_format=CL)  # the weight stays contiguous: copied into channels_last_3d
    with torch.no_grad():
        out = ct.conv3d(xl, w, b, padding=(1, 0, 1), groups=2, precision=None)  # precision: passed, ignored
    assert out.dtype == dtype and out.is_contiguous(memory_format=CL)
    assert _rel_l2(out, _expected(x, w, b, padding=(1, 0, 1), groups=2)) <= REL_L2[dtype]
    [desc] = cpu_kernel
    assert (desc.dtype, desc.layout, desc.fp32_output) == (str(dtype).split(".")[1], "ndhwc", False)
    assert desc.precision == ct.precision_of(None)


def test_op_fp32_output_and_its_residual(cpu_kernel):
    x, w, b = _tensors(torch.bfloat16, CL)
    expected = _expected(x, w, b, padding=1, groups=2)
    r = torch.rand(expected.shape)  # contiguous: copied into the call's format
    with torch.no_grad():
        out = ct.conv3d(x, w, b, padding=1, groups=2, fp32_output=True, activation="relu", residual=r, beta=0.5)
    assert out.dtype == torch.float32 and out.is_contiguous(memory_format=CL)
    assert _rel_l2(out, torch.relu(expected) + 0.5 * r.double()) <= 1e-6
    assert cpu_kernel[0].fp32_output and cpu_kernel[0].residual
    plain = ("identity", 1.0, 0.01, 0.0, 6.0, 1.0, 1.0)
    assert not _op._desc(x.float(), w.float(), None, [1] * 3, [1] * 3, "explicit", [1] * 3, 2, "fp32", None, plain,
                         "zeros", "ncdhw", True).fp32_output  # no meaning for float32 inputs


def test_op_refuses_other_dtypes(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    x, w, b = _tensors(torch.float64)
    with torch.no_grad(), pytest.raises(conv3djit.Unsupported, match="input: dtype torch.float64: conv3djit serves "
                                                                     "torch.float32, torch.bfloat16 and torch.float16"):
        ct.conv3d(x, w, b, groups=2)
    x, w, b = _tensors(torch.bfloat16, CL)
    r = torch.rand(2, 6, 5, 5, 5)
    with torch.no_grad(), pytest.raises(conv3djit.InvalidArgument, match="residual: dtype torch.bfloat16, but the "
                                                                         "output is torch.float32"):
        ct.conv3d(x, w, b, groups=2, fp32_output=True, residual=r.bfloat16())
    with torch.no_grad(), pytest.raises(conv3djit.InvalidArgument, match="weight: dtype torch.float32, but the "
                                                                         "input is torch.bfloat16"):
        ct.conv3d(x, w.float(), b, groups=2)


def test_gradients_through_half_channels_last(cpu_kernel):
    x, w, b = _tensors(torch.bfloat16, CL)
    for fp32_output in (False, True):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        out = ct.conv3d(xs, ws, bs, padding=1, groups=2, fp32_output=fp32_output)
        assert out.dtype == (torch.float32 if fp32_output else torch.bfloat16)
        grad = torch.rand(out.shape)
        out.backward(grad.to(out.dtype))
        xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
        F.conv3d(xr, wr, br, padding=1, groups=2).backward(grad.bfloat16())  # PyTorch's own, in bf16
        for mine, theirs in ((xs, xr), (ws, wr), (bs, br)):
            assert mine.grad.dtype == torch.bfloat16 and _rel_l2(mine.grad, theirs.grad) <= 1e-2


class _Ctx:
    def __init__(self, needs):
        self.needs_input_grad = needs

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def test_backward_formula_of_a_float32_output():
    x, w, b = _tensors(torch.float16, CL)
    ctx = _Ctx([True, True, True])
    inputs = (x, w, b, [1, 1, 1], [1, 1, 1], "explicit", [1, 1, 1], 2, "fp32", None,
              "identity", 1.0, 0.01, 0.0, 6.0, 1.0, 1.0, "zeros", True)
    _op._setup_context(ctx, inputs, None)
    grad_out = torch.rand(2, 6, 5, 7, 7)
    gx, gw, gb, *rest = _op._backward(ctx, grad_out)
    assert len(rest) == len(inputs) - 3 and all(r is None for r in rest)
    expected = torch.ops.aten.convolution_backward(grad_out.half(), x, w, [6], [1] * 3, [1] * 3, [1] * 3, False,
                                                   [0] * 3, 2, [True, True, True])
    for got, want in zip((gx, gw, gb), expected):
        assert got.dtype == torch.float16
        torch.testing.assert_close(got, want)


def _patch_autocast(monkeypatch, dtype):
    """CUDA autocast as the drop-in reads it, on a machine without CUDA, and CPU tensors that say they
    are on CUDA (cpu_kernel then runs what would launch)."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: self.device.type == "cpu"))
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *device: dtype is not None)
    monkeypatch.setattr(torch, "get_autocast_dtype", lambda device: dtype)


def test_dropin_serves_half_modules_and_mixed_types_only_under_autocast(monkeypatch):
    _patch_autocast(monkeypatch, None)
    t = {dtype: torch.empty(1, dtype=dtype) for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64)}
    assert all(_module._served(t[d], t[d]) for d in (torch.float32, torch.bfloat16, torch.float16))
    assert not _module._served(t[torch.bfloat16], t[torch.float32])  # nn.Conv3d raises PyTorch's error
    assert not _module._served(t[torch.float64], t[torch.float64])
    _patch_autocast(monkeypatch, torch.bfloat16)
    assert _module._served(t[torch.float32], t[torch.float32]) and _module._served(t[torch.float16], t[torch.float32])
    assert not _module._served(t[torch.float64], t[torch.float32])


def test_dropin_under_autocast_runs_in_its_dtype(monkeypatch, cpu_kernel):
    _patch_autocast(monkeypatch, torch.bfloat16)
    conv = ct.Conv3d(4, 6, 3, padding=1, groups=2)
    x = torch.rand(2, 4, 5, 6, 7).contiguous(memory_format=CL)
    with torch.no_grad():
        out = conv(x)
    assert out.dtype == torch.bfloat16 and out.is_contiguous(memory_format=CL)
    [desc] = cpu_kernel
    assert desc.dtype == "bfloat16" and desc.layout == "ndhwc"
    expected = _expected(x.bfloat16(), conv.weight.bfloat16(), conv.bias.bfloat16(), padding=1, groups=2)
    assert _rel_l2(out, expected) <= REL_L2[torch.bfloat16]


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_dropin_half_module_keeps_the_input_format(dtype, monkeypatch, cpu_kernel):
    monkeypatch.setattr(_module, "_served", lambda input, weight: True)
    conv = ct.Conv3d(4, 6, (3, 1, 3), padding=(1, 0, 1), padding_mode="replicate").to(dtype)
    x = torch.rand(2, 4, 5, 6, 7, dtype=dtype)
    for memory_format in (torch.contiguous_format, CL):
        with torch.no_grad():
            out = conv(x.contiguous(memory_format=memory_format))
        assert out.dtype == dtype and out.is_contiguous(memory_format=memory_format)
        expected = F.conv3d(F.pad(x.double(), conv._reversed_padding_repeated_twice, mode="replicate"),
                            conv.weight.double(), conv.bias.double())
        assert _rel_l2(out, expected) <= REL_L2[dtype]
    assert [d.layout for d in cpu_kernel] == ["ncdhw", "ndhwc"]
    assert all(d.padding_mode == "replicate" for d in cpu_kernel)


def test_convert_swaps_half_layers():
    model = torch.nn.Sequential(torch.nn.Conv3d(3, 8, 3).bfloat16(), torch.nn.Conv3d(8, 8, 1).half(),
                                torch.nn.Conv3d(8, 8, 1).double())
    report = ct.convert(model)
    assert report.swapped == ["0", "1"] and list(report.skipped) == ["2"]
    assert "weight dtype torch.float64" in report.skipped["2"]
