"""conv3djit.torch on a CUDA device: the custom op against float64 in both classes, opcheck,
torch.compile(fullgraph=True), CUDA graph capture and replay, gradients and a training step
against nn.Conv3d, the drop-in's padding modes and fallbacks, convert() and the warm-up manifest."""
import copy

import pytest

from conftest import needs_gpu, needs_torch

pytestmark = [needs_gpu, needs_torch]

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

import conv3djit  # noqa: E402
import conv3djit.torch as ct  # noqa: E402

# rel-L2 bounds of the classes (docs/design.md); gradients come from PyTorch's own backward.
REL_L2 = {"fp32": 1e-6, "tf32": 5e-4}

CASES = [  # (input, out_channels, kernel, stride, padding, dilation, groups, bias)
    ((2, 4, 9, 10, 11), 6, 3, 1, 1, 1, 1, True),
    ((1, 6, 8, 9, 7), 6, (2, 3, 4), (1, 2, 1), (0, 1, 2), (2, 1, 1), 3, False),
    ((2, 3, 7, 8, 9), 4, (4, 2, 3), 1, "same", (1, 2, 1), 1, True),
    ((1, 8, 9, 9, 9), 8, 3, 2, "valid", 1, 8, False),
    ((3, 5, 6, 7, 8), 7, 1, 1, 0, 1, 1, True),
]


def rel_l2(got, ref):
    got, ref = got.double(), ref.double()
    return ((got - ref).norm() / ref.norm()).item()


def _args(case, dtype=torch.float32):
    shape, k, kernel, stride, padding, dilation, groups, bias = case
    conv = nn.Conv3d(shape[1], k, kernel, stride, padding, dilation, groups, bias)
    x = torch.empty(shape, device="cuda").uniform_(-1, 1)
    return conv.cuda(), x


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_op_against_float64(case, precision):
    conv, x = _args(case)
    got = ct.conv3d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups,
                    precision=precision)
    ref = F.conv3d(x.double(), conv.weight.double(), None if conv.bias is None else conv.bias.double(), conv.stride,
                   conv.padding, conv.dilation, conv.groups)
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert rel_l2(got, ref) <= REL_L2[precision]


def test_opcheck():
    conv, x = _args(CASES[2])
    x.requires_grad_()
    args = (x, conv.weight, conv.bias, [1, 1, 1], [0, 0, 0], "same", [1, 2, 1], 1, "fp32")
    torch.library.opcheck(torch.ops.conv3djit.conv3d.default, args)


def _model(precision="fp32"):
    return nn.Sequential(ct.Conv3d(3, 8, 3, padding=1, precision=precision), nn.ReLU(),
                         ct.Conv3d(8, 8, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), groups=2,
                                   precision=precision),
                         nn.ReLU(), ct.Conv3d(8, 4, 1, bias=False, precision=precision)).cuda()


def test_compile_fullgraph():
    model = _model()
    x = torch.empty(2, 3, 8, 12, 12, device="cuda").uniform_(-1, 1)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)(x)
    assert rel_l2(compiled, eager) <= 1e-6


def test_cuda_graph_capture_and_replay():
    model = _model()
    static_x = torch.empty(2, 3, 8, 12, 12, device="cuda").uniform_(-1, 1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        model(static_x)  # loads the kernels: capture must not compile
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_y = model(static_x)
    for _ in range(3):
        static_x.uniform_(-1, 1)
        graph.replay()
        with torch.no_grad():
            expected = model(static_x)
        torch.testing.assert_close(static_y, expected, rtol=0, atol=0)


@pytest.fixture
def no_tf32():
    """PyTorch's own convolutions (the backward, references) in full float32."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_nn_conv3d(case, no_tf32):
    conv, x = _args(case)
    mine = copy.deepcopy(conv)
    mine.__class__ = ct.Conv3d
    mine.precision = "fp32"
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.rand(conv(x).shape, device="cuda")
    ref = conv.double()(x1.double())
    ref.backward(grad.double())
    out = mine(x2)
    out.backward(grad)
    assert rel_l2(out, ref) <= REL_L2["fp32"]
    # The backward is PyTorch's on float32 tensors: compared with float64, cuDNN's own accuracy.
    assert rel_l2(x2.grad, x1.grad) <= 1e-4
    assert rel_l2(mine.weight.grad, conv.weight.grad) <= 1e-4
    if conv.bias is not None:
        assert rel_l2(mine.bias.grad, conv.bias.grad) <= 1e-4


def test_training_step_matches_pytorch(no_tf32):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv3d(8, 2, 3, padding="same")).cuda()
    mine = copy.deepcopy(ref)
    assert ct.convert(mine).swapped == ["0", "2"]
    x = torch.rand(2, 3, 6, 8, 8, device="cuda")
    target = torch.rand(2, 2, 6, 8, 8, device="cuda")
    losses = []
    for model in (ref, mine):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            loss = F.mse_loss(model(x), target)
            loss.backward()
            opt.step()
        losses.append(loss.item())
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    for p, q in zip(ref.parameters(), mine.parameters()):
        assert rel_l2(q, p) <= 1e-5


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
def test_dropin_padding_modes(padding_mode):
    ref = nn.Conv3d(4, 6, 3, padding=(1, 2, 1), padding_mode=padding_mode).cuda()
    mine = ct.Conv3d(4, 6, 3, padding=(1, 2, 1), padding_mode=padding_mode, precision="fp32").cuda()
    mine.load_state_dict(ref.state_dict())
    x = torch.empty(2, 4, 7, 8, 9, device="cuda").uniform_(-1, 1)
    with torch.no_grad():
        expected = F.conv3d(F.pad(x.double(), ref._reversed_padding_repeated_twice, mode=padding_mode)
                            if padding_mode != "zeros" else x.double(), ref.weight.double(), ref.bias.double(),
                            1, 0 if padding_mode != "zeros" else ref.padding)
        assert rel_l2(mine(x), expected) <= REL_L2["fp32"]
        assert rel_l2(mine(x[0]), expected[0]) <= REL_L2["fp32"]  # unbatched


def test_dropin_strides_and_fallbacks():
    mine = ct.Conv3d(4, 6, 3, padding=1, precision="fp32").cuda()
    x = torch.empty(2, 4, 7, 8, 9, device="cuda").uniform_(-1, 1)
    with torch.no_grad():
        ref = F.conv3d(x.double(), mine.weight.double(), mine.bias.double(), padding=1)
        channels_last = x.contiguous(memory_format=torch.channels_last_3d)
        assert rel_l2(mine(channels_last), ref) <= REL_L2["fp32"]  # served in NDHWC
        sliced = F.conv3d(x[:, :, 1:].double(), mine.weight.double(), mine.bias.double(), padding=1)
        assert rel_l2(mine(x[:, :, 1:]), sliced) <= REL_L2["fp32"]  # a view: copied too
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert mine(x).dtype == torch.bfloat16  # autocast: conv3djit in bf16, as nn.Conv3d
        assert mine.double()(x.double()).dtype == torch.float64


def test_tf32_follows_cudnn_switch():
    mine = ct.Conv3d(16, 16, 3, padding=1).cuda()
    x = torch.empty(2, 16, 8, 8, 8, device="cuda").uniform_(-1, 1)
    ref = F.conv3d(x.double(), mine.weight.double(), mine.bias.double(), padding=1)
    saved = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        with torch.no_grad():
            assert rel_l2(mine(x), ref) <= REL_L2["fp32"]
        torch.backends.cudnn.allow_tf32 = True
        with torch.no_grad():
            assert rel_l2(mine(x), ref) <= REL_L2["tf32"]
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def test_convert_keeps_outputs(no_tf32):
    model = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(),
                          nn.Conv3d(8, 8, 3, padding=1, padding_mode="reflect", groups=4)).cuda().eval()
    x = torch.rand(1, 3, 8, 8, 8, device="cuda")
    with torch.no_grad():
        before = model(x)
        report = ct.convert(model)
        after = model(x)  # precision None: fp32, following allow_tf32 = False
    assert report.swapped == ["0", "3"]
    assert rel_l2(after, before) <= 1e-5


def test_warmup_writes_the_manifest(tmp_path):
    model = _model("tf32")
    path = tmp_path / "model.jsonl"
    descs = ct.warmup(model, torch.rand(2, 3, 8, 12, 12, device="cuda"), manifest=str(path))
    assert [name for name, _ in descs] == ["0", "2", "4"]
    back = conv3djit.read_manifest(str(path))
    assert back == descs
    assert all(d.precision == "tf32" for _, d in back)
    assert back[1][1] == conv3djit.Conv3dDesc((2, 8, 8, 12, 12), 8, (1, 3, 3), (1, 2, 2), (0, 1, 1), 1, 2, True,
                                              "tf32")
    for _, d in back:
        assert not conv3djit.precompile(d).main.compiled  # warm-up loaded every kernel
