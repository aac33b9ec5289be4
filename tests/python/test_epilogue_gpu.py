"""The epilogue on a CUDA device: every activation with and without a residual in both accuracy
classes against PyTorch's float64 composition (arrays, the GPU reference, the torch op), the
residual in place (out is the residual) and as the block's own input, wrong residuals that must
write nothing; conv3djit.torch with an epilogue: opcheck, torch.compile(fullgraph=True), CUDA graph
capture, the warm-up manifest, and gradients and a training step against PyTorch."""
import concurrent.futures
import copy
import os
import re

import pytest

from conftest import needs_gpu, needs_torch

pytestmark = [needs_gpu, needs_torch]

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

import conv3djit  # noqa: E402
import conv3djit.torch as ct  # noqa: E402
from conv3djit import Conv3dDesc  # noqa: E402

ACTIVATIONS = ["identity", "relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "hardswish",
               "clamp"]
# The sums of SHAPE are about +-5: alpha brings them into each activation's bends (hardswish's
# +-3, the clamp's bounds); gamma and beta are not 1.
SCALARS = dict(alpha=0.25, slope=0.2, clamp_min=-0.5, clamp_max=1.25, gamma=1.5, beta=-0.75)
SHAPE = dict(input_shape=(2, 8, 6, 9, 10), out_channels=16, kernel_size=3, padding=1, bias=True)


def _epilogues():
    descs = [Conv3dDesc(**SHAPE, precision=precision, activation=name, residual=residual, **SCALARS)
             for precision in ("fp32", "tf32") for residual in (False, True) for name in ACTIVATIONS]
    # Without scaling (alpha = gamma = 1) the kernel has no multiplies: another compiled variant.
    descs += [Conv3dDesc(**SHAPE, activation=name, residual=True) for name in ("relu", "silu", "hardswish")]
    return descs


def _id(desc):
    scaled = "" if desc.alpha == desc.gamma == 1 else "-scaled"
    return f"{desc.activation}{scaled}-{'residual' if desc.residual else 'plain'}-{desc.precision}"


EPILOGUES = _epilogues()


def _kwargs(desc):
    """conv3d()'s epilogue arguments of a description."""
    return dict(activation=desc.activation, alpha=desc.alpha, slope=desc.slope, clamp_min=desc.clamp_min,
                clamp_max=desc.clamp_max, gamma=desc.gamma, beta=desc.beta)


def _inputs(desc):
    """Fresh uniform values in [-1, 1), a residual of the output's shape, an output poisoned with NaN."""
    x = torch.empty(desc.input_shape, device="cuda").uniform_(-1, 1)
    w = torch.empty(desc.weight_shape, device="cuda").uniform_(-1, 1)
    b = torch.empty(desc.out_channels, device="cuda").uniform_(-1, 1) if desc.bias else None
    r = torch.empty(desc.output_shape, device="cuda").uniform_(-1, 1)
    out = torch.full(desc.output_shape, float("nan"), device="cuda")
    return x, w, b, r, out


def _activation64(name, slope, clamp_min, clamp_max):
    return {"identity": lambda v: v, "relu": F.relu, "leaky_relu": lambda v: F.leaky_relu(v, slope), "gelu": F.gelu,
            "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "silu": F.silu, "sigmoid": torch.sigmoid,
            "tanh": torch.tanh, "hardswish": F.hardswish,
            "clamp": lambda v: torch.clamp(v, clamp_min, clamp_max)}[name]


def _reference(desc, x, w, b, r):
    """act(alpha * conv + bias) * gamma + beta * residual in float64: F.conv3d (independent of
    conv3djit) and PyTorch's activations. Differentiable."""
    v = desc.alpha * F.conv3d(x.double(), w.double(), None, desc.stride, desc.padding, desc.dilation, desc.groups)
    if b is not None:
        v = v + b.double().view(1, -1, 1, 1, 1)
    v = _activation64(desc.activation, desc.slope, desc.clamp_min, desc.clamp_max)(v) * desc.gamma
    return v if r is None else v + desc.beta * r.double()


def _check(desc, out, ref):
    result = conv3djit.compare(out.detach().cpu().numpy(), ref.detach().cpu().numpy(),
                               conv3djit.tolerance(desc.precision))
    assert result.passed, f"{desc}: {result}"


def rel_l2(got, ref):
    got, ref = got.double(), ref.double()
    return ((got - ref).norm() / ref.norm()).item()


@pytest.fixture(scope="module")
def epilogues_compiled():
    """Compiles every variant's kernels in parallel (compiles release the GIL); a failure is left
    to the test of its variant."""
    def precompile(desc):
        try:
            conv3djit.precompile(desc)
        except conv3djit.Error:
            pass

    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(precompile, EPILOGUES))


@pytest.mark.parametrize("desc", EPILOGUES, ids=_id)
def test_arrays_against_float64(desc, epilogues_compiled):
    x, w, b, r, out = _inputs(desc)
    residual = r if desc.residual else None
    got = conv3djit.conv3d(x, w, b, desc.stride, desc.padding, desc.dilation, desc.groups, out=out,
                           precision=desc.precision, residual=residual, **_kwargs(desc))
    assert got is out
    _check(desc, out, _reference(desc, x, w, b, residual))


@pytest.mark.parametrize("desc", EPILOGUES, ids=_id)
def test_torch_op_against_float64(desc, epilogues_compiled):
    x, w, b, r, _ = _inputs(desc)
    residual = r if desc.residual else None
    with torch.no_grad():
        got = ct.conv3d(x, w, b, desc.stride, desc.padding, desc.dilation, desc.groups, precision=desc.precision,
                        residual=residual, **_kwargs(desc))
    _check(desc, got, _reference(desc, x, w, b, residual))


@pytest.mark.parametrize("name", ["gelu", "clamp"])
def test_gpu_reference_with_residual(name):
    desc = Conv3dDesc(**SHAPE, activation=name, residual=True, **SCALARS)
    x, w, b, r, _ = _inputs(desc)
    ref = torch.full(desc.output_shape, float("nan"), device="cuda", dtype=torch.float64)
    conv3djit.default_engine().run_reference(desc, x, w, b, out=ref, residual=r)
    torch.testing.assert_close(ref, _reference(desc, x, w, b, r))


@pytest.mark.parametrize("path", ["conv3d", "run", "run_pointers"])
def test_residual_in_place(path):
    desc = Conv3dDesc(**SHAPE, activation="silu", residual=True, **SCALARS)
    x, w, b, r, _ = _inputs(desc)
    expected = _reference(desc, x, w, b, r)
    out = r.clone()  # read, then written, by the thread of each output
    engine = conv3djit.default_engine()
    if path == "conv3d":
        assert conv3djit.conv3d(x, w, b, padding=1, out=out, residual=out, **_kwargs(desc)) is out
    elif path == "run":
        engine.run(desc, x, w, b, out=out, residual=out)
    else:
        engine.run_pointers(desc, x.data_ptr(), w.data_ptr(), b.data_ptr(), out.data_ptr(),
                            torch.cuda.current_stream().cuda_stream, residual=out.data_ptr())
    _check(desc, out, expected)


def test_residual_is_the_input():
    # A ResNet block's identity shortcut: the output has the input's shape, and the residual is the input.
    desc = Conv3dDesc((2, 8, 6, 9, 10), 8, 3, padding=1, bias=True, activation="relu", residual=True)
    x, w, b, _, out = _inputs(desc)
    conv3djit.conv3d(x, w, b, padding=1, out=out, residual=x, activation="relu")
    _check(desc, out, _reference(desc, x, w, b, x))
    with torch.no_grad():
        _check(desc, ct.conv3d(x, w, b, padding=1, activation="relu", residual=x, precision="fp32"),
               _reference(desc, x, w, b, x))


def test_wrong_residuals_raise_and_write_nothing():
    desc = Conv3dDesc(**SHAPE, activation="relu", residual=True)
    x, w, b, r, out = _inputs(desc)
    n = r.numel()
    pool = torch.full((n + 64,), float("nan"), device="cuda")  # out and a residual 64 elements into it
    shifted_out, shifted_residual = pool[:n].view(r.shape), pool[64:].view(r.shape)
    both = torch.empty(x.numel() + n, device="cuda")  # the input and a residual over its last 64 elements
    x_view = both[:x.numel()].view(x.shape)
    x_view.copy_(x)
    overlapping_input = both[x.numel() - 64:x.numel() - 64 + n].view(r.shape)
    engine = conv3djit.default_engine()
    cases = [
        (conv3djit.InvalidArgument, "residual: the description has residual = True, but no residual array was given",
         dict(residual=None)),
        (conv3djit.InvalidArgument, "residual: shape (2, 16, 6, 9, 9) does not match the description",
         dict(residual=r[..., :9])),
        (conv3djit.InvalidArgument, "residual: dtype float64, but the call needs float32", dict(residual=r.double())),
        (conv3djit.Unsupported, "residual: on cpu", dict(residual=r.cpu())),
        (conv3djit.Unsupported, "residual: not contiguous",
         dict(residual=r.transpose(3, 4).contiguous().transpose(3, 4))),
        (conv3djit.InvalidArgument, "out: overlaps residual in memory (the residual may be out itself, but not part",
         dict(out=shifted_out, residual=shifted_residual)),
        (conv3djit.InvalidArgument, "residual: overlaps input in memory (it may be input itself, but not part of it)",
         dict(input=x_view, residual=overlapping_input)),
    ]
    for cls, message, change in cases:
        args = dict(input=x, residual=r, out=out)
        args.update(change)
        with pytest.raises(cls, match=re.escape(message)):
            engine.run(desc, args["input"], w, b, out=args["out"], residual=args["residual"])
        assert not conv3djit.validate(desc, args["input"], w, b, args["out"], residual=args["residual"])
        torch.cuda.synchronize()
        assert torch.isnan(out).all() and torch.isnan(pool).all(), f"{message}: a refused call wrote"
    with pytest.raises(conv3djit.InvalidArgument, match="residual: shape"):
        ct.conv3d(x, w, b, padding=1, activation="relu", residual=r[:, :8], precision="fp32")
    with pytest.raises(conv3djit.InvalidArgument, match="residual: dtype torch.float64, but the output is torch.float32"):
        ct.conv3d(x, w, b, padding=1, activation="relu", residual=r.double(), precision="fp32")


def test_torch_op_copies_a_strided_residual():
    desc = Conv3dDesc(**SHAPE, activation="tanh", residual=True, **SCALARS)
    x, w, b, r, _ = _inputs(desc)
    with torch.no_grad():
        got = ct.conv3d(x, w, b, padding=1, residual=r.contiguous(memory_format=torch.channels_last_3d),
                        precision="fp32", **_kwargs(desc))
    _check(desc, got, _reference(desc, x, w, b, r))


def test_opcheck_fused():
    x, w, b, r, _ = _inputs(Conv3dDesc(**SHAPE, residual=True))
    args = (x, w, b, [1, 1, 1], [1, 1, 1], "explicit", [1, 1, 1], 1, "fp32", r, "silu", 0.5, 0.01, 0.0, 6.0, 2.0,
            -1.0)
    torch.library.opcheck(torch.ops.conv3djit.conv3d.default, args)


class Block(nn.Module):
    """A 3D ResNet block through conv3djit.torch: conv + bias + ReLU + the shortcut, then a
    pointwise conv + bias + SiLU, scaled (alpha, gamma)."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv3d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv3d(channels, channels, 1)

    def forward(self, x):
        y = ct.conv3d(x, self.conv1.weight, self.conv1.bias, padding=1, activation="relu", residual=x,
                      precision="fp32")
        return ct.conv3d(y, self.conv2.weight, self.conv2.bias, activation="silu", alpha=0.5, gamma=2.0,
                         precision="fp32")


def _pytorch_block(block, x):
    """The same block as PyTorch's own sequence (cuDNN convolutions, then the pointwise ops)."""
    y = F.relu(F.conv3d(x, block.conv1.weight, block.conv1.bias, padding=1)) + x
    return F.silu(0.5 * F.conv3d(y, block.conv2.weight) + block.conv2.bias.view(1, -1, 1, 1, 1)) * 2.0


@pytest.fixture
def no_tf32():
    """PyTorch's own convolutions (the backward, references) in full float32."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


def test_compile_fullgraph_with_activation(no_tf32):
    torch.manual_seed(0)
    block = Block(8).cuda()
    x = torch.empty(2, 8, 6, 10, 10, device="cuda").uniform_(-1, 1)
    with torch.no_grad():  # the fused op in the graph
        eager = block(x)
        compiled = torch.compile(block, fullgraph=True)(x)
        assert rel_l2(compiled, eager) <= 1e-6
        assert rel_l2(eager, _pytorch_block(copy.deepcopy(block).double(), x.double())) <= 1e-5
    # With gradients: the composed form in the graph, forward and backward.
    mine = copy.deepcopy(block)
    out = torch.compile(mine, fullgraph=True)(x)
    assert rel_l2(out, eager) <= 1e-5
    out.backward(torch.ones_like(out))
    _pytorch_block(block, x).backward(torch.ones_like(out))
    for p, q in zip(block.parameters(), mine.parameters()):
        assert rel_l2(q.grad, p.grad) <= 1e-4


def test_cuda_graph_capture_with_epilogue():
    block = Block(8).cuda()
    static_x = torch.empty(2, 8, 6, 10, 10, device="cuda").uniform_(-1, 1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        block(static_x)  # loads the kernels: capture must not compile
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_y = block(static_x)
    for _ in range(2):
        static_x.uniform_(-1, 1)
        graph.replay()
        with torch.no_grad():
            expected = block(static_x)
        torch.testing.assert_close(static_y, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradients_of_every_activation(name, no_tf32):
    desc = Conv3dDesc(**SHAPE, activation=name, residual=True, **SCALARS)
    leaves = [t.requires_grad_() for t in _inputs(desc)[:4]]
    out = ct.conv3d(*leaves[:3], padding=1, residual=leaves[3], precision="fp32", **_kwargs(desc))
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    ref = _reference(desc, *leaves64)
    assert rel_l2(out, ref) <= 1e-5  # conv3djit's convolution, then PyTorch's float32 ops
    grad = torch.rand_like(out)
    out.backward(grad)
    ref.backward(grad.double())
    # The backward is PyTorch's on float32 tensors: compared with float64, cuDNN's own accuracy.
    for got, want in zip(leaves, leaves64):
        assert rel_l2(got.grad, want.grad) <= 1e-4


def test_training_step_matches_pytorch(no_tf32):
    torch.manual_seed(0)
    mine = Block(4).cuda()
    ref = copy.deepcopy(mine)
    x = torch.rand(2, 4, 6, 8, 8, device="cuda")
    target = torch.rand(2, 4, 6, 8, 8, device="cuda")
    losses = []
    for model, forward in ((ref, _pytorch_block), (mine, Block.forward)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            loss = F.mse_loss(forward(model, x), target)
            loss.backward()
            opt.step()
        losses.append(loss.item())
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    for p, q in zip(ref.parameters(), mine.parameters()):
        assert rel_l2(q, p) <= 1e-5


def test_warmup_manifest_carries_the_epilogue(tmp_path):
    block = Block(4).cuda()
    path = tmp_path / "block.jsonl"
    descs = [d for _, d in ct.warmup(block, torch.rand(2, 4, 6, 8, 8, device="cuda"), manifest=str(path))]
    assert [(d.activation, d.residual, d.alpha, d.gamma) for d in descs] == [("relu", True, 1.0, 1.0),
                                                                           ("silu", False, 0.5, 2.0)]
    assert [d for _, d in conv3djit.read_manifest(str(path))] == descs
    for d in descs:
        assert not conv3djit.precompile(d).main.compiled  # the warm-up loaded every kernel
