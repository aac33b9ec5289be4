"""conv3djit.torch without a GPU: the fake implementation's shapes, torch.compile(fullgraph=True)
tracing on meta tensors, the autograd formula on CPU tensors, the Conv3d drop-in's constructor,
state_dict and CPU fallback, convert(), the tf32 switch and manifests of recorded shapes."""
import pytest

from conftest import needs_torch

pytestmark = needs_torch

torch = pytest.importorskip("torch")
F = torch.nn.functional

import conv3djit  # noqa: E402
import conv3djit.torch as ct  # noqa: E402
from conv3djit.torch import _module, _op  # noqa: E402

# The op's epilogue arguments for the plain convolution: activation, alpha, slope, clamp_min,
# clamp_max, gamma, beta.
PLAIN_EPILOGUE = ("identity", 1.0, 0.01, 0.0, 6.0, 1.0, 1.0)

CASES = [  # (input, weight, bias, stride, padding, dilation, groups)
    ((2, 4, 9, 10, 11), (6, 4, 3, 3, 3), True, 1, 1, 1, 1),
    ((1, 6, 8, 9, 7), (6, 2, 2, 3, 4), False, (1, 2, 1), (0, 1, 2), (2, 1, 1), 3),
    ((2, 3, 7, 8, 9), (4, 3, 4, 2, 3), True, 1, "same", (1, 2, 1), 1),
    ((1, 4, 9, 9, 9), (4, 1, 3, 3, 3), False, 2, "valid", 1, 4),
    ((1, 2, 5, 6, 7), (3, 2, 1, 1, 1), True, 1, 0, 1, 1),
]


def _tensors(case, device="cpu", dtype=torch.float64):
    shape, wshape, bias, *_ = case
    g = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=g, dtype=dtype) * 2 - 1
    w = torch.rand(wshape, generator=g, dtype=dtype) * 2 - 1
    b = torch.rand(wshape[0], generator=g, dtype=dtype) if bias else None
    return x.to(device), w.to(device), None if b is None else b.to(device)


@pytest.mark.parametrize("case", CASES)
def test_fake_shapes_match_pytorch(case):
    x, w, b = _tensors(case)
    _, _, _, stride, padding, dilation, groups = case
    expected = F.conv3d(x, w, b, stride, padding, dilation, groups).shape
    meta = [None if t is None else t.to("meta") for t in (x, w, b)]
    out = ct.conv3d(*meta, stride, padding, dilation, groups)
    assert out.shape == expected and out.device.type == "meta"


def test_compile_fullgraph_traces_the_op():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    def f(x, w, b):
        return torch.relu(ct.conv3d(x, w, b, padding="same", precision="tf32")) * 2

    x, w, b = (t.to("meta") for t in _tensors(CASES[0], dtype=torch.float32))
    out = torch.compile(f, fullgraph=True, backend=backend)(x, w, b)
    assert out.shape == (2, 6, 9, 10, 11)
    assert any("conv3djit.conv3d" in str(node.target) for node in graphs[0].graph.nodes)


def test_compile_fullgraph_traces_the_module(monkeypatch):
    # Meta tensors stand in for CUDA ones: the drop-in takes its conv3djit path for them.
    monkeypatch.setattr(_module, "_served", lambda input, weight: input.device.type == "meta")
    model = torch.nn.Sequential(ct.Conv3d(4, 8, 3, padding=1), torch.nn.ReLU(),
                                ct.Conv3d(8, 8, 3, padding=1, padding_mode="replicate", precision="fp32")).to("meta")
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    out = torch.compile(model, fullgraph=True, backend=backend)(torch.empty(2, 4, 6, 6, 6, device="meta"))
    assert out.shape == (2, 8, 6, 6, 6)
    assert sum("conv3djit.conv3d" in str(n.target) for n in graphs[0].graph.nodes) == 2


def test_compile_dynamic_shapes():
    def f(x, w):
        return ct.conv3d(x, w, None, 2, 1, precision="fp32")

    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend="eager")
    w = torch.empty(4, 3, 3, 3, 3, device="meta")
    for shape in [(1, 3, 8, 9, 10), (2, 3, 11, 6, 7)]:
        expected = F.conv3d(torch.empty(shape), torch.empty(4, 3, 3, 3, 3), None, 2, 1).shape
        assert compiled(torch.empty(shape, device="meta"), w).shape == expected


class _Ctx:
    def __init__(self, needs):
        self.needs_input_grad = needs

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


@pytest.mark.parametrize("case", CASES)
def test_backward_formula_matches_autograd(case):
    x, w, b = _tensors(case)
    _, _, _, stride, padding, dilation, groups = case
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    bs = None if b is None else b.clone().requires_grad_()
    out = F.conv3d(xs, ws, bs, stride, padding, dilation, groups)
    grad_out = torch.rand_like(out)
    out.backward(grad_out)

    kind, amounts = (padding, [0, 0, 0]) if isinstance(padding, str) else ("explicit", _op._triple(padding, "p"))
    ctx = _Ctx([True, True, b is not None])
    inputs = (x, w, b, _op._triple(stride, "s"), amounts, kind, _op._triple(dilation, "d"), groups, "fp32", None,
              *PLAIN_EPILOGUE, "zeros")
    _op._setup_context(ctx, inputs, None)
    gx, gw, gb, *rest = _op._backward(ctx, grad_out)
    torch.testing.assert_close(gx, xs.grad)
    torch.testing.assert_close(gw, ws.grad)
    if b is not None:
        torch.testing.assert_close(gb, bs.grad)
    assert all(r is None for r in rest)


def test_precision_follows_cudnn_allow_tf32():
    saved = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        assert ct.precision_of(None) == "tf32"
        torch.backends.cudnn.allow_tf32 = False
        assert ct.precision_of(None) == "fp32"
        assert ct.precision_of("tf32") == "tf32"
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    with pytest.raises(conv3djit.InvalidArgument, match="precision = 'bf16'"):
        ct.precision_of("bf16")


def test_op_refuses_cpu_tensors_clearly():
    x, w, b = _tensors(CASES[0], dtype=torch.float32)
    with pytest.raises(conv3djit.Unsupported, match="input: on cpu: conv3djit runs on CUDA tensors"):
        ct.conv3d(x, w, b, padding=1)
    with pytest.raises(conv3djit.InvalidArgument, match="padding = 'full'"):
        ct.conv3d(x, w, b, padding="full")


def test_dropin_constructor_and_state_dict():
    ref = torch.nn.Conv3d(4, 6, (3, 1, 2), stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2,
                          bias=True, padding_mode="reflect")
    mine = ct.Conv3d(4, 6, (3, 1, 2), stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2, bias=True,
                     padding_mode="reflect", precision="tf32")
    assert isinstance(mine, torch.nn.Conv3d)
    assert mine.state_dict().keys() == ref.state_dict().keys()
    mine.load_state_dict(ref.state_dict())
    ref.load_state_dict(mine.state_dict())
    assert "precision='tf32'" in repr(mine)
    x = torch.rand(2, 4, 7, 8, 9)
    torch.testing.assert_close(mine(x), ref(x))  # CPU: nn.Conv3d's forward
    torch.testing.assert_close(mine(x[0]), ref(x[0]))  # unbatched


def test_convert_swaps_plain_conv3d_in_place():
    class Custom(torch.nn.Conv3d):
        pass

    model = torch.nn.Sequential(torch.nn.Conv3d(3, 8, 3), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Conv3d(8, 8, 1), Custom(8, 8, 1)),
                                torch.nn.Conv3d(8, 8, 1).double())
    weight = model[0].weight
    keys = model.state_dict().keys()
    report = ct.convert(model, precision="fp32")
    assert report.swapped == ["0", "2.0"]
    assert set(report.skipped) == {"2.1", "3"}
    assert "subclasses nn.Conv3d" in report.skipped["2.1"] and "torch.float64" in report.skipped["3"]
    assert type(model[0]) is ct.Conv3d and model[0].weight is weight and model[0].precision == "fp32"
    assert model.state_dict().keys() == keys
    assert "2 Conv3d swapped, 2 left" in str(report)
    again = ct.convert(model)
    assert again.swapped == [] and again.skipped["0"] == "already a conv3djit.torch.Conv3d"
    with pytest.raises(conv3djit.InvalidArgument):
        ct.convert(torch.nn.Conv3d(1, 1, 1), precision="fast")


def test_prepared_weights_option():
    import copy
    import pickle

    mine = ct.Conv3d(4, 6, 3, prepared_weights=True)
    assert mine.prepared_weights and "prepared_weights=True" in repr(mine)
    assert "prepared_weights" not in repr(ct.Conv3d(4, 6, 3))
    x = torch.rand(1, 4, 5, 6, 7)
    torch.testing.assert_close(mine(x), F.conv3d(x, mine.weight, mine.bias))  # CPU: nn.Conv3d's forward
    for other in (copy.deepcopy(mine), pickle.loads(pickle.dumps(mine))):  # the cache starts empty
        assert other.prepared_weights and isinstance(other._prepared, ct.PreparedCache)
        assert other._prepared._prepared is None
    model = torch.nn.Sequential(torch.nn.Conv3d(3, 8, 3))
    ct.convert(model, prepared_weights=True)
    assert model[0].prepared_weights and isinstance(model[0]._prepared, ct.PreparedCache)


def test_recorder_writes_a_manifest(tmp_path):
    desc = conv3djit.Conv3dDesc((1, 4, 8, 8, 8), 8, 3, padding=1, bias=True, precision="tf32")
    with ct.record_shapes() as recorder:
        _op._recorder.add(desc)
        _op._recorder.add(desc)
    assert _op._recorder is None
    assert recorder.descs == [(None, desc)]
    path = tmp_path / "model.jsonl"
    assert recorder.write(str(path)) == 1
    assert conv3djit.read_manifest(str(path)) == [(conv3djit.describe(desc), desc)]


def test_dispatcher_only_where_needed(monkeypatch):
    calls = []
    monkeypatch.setattr(_op, "_launch", lambda *args: calls.append(args) or "direct")
    x = torch.empty(1, 2, 4, 4, 4, device="meta")
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    w = torch.nn.Parameter(torch.empty(2, 2, 1, 1, 1, device="meta"))
    with torch.no_grad():
        assert ct.conv3d(x, w, precision="fp32") == "direct"  # a plain inference call
    assert len(calls) == 1 and calls[0][3:] == ([1, 1, 1], [0, 0, 0], "explicit", [1, 1, 1], 1, "fp32", None,
                                                PLAIN_EPILOGUE, "zeros", False, None)
    assert not _op._direct(x, w, None)  # the weight requires grad
    assert _op._direct(x, w.detach(), None)
    r = torch.empty(1, 2, 4, 4, 4, device="meta")
    assert _op._direct(x, w.detach(), None, r)
    assert not _op._direct(x, w.detach(), None, r.requires_grad_())
    assert not _op._direct(x.requires_grad_(), w.detach(), None)


def test_arrays_api_reads_tensors_that_require_grad():
    conv = torch.nn.Conv3d(3, 4, 3)
    with pytest.raises(conv3djit.Unsupported, match="input: on cpu"):  # not a DLPack export error
        conv3djit.conv3d(torch.rand(1, 3, 6, 6, 6), conv.weight, conv.bias, out=torch.empty(1, 4, 4, 4, 4))
