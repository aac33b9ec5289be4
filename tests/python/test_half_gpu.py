"""bf16, fp16, fp32_output and channels_last_3d on a CUDA device: conv3djit.conv3d on DLPack tensors
and the torch op against float64 F.conv3d of the same half inputs within the classes' bounds, the
planner's kernels and the direct family's, the epilogue, outputs in the input's memory format, the
array checks, the drop-in (half modules, autocast), gradients, opcheck and torch.compile."""
import pytest

from conftest import needs_gpu, needs_torch

pytestmark = [needs_gpu, needs_torch]

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

import conv3djit  # noqa: E402
import conv3djit.torch as ct  # noqa: E402

CL = torch.channels_last_3d
FORMATS = {"ncdhw": torch.contiguous_format, "ndhwc": CL}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

CASES = [  # (input, out_channels, kernel, stride, padding, dilation, groups, bias)
    ((2, 16, 6, 9, 10), 32, 3, 1, 1, 1, 1, True),
    ((1, 8, 7, 8, 9), 8, (2, 3, 4), (1, 2, 1), (0, 1, 2), (2, 1, 1), 2, False),
    ((2, 3, 6, 7, 8), 16, (3, 5, 7), 1, "same", 1, 1, True),
    ((1, 32, 5, 6, 6), 32, 3, 1, 1, 1, 32, True),
    ((2, 24, 4, 5, 6), 40, 1, 1, 0, 1, 1, False),
]


def _id(case):
    shape, k, kernel, stride, padding, dilation, groups, bias = case
    return f"C{shape[1]}_K{k}_k{kernel}_s{stride}_p{padding}_d{dilation}_g{groups}{'_bias' if bias else ''}"


def rel_l2(got, ref):
    got, ref = got.double(), ref.double()
    return ((got - ref).norm() / ref.norm()).item()


def _desc(case, dtype, layout, fp32_output=False, **epilogue):
    shape, k, kernel, stride, padding, dilation, groups, bias = case
    return conv3djit.Conv3dDesc(shape, k, kernel, stride, padding, dilation, groups, bias, dtype=dtype,
                                layout=layout, fp32_output=fp32_output, **epilogue)


def _inputs(desc, low=-1.0):
    """Fresh uniform values in [low, 1) of the description's type and layout; an output poisoned with NaN."""
    dtype, memory_format = getattr(torch, desc.dtype), FORMATS[desc.layout]

    def fresh(shape):
        return torch.empty(shape, device="cuda").uniform_(low, 1).to(dtype).contiguous(memory_format=memory_format)

    x, w = fresh(desc.input_shape), fresh(desc.weight_shape)
    b = torch.empty(desc.out_channels, device="cuda").uniform_(low, 1).to(dtype) if desc.bias else None
    out = torch.full(desc.output_shape, float("nan"), device="cuda", dtype=getattr(torch, desc.output_dtype))
    return x, w, b, out.contiguous(memory_format=memory_format)


def _reference(desc, x, w, b):
    """F.conv3d in float64 of the same half values: independent of conv3djit."""
    return F.conv3d(x.double(), w.double(), None if b is None else b.double(), desc.stride, desc.padding,
                    desc.dilation, desc.groups)


def _check(desc, out, ref):
    assert out.dtype == getattr(torch, desc.output_dtype)
    assert out.is_contiguous(memory_format=FORMATS[desc.layout])
    result = conv3djit.compare(out.cpu(), ref.cpu().numpy(), conv3djit.tolerance(desc))
    assert result.passed, f"{desc}: {result}"


@pytest.mark.parametrize("case", CASES, ids=_id)
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
@pytest.mark.parametrize("dtype,fp32_output", [("bf16", False), ("fp16", False), ("bf16", True), ("fp16", True)],
                         ids=["bf16", "fp16", "bf16_out32", "fp16_out32"])
def test_arrays_api_against_float64(case, layout, dtype, fp32_output):
    desc = _desc(case, dtype, layout, fp32_output)
    x, w, b, out = _inputs(desc)
    got = conv3djit.conv3d(x, w, b, desc.stride, desc.padding, desc.dilation, desc.groups, out=out,
                           fp32_output=fp32_output)
    assert got is out
    _check(desc, out, _reference(desc, x, w, b))
    allocated = conv3djit.conv3d(x, w, b, desc.stride, desc.padding, desc.dilation, desc.groups,
                                 fp32_output=fp32_output)  # allocated in the layout and output type
    _check(desc, allocated, _reference(desc, x, w, b))


@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_direct_family_against_float64(dtype, layout, tmp_path):
    engine = conv3djit.Engine(cache_dir=str(tmp_path), kernel_config="direct")
    for case in CASES[:3]:
        desc = _desc(case, dtype, layout)
        x, w, b, out = _inputs(desc, low=0.0)
        engine.run(desc, x, w, b, out=out, stream=torch.cuda.current_stream().cuda_stream)
        _check(desc, out, _reference(desc, x, w, b))


@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
@pytest.mark.parametrize("dtype,fp32_output", [("bf16", False), ("fp16", True)])
def test_epilogue_with_residual_of_the_output_type(dtype, fp32_output, layout):
    desc = _desc(CASES[0], dtype, layout, fp32_output, activation="silu", alpha=0.5, residual=True, beta=-0.75)
    x, w, b, out = _inputs(desc)
    r = torch.empty(desc.output_shape, device="cuda").uniform_(-1, 1).to(out.dtype)
    r = r.contiguous(memory_format=FORMATS[layout])
    got = conv3djit.conv3d(x, w, b, desc.stride, desc.padding, out=out, fp32_output=fp32_output,
                           activation="silu", alpha=0.5, residual=r, beta=-0.75)
    conv = _reference(desc, x, w, None)
    ref = F.silu(0.5 * conv + b.double().view(1, -1, 1, 1, 1)) - 0.75 * r.double()
    _check(desc, got, ref)


def test_gpu_reference_of_half_ndhwc():
    desc = _desc(CASES[1], "bf16", "ndhwc")
    x, w, b, _ = _inputs(desc)
    out = torch.full(desc.output_shape, float("nan"), device="cuda", dtype=torch.float64).contiguous(memory_format=CL)
    conv3djit.default_engine().run_reference(desc, x, w, b, out=out, stream=torch.cuda.current_stream().cuda_stream)
    torch.testing.assert_close(out, _reference(desc, x, w, b), rtol=1e-12, atol=1e-12)


def test_array_checks_before_any_launch():
    desc = _desc(CASES[0], "bf16", "ndhwc")
    x, w, b, out = _inputs(desc)
    run = conv3djit.default_engine().run
    with pytest.raises(conv3djit.Unsupported, match=r"input: not contiguous .* layout 'ndhwc' needs strides"):
        run(desc, x.contiguous(), w, b, out=out)
    with pytest.raises(conv3djit.InvalidArgument, match="input: dtype float16, but the description has dtype = "
                                                        "'bfloat16'"):
        run(desc, x.half(), w, b, out=out)
    with pytest.raises(conv3djit.InvalidArgument, match=r"out: dtype bfloat16, but the call needs float32 "
                                                        r"\(fp32_output\)"):
        run(_desc(CASES[0], "bf16", "ndhwc", True), x, w, b, out=out)
    with pytest.raises(conv3djit.Unsupported, match="out: not contiguous"):
        conv3djit.conv3d(x, w, b, padding=1, out=out.contiguous())
    torch.cuda.synchronize()
    assert out.isnan().all()  # nothing written


@pytest.mark.parametrize("case", CASES, ids=_id)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_op_channels_last(case, dtype):
    desc = _desc(case, dtype, "ndhwc")
    x, w, b, _ = _inputs(desc)
    ref = _reference(desc, x, w, b)
    for weight in (w, w.contiguous()):  # a contiguous weight is copied into the input's format
        with torch.no_grad():
            got = ct.conv3d(x, weight, b, desc.stride, desc.padding, desc.dilation, desc.groups, precision=None)
        _check(desc, got, ref)
    wide = ct.conv3d(x, w, b, desc.stride, desc.padding, desc.dilation, desc.groups, fp32_output=True)
    _check(_desc(case, dtype, "ndhwc", True), wide, ref)
    plain = ct.conv3d(x.contiguous(), w.contiguous(), b, desc.stride, desc.padding, desc.dilation, desc.groups)
    _check(_desc(case, dtype, "ncdhw"), plain, ref)


def test_precision_none_follows_allow_tf32_for_half_inputs():
    desc = _desc(CASES[0], "bf16", "ndhwc")
    x, w, b, _ = _inputs(desc)
    ref = _reference(desc, x, w, b)
    saved = torch.backends.cudnn.allow_tf32
    try:
        for allow in (True, False):
            torch.backends.cudnn.allow_tf32 = allow
            _check(desc, ct.conv3d(x, w, b, padding=1), ref)
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def test_opcheck_bf16_channels_last():
    desc = _desc(CASES[2], "bf16", "ndhwc")
    x, w, b, _ = _inputs(desc)
    x.requires_grad_()
    args = (x, w, b, [1, 1, 1], [0, 0, 0], "same", [1, 1, 1], 1, "fp32")
    torch.library.opcheck(torch.ops.conv3djit.conv3d.default, args)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_dropin_half_module_and_channels_last(dtype):
    ref = nn.Conv3d(16, 32, 3, padding=1, groups=2).cuda().to(dtype)
    mine = ct.Conv3d(16, 32, 3, padding=1, groups=2).cuda().to(dtype)
    mine.load_state_dict(ref.state_dict())
    x = torch.empty(2, 16, 6, 8, 8, device="cuda").uniform_(-1, 1).to(dtype)
    expected = F.conv3d(x.double(), ref.weight.double(), ref.bias.double(), padding=1, groups=2)
    bound = conv3djit.tolerance(conv3djit.Conv3dDesc(x.shape, 32, 3, dtype=str(dtype).split(".")[1])).rel_l2
    with torch.no_grad(), ct.record_shapes() as recorder:
        for memory_format in (torch.contiguous_format, CL):
            out = mine(x.contiguous(memory_format=memory_format))
            assert out.dtype == dtype and out.is_contiguous(memory_format=memory_format)
            assert rel_l2(out, expected) <= bound
    assert [d.layout for _, d in recorder.descs] == ["ncdhw", "ndhwc"]  # conv3djit ran both


def test_dropin_under_autocast():
    mine = ct.Conv3d(16, 32, 3, padding=1).cuda()
    x = torch.empty(2, 16, 6, 8, 8, device="cuda").uniform_(-1, 1).contiguous(memory_format=CL)
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad(), ct.record_shapes() as recorder:
        out = mine(x)
        ref = nn.Conv3d.forward(mine, x)  # PyTorch's own path under autocast
    assert out.dtype == ref.dtype == torch.bfloat16 and out.is_contiguous(memory_format=CL)
    [(_, desc)] = recorder.descs
    assert desc.dtype == "bfloat16" and desc.layout == "ndhwc"
    expected = F.conv3d(x.bfloat16().double(), mine.weight.bfloat16().double(), mine.bias.bfloat16().double(),
                        padding=1)
    assert rel_l2(out, expected) <= 4e-3


def test_gradients_bf16_channels_last_match_nn_conv3d():
    torch.manual_seed(0)
    ref = nn.Conv3d(8, 16, 3, padding=1).cuda().bfloat16()
    mine = ct.Conv3d(8, 16, 3, padding=1).cuda().bfloat16()
    mine.load_state_dict(ref.state_dict())
    x = torch.rand(2, 8, 6, 8, 8, device="cuda").bfloat16().contiguous(memory_format=CL)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.rand(2, 16, 6, 8, 8, device="cuda").bfloat16()
    ref(x1).backward(grad)
    out = mine(x2)
    out.backward(grad)
    assert out.is_contiguous(memory_format=CL)
    # Both backwards are PyTorch's, in bf16.
    assert rel_l2(x2.grad, x1.grad) <= 1e-2 and rel_l2(mine.weight.grad, ref.weight.grad) <= 1e-2


def test_compile_fullgraph_bf16_channels_last():
    model = nn.Sequential(ct.Conv3d(4, 16, 3, padding=1), nn.ReLU(), ct.Conv3d(16, 8, 1)).cuda().bfloat16()
    x = torch.empty(2, 4, 6, 8, 8, device="cuda").uniform_(-1, 1).bfloat16().contiguous(memory_format=CL)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
    assert compiled.dtype == torch.bfloat16 and compiled.is_contiguous(memory_format=CL)
    assert rel_l2(compiled, eager) <= 1e-2
