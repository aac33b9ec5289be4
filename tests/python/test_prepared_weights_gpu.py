"""Prepared weights on a CUDA device: a layer of each kind of weights step (igemm_sm90's chunks in
the fp32 class, igemm_sm90_half's channels-last copy in bf16) and two without (igemm_sm90's tf32
chunks read the weight by TMA; a small fp32 layer converts it in each block), each run with and
without Engine.prepare_weights to the same bits, also at another batch size; the counter; calls
with another weight tensor or weight shape refused before anything is written."""
import pytest

from conftest import needs_gpu, needs_torch

pytestmark = [needs_gpu, needs_torch]

torch = pytest.importorskip("torch")

import conv3djit  # noqa: E402
from conv3djit import Conv3dDesc  # noqa: E402

CASES = {
    "fp32_pointwise": dict(input_shape=(2, 256, 4, 14, 14), out_channels=512, kernel_size=1),
    "tf32_pointwise": dict(input_shape=(2, 256, 4, 14, 14), out_channels=512, kernel_size=1, precision="tf32"),
    "bf16_ncdhw": dict(input_shape=(2, 64, 6, 10, 12), out_channels=64, kernel_size=3, padding=1, bias=True,
                       dtype="bf16"),
    "fp32_small": dict(input_shape=(1, 4, 6, 7, 8), out_channels=3, kernel_size=3),
}


@pytest.mark.parametrize("name", CASES)
def test_prepared_weights_give_the_same_bits(engine, name):
    desc = Conv3dDesc(**CASES[name])
    dtype = getattr(torch, desc.dtype)
    x = torch.empty(desc.input_shape, device="cuda").uniform_(-1, 1).to(dtype)
    w = torch.empty(desc.weight_shape, device="cuda").uniform_(-1, 1).to(dtype)
    b = torch.empty(desc.out_channels, device="cuda").uniform_(-1, 1).to(dtype) if desc.bias else None
    each_call = torch.full(desc.output_shape, float("nan"), device="cuda", dtype=dtype)
    engine.run(desc, x, w, b, out=each_call)
    steps = [s.role for s in engine.explain(desc).steps]
    prepared = engine.prepare_weights(desc, w)
    assert prepared.valid and (prepared.kernel != "") == ("weights" in steps) and (prepared.bytes > 0) == ("weights" in steps)
    once = torch.full_like(each_call, float("nan"))
    before = engine.stats().prepared_weight_reads
    engine.run(desc, x, w, b, out=once, prepared_weights=prepared)
    torch.cuda.synchronize()
    assert engine.stats().prepared_weight_reads == before + ("weights" in steps)
    assert torch.equal(once, each_call)

    # Another description of the same weights (the first image alone) reads them too.
    first = Conv3dDesc(**{**CASES[name], "input_shape": (1, *desc.input_shape[1:])})
    alone, alone_prepared = (torch.full(first.output_shape, float("nan"), device="cuda", dtype=dtype) for _ in range(2))
    engine.run(first, x[:1], w, b, out=alone)
    engine.run(first, x[:1], w, b, out=alone_prepared, prepared_weights=prepared)
    torch.cuda.synchronize()
    assert torch.equal(alone_prepared, alone)

    # Another weight tensor, or other weights at the same address (the first half of the rows):
    # refused before anything is written.
    untouched = torch.full_like(each_call, float("nan"))
    with pytest.raises(conv3djit.InvalidArgument, match="were made from the weights at"):
        engine.run(desc, x, w.clone(), b, out=untouched, prepared_weights=prepared)
    half = Conv3dDesc(**{**CASES[name], "out_channels": desc.out_channels // 2})
    half_out = torch.full(half.output_shape, float("nan"), device="cuda", dtype=dtype)
    with pytest.raises(conv3djit.InvalidArgument, match="were prepared for weights of"):
        engine.run(half, x, w[:half.out_channels], None if b is None else b[:half.out_channels], out=half_out,
                   prepared_weights=prepared)
    torch.cuda.synchronize()
    assert torch.isnan(untouched).all() and torch.isnan(half_out).all()


def test_module_prepares_once_and_again_after_an_in_place_update():
    import conv3djit.torch as ct

    conv = ct.Conv3d(256, 512, 1, bias=False, precision="fp32", prepared_weights=True).cuda()
    plain = ct.Conv3d(256, 512, 1, bias=False, precision="fp32").cuda()
    plain.load_state_dict(conv.state_dict())
    x = torch.empty(2, 256, 4, 14, 14, device="cuda").uniform_(-1, 1)
    engine = conv3djit.default_engine()
    with torch.no_grad():
        before = engine.stats().prepared_weight_reads
        first, second = conv(x), conv(x)
        assert engine.stats().prepared_weight_reads == before + 2  # (pointwise fp32: igemm_sm90's weights step)
        assert torch.equal(first, plain(x)) and torch.equal(second, first)
        prepared = conv._prepared._prepared  # (the kept copy)
        assert prepared is not None
        conv.weight.mul_(-0.5)
        plain.weight.mul_(-0.5)
        assert torch.equal(conv(x), plain(x))  # prepared again: the update bumped the weight's _version
        assert conv._prepared._prepared is not prepared
    # With autograd the call goes through the op, which prepares its own weights.
    before = engine.stats().prepared_weight_reads
    y = conv(x.requires_grad_())
    y.sum().backward()
    assert engine.stats().prepared_weight_reads == before and x.grad is not None
