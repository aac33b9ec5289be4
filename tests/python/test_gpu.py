"""conv3djit on a CUDA device, through DLPack arrays (PyTorch tensors, CuPy arrays): results against
a float64 reference in both accuracy classes (random odd descriptions and every suite layer), wrong
calls that must write nothing, strides, streams, alignment, the GPU reference and the Engine."""
import concurrent.futures
import os
import random

import pytest

from conftest import needs_gpu, needs_torch

pytestmark = [needs_gpu, needs_torch]

torch = pytest.importorskip("torch")
F = torch.nn.functional

import conv3djit  # noqa: E402
from conv3djit import Conv3dDesc  # noqa: E402

SUITES = [os.path.join(os.path.dirname(__file__), "..", "..", "bench", name)
          for name in ("suite.jsonl", "suite_tf32.jsonl")]


def _random_descs(count, seed):
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        groups = rng.choice([1, 1, 2, 3, 4])
        c = groups * rng.randint(1, 5)
        k = groups * rng.randint(1, 6)
        kernel = tuple(rng.choice([1, 2, 3, 4, 5]) for _ in range(3))
        stride = tuple(rng.choice([1, 1, 2, 3]) for _ in range(3))
        dilation = tuple(rng.choice([1, 1, 2]) for _ in range(3))
        padding = rng.choice(["same", "valid", tuple(rng.randint(0, 2) for _ in range(3))])
        if padding == "same":
            stride = 1
        desc = Conv3dDesc((rng.randint(1, 3), c, rng.randint(5, 13), rng.randint(5, 17), rng.randint(5, 19)), k,
                          kernel, stride, padding, dilation, groups, rng.random() < 0.5,
                          rng.choice(["fp32", "tf32"]))
        if conv3djit.validate(desc):
            out.append(desc)
    return out


def _inputs(desc, low=-1.0):
    """Fresh uniform values in [low, 1), an output poisoned with NaN."""
    x = torch.empty(desc.input_shape, device="cuda").uniform_(low, 1)
    w = torch.empty(desc.weight_shape, device="cuda").uniform_(low, 1)
    b = torch.empty(desc.out_channels, device="cuda").uniform_(low, 1) if desc.bias else None
    out = torch.full(desc.output_shape, float("nan"), device="cuda")
    return x, w, b, out


def _reference(desc, x, w, b):
    """F.conv3d in float64 on the GPU (cuDNN or ATen's own float64 path): independent of conv3djit."""
    return F.conv3d(x.double(), w.double(), None if b is None else b.double(), desc.stride, desc.padding,
                    desc.dilation, desc.groups)


def _check(desc, out, ref):
    result = conv3djit.compare(out.cpu().numpy(), ref.cpu().numpy(), conv3djit.tolerance(desc.precision))
    assert result.passed, f"{desc}: {result}"


RANDOM = _random_descs(24, seed=3)


def _precompile_all(descs):
    """Compiles the kernels of descs in parallel (compiles release the GIL), so that the tests
    spend no time compiling one after the other. A failure is left to the test of its layer."""
    def precompile(desc):
        try:
            conv3djit.precompile(desc)
        except conv3djit.Error:
            pass

    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(precompile, descs))


@pytest.fixture(scope="module")
def random_compiled():
    _precompile_all(RANDOM)


@pytest.mark.parametrize("desc", RANDOM, ids=str)
@pytest.mark.parametrize("low", [-1.0, 0.0], ids=["signed", "positive"])
def test_random_descriptions_against_float64(desc, low, random_compiled):
    x, w, b, out = _inputs(desc, low)
    assert conv3djit.conv3d(x, w, b, desc.stride, desc.padding, desc.dilation, desc.groups, out=out,
                            precision=desc.precision) is out
    _check(desc, out, _reference(desc, x, w, b))


def _suite_descs():
    """Every suite layer in both classes, at batch 1 (kernels are shared across batch sizes; the
    float64 reference stays quick)."""
    descs = []
    for path in SUITES:
        for name, d in conv3djit.read_manifest(path):
            for precision in ("fp32", "tf32"):
                descs.append(pytest.param(Conv3dDesc((1,) + d.input_shape[1:], d.out_channels, d.kernel_size,
                                                     d.stride, d.padding, d.dilation, d.groups, d.bias, precision),
                                          id=f"{name}-{precision}"))
    return descs


@pytest.fixture(scope="module")
def suite_compiled():
    _precompile_all([p.values[0] for p in _suite_descs()])


@pytest.mark.parametrize("desc", _suite_descs())
def test_suite_layers_against_float64(desc, suite_compiled):
    x, w, b, out = _inputs(desc)
    conv3djit.conv3d(x, w, b, desc.stride, desc.padding, desc.dilation, desc.groups, out=out,
                     precision=desc.precision)
    _check(desc, out, _reference(desc, x, w, b))


GUARD = 12345.0


def _carved(desc, guard=1024):
    """The call's arrays as views of one pool with `guard` elements of GUARD between them, as a
    framework's allocator packs tensors: a write outside out lands in a guard or an input."""
    shapes = [desc.input_shape, desc.weight_shape] + ([(desc.out_channels,)] if desc.bias else [])
    shapes.append(desc.output_shape)
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    starts, at = [], guard
    for n in sizes:
        starts.append(at)
        at += (n + 15) // 16 * 16 + guard  # 64-byte aligned views
    pool = torch.full((at,), GUARD, device="cuda")
    views = [pool[a:a + n].view(s) for a, n, s in zip(starts, sizes, shapes)]
    for v in views[:-1]:
        v.uniform_(-1, 1)
    views[-1].fill_(float("nan"))
    outside = torch.ones(at, dtype=torch.bool, device="cuda")
    for a, n in zip(starts, sizes):
        outside[a:a + n] = False
    return pool, outside, views


@pytest.mark.parametrize("path", ["arrays", "pointers"])
@pytest.mark.parametrize("desc", RANDOM[:8], ids=str)
def test_writes_nothing_outside_out(desc, path, random_compiled):
    pool, outside, views = _carved(desc)
    x, w, b, out = views[0], views[1], views[2] if desc.bias else None, views[-1]
    inputs = [v.clone() for v in views[:-1]]
    ref = _reference(desc, x, w, b)
    engine = conv3djit.default_engine()
    if path == "arrays":
        engine.run(desc, x, w, b, out=out)
    else:
        engine.run_pointers(desc, x.data_ptr(), w.data_ptr(), 0 if b is None else b.data_ptr(), out.data_ptr(), 0)
    torch.cuda.synchronize()
    assert int((pool[outside] != GUARD).sum()) == 0, "a guard between the arrays was written"
    for before, after in zip(inputs, views[:-1]):
        assert torch.equal(before, after), "an input was written"
    _check(desc, out, ref)


def test_allocates_output_and_uses_current_stream():
    desc = Conv3dDesc((2, 8, 9, 10, 11), 16, 3, padding=1, bias=True)
    x, w, b, _ = _inputs(desc)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = conv3djit.conv3d(x, w, b, padding=1)
        explicit = torch.full_like(out, float("nan"))
        conv3djit.conv3d(x, w, b, padding=1, out=explicit, stream=side)
    side.synchronize()
    assert out.shape == desc.output_shape and out.dtype == torch.float32
    _check(desc, out, _reference(desc, x, w, b))
    torch.testing.assert_close(explicit, out, rtol=0, atol=0)


def test_stream_forms():
    desc = Conv3dDesc((1, 4, 6, 6, 6), 4, 3)
    x, w, _, out = _inputs(desc)
    s = torch.cuda.Stream()
    for stream in (s, s.cuda_stream, None):
        out.fill_(float("nan"))
        torch.cuda.synchronize()  # the fill and the inputs are on the default stream
        conv3djit.conv3d(x, w, out=out, stream=stream)
        torch.cuda.synchronize()
        _check(desc, out, _reference(desc, x, w, None))


def test_parameters_that_require_grad():
    conv = torch.nn.Conv3d(3, 4, 3, bias=True).cuda()
    x = torch.empty(1, 3, 6, 6, 6, device="cuda").uniform_(-1, 1)
    desc = Conv3dDesc(tuple(x.shape), 4, 3, bias=True)
    out = conv3djit.conv3d(x, conv.weight, conv.bias)
    assert conv3djit.validate(desc, x, conv.weight, conv.bias, out)
    _check(desc, out, _reference(desc, x, conv.weight.detach(), conv.bias.detach()))


def test_causal_padding_per_side():
    desc = Conv3dDesc((2, 6, 9, 10, 11), 8, 3, padding_before=(2, 1, 1), padding_after=(0, 1, 1), bias=True)
    x, w, b, out = _inputs(desc)
    conv3djit.default_engine().run(desc, x, w, b, out=out)
    padded = F.pad(x.double(), (1, 1, 1, 1, 2, 0))  # W, H, D: two frames before, none after
    _check(desc, out, F.conv3d(padded, w.double(), b.double()))


def test_unaligned_input():
    desc = Conv3dDesc((2, 5, 7, 9, 13), 8, 3, padding=1)
    x, w, _, out = _inputs(desc)
    flat = torch.empty(x.numel() + 1, device="cuda")
    shifted = flat[1:].view(desc.input_shape)  # contiguous, 4 bytes past a 16-byte boundary
    shifted.copy_(x)
    conv3djit.conv3d(shifted, w, padding=1, out=out)
    _check(desc, out, _reference(desc, x, w, None))


def test_wrong_calls_raise_and_write_nothing():
    desc = Conv3dDesc((2, 4, 8, 8, 8), 8, 3, groups=2, bias=True)
    x, w, b, out = _inputs(desc)
    calls = [
        (conv3djit.InvalidArgument, "weight: shape", dict(weight=w[:, :1].contiguous())),
        (conv3djit.InvalidArgument, "bias: shape", dict(bias=b[:3])),
        (conv3djit.InvalidArgument, "out: shape", dict(out=out[:1])),
        (conv3djit.Unsupported, "input: dtype float64", dict(input=x.double())),
        (conv3djit.InvalidArgument, "weight: dtype float64, but the call needs float32", dict(weight=w.double())),
        (conv3djit.InvalidArgument, "out: dtype float64", dict(out=out.double())),
        (conv3djit.Unsupported, "weight: on cpu", dict(weight=w.cpu())),
        # A channels_last_3d input makes the call NDHWC (its layout): the contiguous weight is refused.
        (conv3djit.Unsupported, "weight: not contiguous .* layout 'ndhwc' needs",
         dict(input=x.contiguous(memory_format=torch.channels_last_3d))),
        (conv3djit.Unsupported, "out: not contiguous",
         dict(out=torch.full((2, 8, 6, 6, 12), float("nan"), device="cuda")[..., ::2])),
        (conv3djit.InvalidArgument, r"stride\[D\] = 0", dict(stride=(0, 1, 1))),
    ]
    for cls, pattern, change in calls:
        args = dict(input=x, weight=w, bias=b, out=out, stride=1)
        args.update(change)
        with pytest.raises(cls, match=pattern):
            conv3djit.conv3d(args["input"], args["weight"], args["bias"], args["stride"], groups=2, out=args["out"])
        torch.cuda.synchronize()
        assert torch.isnan(out).all(), f"{pattern}: a refused call wrote into out"
        if "out" in change:
            assert torch.isnan(change["out"]).all()
    overlapping = torch.full((2 * 4 * 8 * 8 * 8,), float("nan"), device="cuda")
    with pytest.raises(conv3djit.InvalidArgument, match="out: overlaps input"):
        conv3djit.conv3d(overlapping.view(2, 4, 8, 8, 8), w, b, groups=2,
                         out=overlapping[:2 * 8 * 6 * 6 * 6].view(2, 8, 6, 6, 6))


def test_gpu_reference_and_engine(tmp_path):
    engine = conv3djit.Engine(cache_dir=str(tmp_path / "cache"))
    desc = Conv3dDesc((1, 6, 7, 8, 9), 4, (3, 1, 2), padding=(1, 0, 1), bias=True)
    x, w, b, out = _inputs(desc)
    ref = torch.full(desc.output_shape, float("nan"), device="cuda", dtype=torch.float64)
    engine.run_reference(desc, x, w, b, out=ref)
    torch.testing.assert_close(ref, _reference(desc, x, w, b))
    before = engine.stats()
    for _ in range(3):
        conv3djit.conv3d(x, w, b, padding=(1, 0, 1), out=out, engine=engine)
    stats = engine.stats()
    assert stats.compiles + stats.disk_hits > before.compiles + before.disk_hits
    assert stats.memory_hits >= before.memory_hits + 2 and stats.module_loads >= 1
    _check(desc, out, ref)
    res = engine.resources(desc)
    assert res.kernel == engine.kernel_for(desc) and res.local_bytes == 0 and res.grid > 0 and res.block > 0
    device = conv3djit.current_device()
    assert device.arch.startswith("sm_") and device.sm_count > 0


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    desc = Conv3dDesc((2, 3, 7, 9, 11), 5, (3, 3, 1), stride=(1, 2, 1), padding="valid", bias=True)
    x, w, b, _ = _inputs(desc)
    xc, wc, bc = (cupy.asarray(t) for t in (x, w, b))  # CUDA array interface: the same memory
    out = conv3djit.conv3d(xc, wc, bc, stride=(1, 2, 1), padding="valid")
    assert isinstance(out, cupy.ndarray) and out.shape == desc.output_shape
    cupy.cuda.get_current_stream().synchronize()
    _check(desc, torch.as_tensor(out, device="cuda"), _reference(desc, x, w, b))
