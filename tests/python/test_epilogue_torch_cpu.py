"""conv3djit.torch's epilogue without a GPU: the arguments that reach the op, the fake
implementation's residual, torch.compile(fullgraph=True) tracing of the fused op (no gradients)
and of the composed form (gradients), and, with the op's implementation run by the C++ CPU
reference (conftest's cpu_kernel), the fused and composed results and the composed form's
gradients against PyTorch."""
import pytest

from conftest import needs_torch

pytestmark = needs_torch

torch = pytest.importorskip("torch")
F = torch.nn.functional

import conv3djit  # noqa: E402
import conv3djit.torch as ct  # noqa: E402
from conv3djit.torch import _op  # noqa: E402

ACTIVATIONS = ["identity", "relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "hardswish",
               "clamp"]
# alpha brings the sums (about +-3) into each activation's bends; gamma and beta are not 1.
SCALARS = dict(alpha=0.5, slope=0.2, clamp_min=-0.5, clamp_max=1.25, gamma=1.5, beta=-0.75)


def _activation64(name, s):
    """Each activation as PyTorch's float64 function, written out here."""
    return {
        "identity": lambda v: v,
        "relu": torch.relu,
        "leaky_relu": lambda v: F.leaky_relu(v, s["slope"]),
        "gelu": lambda v: 0.5 * v * (1 + torch.erf(v / 2 ** 0.5)),
        "gelu_tanh": lambda v: 0.5 * v * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (v + 0.044715 * v ** 3))),
        "silu": lambda v: v * torch.sigmoid(v),
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "hardswish": lambda v: v * torch.clamp(v + 3, 0, 6) / 6,
        "clamp": lambda v: torch.clamp(v, s["clamp_min"], s["clamp_max"]),
    }[name]


def _tensors(seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 3, 5, 6, 7, generator=g, dtype=dtype) * 2 - 1
    w = torch.rand(4, 3, 3, 3, 3, generator=g, dtype=dtype) * 2 - 1
    b = torch.rand(4, generator=g, dtype=dtype) * 2 - 1
    r = torch.rand(2, 4, 5, 6, 7, generator=g, dtype=dtype) * 2 - 1
    return [t.to(device) for t in (x, w, b, r)]


def _expected(x, w, b, r, name, s):
    """The formula in float64, through F.conv3d: differentiable, independent of conv3djit."""
    y = _activation64(name, s)(s["alpha"] * F.conv3d(x, w, None, 1, 1) + b.view(1, -1, 1, 1, 1)) * s["gamma"]
    return y if r is None else y + s["beta"] * r


def _rel_l2(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def test_epilogue_arguments_reach_the_op(monkeypatch):
    calls = []
    monkeypatch.setattr(_op, "_launch", lambda *args: calls.append(args) or "direct")
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    x, w, r = (torch.empty(s, device="meta") for s in [(1, 2, 4, 4, 4), (2, 2, 1, 1, 1), (1, 2, 4, 4, 4)])
    with torch.no_grad():
        assert ct.conv3d(x, w, activation="GELU", alpha=2, residual=r, beta=0.5, precision="fp32") == "direct"
    assert calls[0][9] is r and calls[0][10] == ("gelu", 2.0, 0.01, 0.0, 6.0, 1.0, 0.5)


def test_unknown_activation_and_invalid_scalars():
    x, w, b, r = _tensors()
    with pytest.raises(conv3djit.InvalidArgument, match="activation = 'swish': expected one of 'identity', 'relu'"):
        ct.conv3d(x, w, b, activation="swish")
    # The composed form (gradients) refuses what the fused kernel refuses, before running anything.
    w.requires_grad_()
    with pytest.raises(conv3djit.InvalidArgument, match="epilogue.alpha = inf: must be finite"):
        ct.conv3d(x, w, b, activation="relu", alpha=float("inf"))
    with pytest.raises(conv3djit.InvalidArgument, match="the clamp's bounds are reversed"):
        ct.conv3d(x, w, b, activation="clamp", clamp_min=1, clamp_max=0)


def test_fake_shapes_with_residual():
    x, w, b, r = (t.to("meta") for t in _tensors())
    out = ct.conv3d(x, w, b, padding=1, activation="silu", residual=r, precision="fp32")
    assert out.shape == r.shape and out.device.type == "meta"
    with pytest.raises(RuntimeError, match=r"residual: shape \(2, 4, 5, 6, 6\), but the output is"):
        ct.conv3d(x, w, b, padding=1, activation="silu", residual=r[..., :6], precision="fp32")


def _traced(fn, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    out = torch.compile(fn, fullgraph=True, backend=backend)(*args)
    [graph] = graphs
    return out, list(graph.graph.nodes)


def _conv_nodes(nodes):
    return [n for n in nodes if "conv3djit.conv3d" in str(n.target)]


def test_compile_fullgraph_traces_the_fused_op():
    def f(x, w, b, r):
        return ct.conv3d(x, w, b, padding=1, activation="silu", alpha=0.5, residual=r, precision="tf32")

    x, w, b, r = (t.to("meta") for t in _tensors())
    with torch.no_grad():
        out, nodes = _traced(f, x, w, b, r)
    assert out.shape == (2, 4, 5, 6, 7)
    [conv] = _conv_nodes(nodes)
    assert "silu" in conv.args and 0.5 in conv.args  # one op, the epilogue fused
    assert not any("silu" in str(n.target) for n in nodes if n is not conv)


def test_compile_fullgraph_traces_the_composed_form_for_gradients():
    def f(x, w, b, r):
        return ct.conv3d(x, w, b, padding=1, activation="silu", alpha=0.5, residual=r, precision="fp32")

    x, w, b, r = (t.to("meta") for t in _tensors())
    w.requires_grad_()
    out, nodes = _traced(f, x, w, b, r)
    assert out.shape == (2, 4, 5, 6, 7) and out.requires_grad
    [conv] = _conv_nodes(nodes)
    assert "silu" not in conv.args and conv.args[2] is None  # the plain convolution; bias after alpha
    assert any("silu" in str(n.target) for n in nodes)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_fused_and_composed_forms_agree_with_pytorch(name, cpu_kernel):
    x, w, b, r = _tensors(seed=3)
    expected = _expected(*(t.double() for t in (x, w, b, r)), name, SCALARS)
    with torch.no_grad():
        fused = ct.conv3d(x, w, b, padding=1, activation=name, residual=r, precision="fp32", **SCALARS)
    assert cpu_kernel[-1].activation == name and cpu_kernel[-1].residual and cpu_kernel[-1].beta == SCALARS["beta"]
    assert _rel_l2(fused, expected) <= 1e-6  # the C++ reference's float64 epilogue, rounded once

    leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    composed = ct.conv3d(leaves[0], leaves[1], leaves[2], padding=1, activation=name, residual=leaves[3],
                         precision="fp32", **SCALARS)
    plain = cpu_kernel[-1]
    assert plain.activation == "identity" and not plain.residual and not plain.bias  # alpha != 1: bias after it
    assert _rel_l2(composed, expected) <= 1e-5
    grad = torch.rand(composed.shape, generator=torch.Generator().manual_seed(5))
    composed.backward(grad)
    leaves64 = [t.double().requires_grad_() for t in (x, w, b, r)]
    _expected(*leaves64, name, SCALARS).backward(grad.double())
    for got, ref in zip(leaves, leaves64):
        assert _rel_l2(got.grad, ref.grad) <= 1e-5


def test_composed_form_with_alpha_one_passes_the_bias_to_the_convolution(cpu_kernel):
    x, w, b, r = _tensors()
    w.requires_grad_()
    out = ct.conv3d(x, w, b, padding=1, activation="relu", precision="fp32")
    assert cpu_kernel[-1].bias and cpu_kernel[-1].activation == "identity"
    s = dict(SCALARS, alpha=1.0, gamma=1.0)
    assert _rel_l2(out, _expected(x.double(), w.double(), b.double(), None, "relu", s)) <= 1e-5


def test_op_refuses_a_backward_through_the_fused_epilogue(cpu_kernel):
    x, w, b, r = _tensors()
    args = (x, w.requires_grad_(), b, [1, 1, 1], [1, 1, 1], "explicit", [1, 1, 1], 1, "fp32", None, "relu")
    with pytest.raises(conv3djit.Unsupported, match="no backward through a fused epilogue"):
        torch.ops.conv3djit.conv3d.default(*args)
    with torch.no_grad():
        assert torch.ops.conv3djit.conv3d.default(*args).shape == (2, 4, 5, 6, 7)


def test_opcheck_with_residual_and_activation(cpu_kernel):
    x, w, b, r = _tensors()
    args = (x, w, b, [1, 1, 1], [1, 1, 1], "explicit", [1, 1, 1], 1, "fp32", r, "hardswish", 0.5, 0.01, 0.0, 6.0,
            2.0, -1.0)
    torch.library.opcheck(torch.ops.conv3djit.conv3d.default, args)
