"""Padding modes on a CUDA device: every mode in both accuracy classes on layers that reach each
kernel family (plain, wide, causal per side, 'same' with an even kernel and dilation, strided,
depthwise, grouped, the three-channel reference shape) against PyTorch's float64 composition
F.pad + F.conv3d (arrays, the GPU reference, the torch op, the drop-in Conv3d), an epilogue after
the padding, torch.compile(fullgraph=True), and the drop-in's gradients against nn.Conv3d."""
import concurrent.futures
import copy
import os

import pytest

from conftest import needs_gpu, needs_torch

pytestmark = [needs_gpu, needs_torch]

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

import conv3djit  # noqa: E402
import conv3djit.torch as ct  # noqa: E402
from conv3djit import Conv3dDesc  # noqa: E402

MODES = ["reflect", "replicate", "circular"]
PRECISIONS = ["fp32", "tf32"]
# rel-L2 against float64 of each accuracy class.
REL_L2 = {"fp32": 1e-6, "tf32": 5e-4}
LAYERS = [
    ("k3_c8", dict(input_shape=(2, 8, 6, 9, 10), out_channels=16, kernel_size=3, padding=1, bias=True)),
    ("k3_c32_k64", dict(input_shape=(2, 32, 8, 16, 16), out_channels=64, kernel_size=3, padding=1, bias=True)),
    ("causal", dict(input_shape=(1, 16, 9, 12, 12), out_channels=16, kernel_size=3, padding_before=(2, 1, 1),
                    padding_after=(0, 1, 1), bias=True)),
    ("same_k2x4x3_d1x1x2", dict(input_shape=(1, 8, 7, 8, 9), out_channels=8, kernel_size=(2, 4, 3), padding="same",
                                dilation=(1, 1, 2))),
    ("stride2_p2x1x3", dict(input_shape=(2, 8, 9, 10, 11), out_channels=8, kernel_size=3, stride=2,
                            padding=(2, 1, 3), bias=True)),
    ("depthwise", dict(input_shape=(1, 16, 8, 10, 12), out_channels=16, kernel_size=3, padding=1, groups=16)),
    ("grouped", dict(input_shape=(1, 16, 6, 8, 8), out_channels=32, kernel_size=3, padding=1, groups=4, bias=True)),
    ("c3_k3x5x7", dict(input_shape=(2, 3, 16, 16, 16), out_channels=16, kernel_size=(3, 5, 7), padding=(1, 2, 3))),
]
DESCS = [(f"{name}-{mode}-{precision}", Conv3dDesc(**layer, padding_mode=mode, precision=precision))
         for name, layer in LAYERS for mode in MODES for precision in PRECISIONS]


def _inputs(desc):
    """Fresh uniform values in [-1, 1), an output poisoned with NaN."""
    x = torch.empty(desc.input_shape, device="cuda").uniform_(-1, 1)
    w = torch.empty(desc.weight_shape, device="cuda").uniform_(-1, 1)
    b = torch.empty(desc.out_channels, device="cuda").uniform_(-1, 1) if desc.bias else None
    out = torch.full(desc.output_shape, float("nan"), device="cuda")
    return x, w, b, out


def _reference(desc, x, w, b):
    """F.pad in the mode and the unpadded F.conv3d, in float64: PyTorch's composition, independent
    of conv3djit except for resolving 'same' (which nn.Conv3d splits the same way)."""
    before, after = conv3djit.resolved_padding(desc)
    pads = [amount for axis in (2, 1, 0) for amount in (before[axis], after[axis])]
    return F.conv3d(F.pad(x.double(), pads, mode=desc.padding_mode), w.double(), None if b is None else b.double(),
                    desc.stride, 0, desc.dilation, desc.groups)


def rel_l2(got, ref):
    got, ref = got.double(), ref.double()
    return ((got - ref).norm() / ref.norm()).item()


def _check(desc, out, ref):
    assert not torch.isnan(out).any(), f"{desc}: outputs left unwritten"
    error = rel_l2(out, ref)
    assert error <= REL_L2[desc.precision], f"{desc}: rel-L2 {error:.2e}"
    result = conv3djit.compare(out.detach().cpu().numpy(), ref.detach().cpu().numpy(),
                               conv3djit.tolerance(desc.precision))
    assert result.passed, f"{desc}: {result}"


@pytest.fixture(scope="module")
def compiled():
    """Compiles every description's kernels in parallel (compiles release the GIL); a failure is
    left to the test of its description."""
    def precompile(desc):
        try:
            conv3djit.precompile(desc)
        except conv3djit.Error:
            pass

    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(precompile, [d for _, d in DESCS]))


@pytest.mark.parametrize("name,desc", DESCS, ids=[name for name, _ in DESCS])
def test_arrays_against_float64(name, desc, compiled):
    x, w, b, out = _inputs(desc)
    conv3djit.default_engine().run(desc, x, w, b, out=out)
    _check(desc, out, _reference(desc, x, w, b))


@pytest.mark.parametrize("name,desc", [(n, d) for n, d in DESCS if d.padding_before is None],
                         ids=[n for n, d in DESCS if d.padding_before is None])
def test_torch_op_against_float64(name, desc, compiled):
    x, w, b, out = _inputs(desc)
    args = (desc.stride, desc.padding, desc.dilation, desc.groups)
    with torch.no_grad():
        got = ct.conv3d(x, w, b, *args, padding_mode=desc.padding_mode, precision=desc.precision)
    _check(desc, got, _reference(desc, x, w, b))
    assert conv3djit.conv3d(x, w, b, *args, out=out, padding_mode=desc.padding_mode,
                            precision=desc.precision) is out
    _check(desc, out, _reference(desc, x, w, b))


@pytest.mark.parametrize("mode", MODES)
def test_gpu_reference(mode):
    for name, layer in LAYERS[:3]:
        desc = Conv3dDesc(**layer, padding_mode=mode)
        x, w, b, _ = _inputs(desc)
        ref = torch.full(desc.output_shape, float("nan"), device="cuda", dtype=torch.float64)
        conv3djit.default_engine().run_reference(desc, x, w, b, out=ref)
        torch.testing.assert_close(ref, _reference(desc, x, w, b), msg=name)


def _layer(mode, padding=1, kernel_size=3, seed=0):
    torch.manual_seed(seed)
    return nn.Conv3d(8, 16, kernel_size, padding=padding, padding_mode=mode, bias=True).cuda()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding,kernel_size", [(1, 3), ((2, 0, 1), (3, 1, 3)), ("same", (2, 4, 3))],
                         ids=["p1", "p2x0x1", "same_k2x4x3"])
def test_dropin_against_nn_conv3d(mode, precision, padding, kernel_size):
    ref = _layer(mode, padding, kernel_size)
    mine = copy.deepcopy(ref)
    assert ct.convert(mine, precision=precision).swapped == [""]
    x = torch.empty(2, 8, 6, 9, 10, device="cuda").uniform_(-1, 1)
    with torch.no_grad(), ct.record_shapes() as recorder:
        out = mine(x)
        unbatched = mine(x[1])
    descs = [desc for _, desc in recorder.descs]
    # The unpadded input and the mode reach the kernel: no padded copy.
    assert [d.input_shape for d in descs] == [(2, 8, 6, 9, 10), (1, 8, 6, 9, 10)]
    assert all(d.padding_mode == mode for d in descs)
    with torch.no_grad():
        expected = copy.deepcopy(ref).double()(x.double())
    assert rel_l2(out, expected) <= REL_L2[precision]
    assert rel_l2(unbatched, expected[1]) <= REL_L2[precision]


@pytest.fixture
def no_tf32():
    """PyTorch's own convolutions (the backward, references) in full float32."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("mode", MODES)
def test_dropin_gradients_against_nn_conv3d(mode, no_tf32):
    ref = _layer(mode, padding=(2, 1, 1))
    mine = copy.deepcopy(ref)
    ct.convert(mine, precision="fp32")
    x = torch.empty(2, 8, 6, 9, 10, device="cuda").uniform_(-1, 1)
    x_mine, x_ref = x.clone().requires_grad_(), x.double().requires_grad_()
    ref64 = copy.deepcopy(ref).double()
    out, expected = mine(x_mine), ref64(x_ref)
    assert rel_l2(out, expected) <= 1e-6
    grad = torch.rand_like(out)
    out.backward(grad)
    expected.backward(grad.double())
    # PyTorch's float32 backward (cuDNN) against float64: cuDNN's own accuracy.
    for got, want in [(x_mine.grad, x_ref.grad), (mine.weight.grad, ref64.weight.grad),
                      (mine.bias.grad, ref64.bias.grad)]:
        assert rel_l2(got, want) <= 1e-4


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", MODES)
def test_epilogue_after_the_padding(mode, precision):
    desc = Conv3dDesc(**dict(LAYERS[2][1]), padding_mode=mode, precision=precision, activation="silu", alpha=0.5,
                      residual=True, beta=-1.0)
    x, w, b, out = _inputs(desc)
    r = torch.empty(desc.output_shape, device="cuda").uniform_(-1, 1)
    conv3djit.default_engine().run(desc, x, w, b, out=out, residual=r)
    conv = _reference(Conv3dDesc(**{**LAYERS[2][1], "bias": False}, padding_mode=mode), x, w, None)
    _check(desc, out, F.silu(0.5 * conv + b.double().view(1, -1, 1, 1, 1)) - r.double())


@pytest.mark.parametrize("mode", MODES)
def test_compile_fullgraph(mode, no_tf32):
    model = nn.Sequential(_layer(mode), nn.SiLU(),
                          nn.Conv3d(16, 8, (2, 4, 3), padding="same", padding_mode=mode)).cuda()
    ref = copy.deepcopy(model)
    ct.convert(model, precision="fp32")
    x = torch.empty(2, 8, 6, 9, 10, device="cuda").uniform_(-1, 1)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
        expected = ref.double()(x.double())
    assert rel_l2(compiled, eager) <= 1e-6 and rel_l2(eager, expected) <= 1e-6
