"""conv3djit.torch's padding modes without a GPU: the mode that reaches the op, names and errors,
the fake implementation's shapes, torch.compile(fullgraph=True) tracing (one op without
gradients; F.pad and the unpadded op with them), convert(), and, with the op's implementation run
by the C++ CPU reference (conftest's cpu_kernel), the drop-in Conv3d and conv3d() in each mode
against nn.Conv3d and PyTorch's float64 composition, forward and gradients."""
import copy

import pytest

from conftest import needs_torch

pytestmark = needs_torch

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

import conv3djit  # noqa: E402
import conv3djit.torch as ct  # noqa: E402
from conv3djit.torch import _module, _op  # noqa: E402

MODES = ["reflect", "replicate", "circular"]
# nn.Conv3d's padding arguments: (name, kernel_size, padding, the output's spatial shape of a 5 x 6 x 7 input).
PADDINGS = [
    ("symmetric", 3, 1, (5, 6, 7)),
    ("per_axis", (3, 1, 3), (2, 0, 3), (7, 6, 11)),
    ("same_even_kernel", (2, 4, 3), "same", (5, 6, 7)),
    ("valid", 3, "valid", (3, 4, 5)),
]


def _padding_id(case):
    return case[0]


def _rel_l2(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def _input(shape=(2, 3, 5, 6, 7), seed=0):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def _layer(kernel_size, padding, mode, seed=1):
    torch.manual_seed(seed)
    return nn.Conv3d(3, 4, kernel_size, padding=padding, padding_mode=mode, bias=True)


@pytest.fixture
def served_on_cpu(monkeypatch):
    """The drop-in takes its conv3djit path for float32 CPU tensors too (cpu_kernel runs them)."""
    monkeypatch.setattr(_module, "_served", lambda input, weight: input.dtype == torch.float32)


def test_padding_mode_reaches_the_op(monkeypatch):
    calls = []
    monkeypatch.setattr(_op, "_launch", lambda *args: calls.append(args) or "direct")
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    x, w = torch.empty(1, 2, 4, 4, 4, device="meta"), torch.empty(2, 2, 3, 3, 3, device="meta")
    with torch.no_grad():
        assert ct.conv3d(x, w, padding=1, padding_mode="Reflect", precision="fp32") == "direct"
    assert calls[0][4:6] == ([1, 1, 1], "explicit") and calls[0][11] == "reflect"


def test_unknown_padding_mode():
    x, w = _input(), torch.rand(4, 3, 3, 3, 3)
    with pytest.raises(conv3djit.InvalidArgument,
                       match="padding_mode = 'mirror': expected one of 'zeros', 'reflect', 'replicate', 'circular'"):
        ct.conv3d(x, w, padding=1, padding_mode="mirror")


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_too_much_padding_is_conv3djit_error(grad, cpu_kernel):
    # Refused by conv3djit's own checks with their message, also where F.pad would run.
    x, w = _input(), torch.rand(4, 3, 3, 3, 3).requires_grad_(grad)
    with pytest.raises(conv3djit.InvalidArgument, match="padding before D = 5: padding_mode='reflect' needs padding <"):
        ct.conv3d(x, w, padding=(5, 1, 1), padding_mode="reflect")
    with pytest.raises(conv3djit.InvalidArgument, match="padding before W = 8: padding_mode='circular' needs padding"):
        ct.conv3d(x, w, padding=(1, 1, 8), padding_mode="circular")
    assert not cpu_kernel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", PADDINGS, ids=_padding_id)
def test_fake_shapes(mode, case):
    _, kernel_size, padding, spatial = case
    layer = _layer(kernel_size, padding, mode)
    x, w, b = (t.detach().to("meta") for t in (_input(), layer.weight, layer.bias))
    for requires_grad in (False, True):
        out = ct.conv3d(x, w.requires_grad_(requires_grad), b, padding=padding, padding_mode=mode, precision="fp32")
        assert out.shape == (2, 4, *spatial) and out.device.type == "meta"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", PADDINGS, ids=_padding_id)
def test_dropin_forward_in_the_kernel(mode, case, cpu_kernel, served_on_cpu):
    _, kernel_size, padding, spatial = case
    ref = _layer(kernel_size, padding, mode)
    mine = copy.deepcopy(ref)
    assert ct.convert(mine, precision="fp32").swapped == [""]
    x = _input()
    with torch.no_grad():
        out = mine(x)
        expected = ref.double()(x.double())
    [desc] = cpu_kernel
    # The unpadded input and the mode reach the kernel: no padded copy.
    assert desc.input_shape == tuple(x.shape) and desc.padding_mode == mode
    assert out.shape == (2, 4, *spatial) and _rel_l2(out, expected) <= 1e-6
    with torch.no_grad():
        assert _rel_l2(mine(x[0]), expected[0]) <= 1e-6  # unbatched


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", PADDINGS, ids=_padding_id)
def test_dropin_gradients_match_nn_conv3d(mode, case, cpu_kernel, served_on_cpu):
    _, kernel_size, padding, _ = case
    ref = _layer(kernel_size, padding, mode).double()
    mine = copy.deepcopy(ref).float()
    ct.convert(mine, precision="fp32")
    x = _input(seed=2)
    x_mine, x_ref = x.clone().requires_grad_(), x.double().requires_grad_()
    out = mine(x_mine)
    expected = ref(x_ref)
    # With autograd: F.pad in the mode, then the unpadded convolution.
    [desc] = cpu_kernel
    p = ref._reversed_padding_repeated_twice  # F.pad's order: W, H, D
    assert desc.padding_mode == "zeros" and desc.padding == (0, 0, 0)
    assert desc.input_shape == (2, 3, 5 + p[4] + p[5], 6 + p[2] + p[3], 7 + p[0] + p[1])
    assert _rel_l2(out, expected) <= 1e-6
    grad = torch.rand(out.shape, generator=torch.Generator().manual_seed(3))
    out.backward(grad)
    expected.backward(grad.double())
    assert _rel_l2(x_mine.grad, x_ref.grad) <= 1e-5
    assert _rel_l2(mine.weight.grad, ref.weight.grad) <= 1e-5
    assert _rel_l2(mine.bias.grad, ref.bias.grad) <= 1e-5


@pytest.mark.parametrize("mode", MODES)
def test_functional_with_an_epilogue(mode, cpu_kernel):
    g = torch.Generator().manual_seed(4)
    x, w, b = _input(), torch.rand(4, 3, 3, 3, 3, generator=g) * 2 - 1, torch.rand(4, generator=g) * 2 - 1
    r = torch.rand(2, 4, 5, 8, 7, generator=g) * 2 - 1
    pads = (1, 1, 2, 2, 1, 1)  # F.pad's order: W, H, D

    def expected(x, w, b, r):
        return F.silu(0.5 * F.conv3d(F.pad(x, pads, mode=mode), w) + b.view(1, -1, 1, 1, 1)) - r

    ref = expected(*(t.double() for t in (x, w, b, r)))
    args = dict(padding=(1, 2, 1), padding_mode=mode, activation="silu", alpha=0.5, residual=r, beta=-1.0,
                precision="fp32")
    with torch.no_grad():
        fused = ct.conv3d(x, w, b, **args)
    assert cpu_kernel[-1].padding_mode == mode and cpu_kernel[-1].activation == "silu"
    assert _rel_l2(fused, ref) <= 1e-6

    leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    composed = ct.conv3d(*leaves[:3], **{**args, "residual": leaves[3]})
    assert cpu_kernel[-1].padding_mode == "zeros" and cpu_kernel[-1].activation == "identity"
    assert _rel_l2(composed, ref) <= 1e-5
    grad = torch.rand(composed.shape, generator=g)
    composed.backward(grad)
    leaves64 = [t.double().requires_grad_() for t in (x, w, b, r)]
    expected(*leaves64).backward(grad.double())
    for got, want in zip(leaves, leaves64):
        assert _rel_l2(got.grad, want.grad) <= 1e-5


def test_op_refuses_a_backward_through_a_padding_mode(cpu_kernel):
    x, w = _input(), torch.rand(4, 3, 3, 3, 3)
    args = (x, w.requires_grad_(), None, [1, 1, 1], [1, 1, 1], "explicit", [1, 1, 1], 1, "fp32")
    with pytest.raises(conv3djit.Unsupported, match="no backward through padding_mode = 'replicate'"):
        torch.ops.conv3djit.conv3d.default(*args, padding_mode="replicate")
    with torch.no_grad():
        assert torch.ops.conv3djit.conv3d.default(*args, padding_mode="replicate").shape == (2, 4, 5, 6, 7)


@pytest.mark.parametrize("mode", MODES)
def test_opcheck_with_a_padding_mode(mode, cpu_kernel):
    x, w, b = _input(), torch.rand(4, 3, 3, 3, 3), torch.rand(4)
    args = (x, w, b, [1, 1, 1], [1, 2, 1], "explicit", [1, 1, 1], 1, "fp32", None, "relu", 1.0, 0.01, 0.0, 6.0,
            1.0, 1.0, mode)
    torch.library.opcheck(torch.ops.conv3djit.conv3d.default, args)


def test_convert_swaps_every_padding_mode():
    model = nn.Sequential(*(nn.Conv3d(3, 3, 3, padding=1, padding_mode=mode) for mode in ["zeros", *MODES]))
    report = ct.convert(model)
    assert report.swapped == ["0", "1", "2", "3"] and not report.skipped
    assert [m.padding_mode for m in model] == ["zeros", *MODES]


def _traced(model, x):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    out = torch.compile(model, fullgraph=True, backend=backend)(x)
    [graph] = graphs
    return out, list(graph.graph.nodes)


@pytest.mark.parametrize("mode", MODES)
def test_compile_fullgraph_traces_the_mode_into_the_op(mode, monkeypatch):
    # Meta tensors stand in for CUDA ones: the drop-in takes its conv3djit path for them.
    monkeypatch.setattr(_module, "_served", lambda input, weight: input.device.type == "meta")
    model = ct.Conv3d(4, 8, 3, padding="same", padding_mode=mode, precision="fp32").to("meta")
    x = torch.empty(2, 4, 6, 6, 6, device="meta")
    with torch.no_grad():
        out, nodes = _traced(model, x)
    assert out.shape == (2, 8, 6, 6, 6)
    [conv] = [n for n in nodes if "conv3djit.conv3d" in str(n.target)]
    assert mode in conv.args and not any("pad" in str(n.target) for n in nodes)  # one op, no F.pad
    torch._dynamo.reset()
    # With gradients: F.pad in the mode, then the op without padding.
    out, nodes = _traced(model, x)
    assert out.shape == (2, 8, 6, 6, 6) and out.requires_grad
    [conv] = [n for n in nodes if "conv3djit.conv3d" in str(n.target)]
    assert mode not in conv.args and any("pad" in str(n.target) for n in nodes)
