"""Padding modes without a GPU: padding_mode in descriptions (names in any case, repr, equality,
hashing, describe), the reflect and circular extents validate() refuses, manifests, kernel keys
for sm_90, and the C++ float64 CPU reference in every mode against NumPy's np.pad and against
PyTorch's F.pad + F.conv3d in float64."""
import json

import numpy as np
import pytest

import conv3djit
from conftest import needs_torch
from conv3djit import Conv3dDesc

MODES = ["reflect", "replicate", "circular"]
# nn.Conv3d's modes as np.pad's.
NUMPY_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
SHAPE = dict(input_shape=(2, 3, 5, 6, 7), out_channels=4, kernel_size=3, bias=True)
# (name, padding arguments, ((D, H, W) before, (D, H, W) after)).
PADDINGS = [
    ("symmetric", dict(padding=1), ((1, 1, 1), (1, 1, 1))),
    ("per_axis", dict(padding=(2, 1, 3)), ((2, 1, 3), (2, 1, 3))),
    ("causal", dict(padding_before=(2, 1, 1), padding_after=(0, 1, 1)), ((2, 1, 1), (0, 1, 1))),
    ("same_even_kernel", dict(kernel_size=(2, 4, 3), padding="same"), ((0, 1, 1), (1, 2, 1))),
]


def _desc(**changes):
    return Conv3dDesc(**{**SHAPE, "padding": 1, **changes})


def test_zeros_by_default():
    d = _desc()
    assert d.padding_mode == "zeros" and d == _desc(padding_mode="zeros") and d == _desc(padding_mode="ZEROS")
    assert "padding_mode" not in repr(d)
    assert str(d) == "N2_C3_D5_H6_W7_K4_k3x3x3_s1x1x1_p1x1x1_d1x1x1_g1_bias_fp32"


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_by_name(mode):
    d = _desc(padding_mode=mode.capitalize())  # any case
    assert d.padding_mode == mode and d == _desc(padding_mode=mode) and hash(d) == hash(_desc(padding_mode=mode))
    assert d != _desc() and len({d, _desc()} | {_desc(padding_mode=m) for m in MODES}) == 4
    assert f"padding=(1, 1, 1), padding_mode='{mode}'" in repr(d)
    assert eval(repr(d), {"Conv3dDesc": Conv3dDesc}) == d
    assert f"_p1x1x1_{mode}_d1x1x1" in str(d)
    assert conv3djit.validate(d) and d.output_shape == (2, 4, 5, 6, 7)


def test_repr_with_per_side_padding_and_an_epilogue():
    d = _desc(padding=0, padding_before=(2, 1, 1), padding_after=(0, 1, 1), padding_mode="replicate",
              activation="silu")
    assert ("padding_before=(2, 1, 1), padding_after=(0, 1, 1), padding_mode='replicate'" in repr(d)
            and repr(d).endswith("precision='fp32', activation='silu')"))
    assert eval(repr(d), {"Conv3dDesc": Conv3dDesc}) == d


def test_unknown_mode_names_the_value_and_the_names():
    expected = "padding_mode = 'mirror': expected one of 'zeros', 'reflect', 'replicate', 'circular'"
    with pytest.raises(conv3djit.InvalidArgument, match=expected):
        _desc(padding_mode="mirror")
    with pytest.raises(conv3djit.InvalidArgument, match="padding_mode = 'constant'"):
        conv3djit.conv3d(np.zeros((1, 2, 3, 3, 3), np.float32), np.zeros((2, 2, 1, 1, 1), np.float32),
                         padding_mode="constant")
    with pytest.raises(conv3djit.InvalidArgument, match="padding_mode = 'mirror'"):
        conv3djit.validate(**SHAPE, padding_mode="mirror")  # the keyword form builds the description


@pytest.mark.parametrize("axis,extent", [(0, 5), (1, 6), (2, 7)])
def test_reflect_needs_padding_below_the_extent(axis, extent):
    name = "DHW"[axis]
    before = [1, 1, 1]
    before[axis] = extent - 1
    assert conv3djit.validate(_desc(padding=0, padding_before=before, padding_mode="reflect"))
    before[axis] = extent
    v = conv3djit.validate(_desc(padding=0, padding_before=before, padding_mode="reflect"))
    assert not v and v.category == "invalid_argument"
    assert f"padding before {name} = {extent}" in v.message and "padding_mode='reflect' needs padding <" in v.message
    after = [0, 0, 0]
    after[axis] = extent
    with pytest.raises(conv3djit.InvalidArgument, match=f"padding after {name} = {extent}: padding_mode='reflect'"):
        _desc(padding=0, padding_after=after, padding_mode="reflect").output_shape
    assert conv3djit.validate(_desc(padding=0, padding_after=after, padding_mode="replicate"))  # any amount


@pytest.mark.parametrize("axis,extent", [(0, 5), (1, 6), (2, 7)])
def test_circular_needs_padding_at_most_the_extent(axis, extent):
    name = "DHW"[axis]
    amounts = [1, 1, 1]
    amounts[axis] = extent
    assert conv3djit.validate(_desc(padding=amounts, padding_mode="circular"))  # one full wrap
    amounts[axis] = extent + 1
    v = conv3djit.validate(_desc(padding=amounts, padding_mode="circular"))
    assert not v and v.category == "invalid_argument"
    assert f"{name} = {extent + 1}: padding_mode='circular' needs padding <=" in v.message
    with pytest.raises(conv3djit.InvalidArgument, match="padding_mode='circular'"):
        conv3djit.reference_conv3d(_desc(padding=amounts, padding_mode="circular"),
                                   *_arrays(_desc(padding=amounts))[:3])
    assert conv3djit.validate(_desc(padding=amounts))  # zeros: any amount


def test_same_padding_is_checked_as_resolved():
    # 'same' of a 7-wide kernel pads 3 on each side: too much to reflect an extent of 3.
    d = Conv3dDesc((1, 2, 3, 8, 8), 2, (7, 3, 3), padding="same", padding_mode="reflect")
    assert not conv3djit.validate(d) and "padding before D = 3" in conv3djit.validate(d).message
    assert conv3djit.validate(Conv3dDesc((1, 2, 3, 8, 8), 2, (7, 3, 3), padding="same", padding_mode="circular"))


def test_manifest_round_trip_of_the_mode(tmp_path):
    descs = [("zeros", _desc()), ("reflect", _desc(padding_mode="reflect")),
             ("causal", _desc(padding=0, padding_before=(2, 1, 1), padding_after=(0, 1, 1),
                              padding_mode="replicate", activation="silu")),
             (None, Conv3dDesc((1, 8, 4, 4, 4), 8, 3, padding="same", padding_mode="circular", precision="tf32"))]
    path = tmp_path / "modes.jsonl"
    assert conv3djit.write_manifest(str(path), descs) == len(descs)
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    assert "padding_mode" not in lines[0]  # written only where it is not zeros
    assert [line.get("padding_mode") for line in lines[1:]] == ["reflect", "replicate", "circular"]
    back = conv3djit.read_manifest(str(path))
    assert [d for _, d in back] == [d for _, d in descs]
    assert back[3][0] == conv3djit.describe(descs[3][1])


@pytest.mark.parametrize("extra,pattern", [
    ('"padding_mode": "mirror"', "padding_mode = 'mirror': expected one of 'zeros', 'reflect'"),
    ('"padding_mode": 1', "key 'padding_mode': expected a string, got 1"),
    ('"padding": 4, "padding_mode": "reflect"', "padding before D = 4: padding_mode='reflect'"),
    ('"padding": 5, "padding_mode": "circular"', "padding before D = 5: padding_mode='circular'"),
])
def test_manifest_mode_errors(tmp_path, extra, pattern):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"input": [1, 2, 4, 4, 4], "out_channels": 2, "kernel": 3, ' + extra + "}\n")
    with pytest.raises(conv3djit.InvalidArgument, match=f"bad.jsonl:1: .*{pattern}"):
        conv3djit.read_manifest(str(path))


def test_manifest_mode_in_any_case(tmp_path):
    path = tmp_path / "case.jsonl"
    path.write_text('{"input": [1, 2, 4, 4, 4], "out_channels": 2, "kernel": 3, "padding": 1, '
                    '"padding_mode": "Replicate"}\n')
    [(_, d)] = conv3djit.read_manifest(str(path))
    assert d.padding_mode == "replicate"


def test_kernels_for_sm90_bake_in_the_mode(engine):
    shape = dict(input_shape=(1, 16, 8, 12, 12), out_channels=32, kernel_size=3, padding=1, bias=True)
    keys = {mode: engine.kernel_for(Conv3dDesc(**shape, padding_mode=mode), "sm_90") for mode in ["zeros", *MODES]}
    assert len(set(keys.values())) == 4
    result = conv3djit.precompile(Conv3dDesc(**shape, padding_mode="reflect"), arch="sm_90", engine=engine)
    assert result.main.compiled and result.main.kernel == keys["reflect"]


def _arrays(desc, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, desc.input_shape).astype(np.float32)
    w = rng.uniform(-1, 1, desc.weight_shape).astype(np.float32)
    b = rng.uniform(-1, 1, (desc.out_channels,)).astype(np.float32) if desc.bias else None
    return x, w, b


def _padding_id(case):
    return case[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", PADDINGS, ids=_padding_id)
def test_cpu_reference_against_numpy_pad(mode, case):
    _, padding, (before, after) = case
    d = Conv3dDesc(**{**SHAPE, **padding}, padding_mode=mode)
    assert conv3djit.resolved_padding(d) == (before, after)
    x, w, b = _arrays(d, seed=1)
    padded = np.pad(x, [(0, 0), (0, 0)] + list(zip(before, after)), mode=NUMPY_MODES[mode])
    unpadded = Conv3dDesc(padded.shape, d.out_channels, d.kernel_size, bias=True)
    expected = conv3djit.reference_conv3d(unpadded, np.ascontiguousarray(padded), w, b)
    got = conv3djit.reference_conv3d(d, x, w, b)
    assert got.shape == d.output_shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


ACTIVATIONS = ["identity", "relu", "silu", "leaky_relu"]


def _torch_expected(x, w, b, before, after, mode, d):
    """F.pad in the mode, F.conv3d and the activation in float64: PyTorch's composition."""
    import torch
    F = torch.nn.functional
    x, w, b = (torch.from_numpy(t).double() for t in (x, w, b))
    pads = [amount for axis in (2, 1, 0) for amount in (before[axis], after[axis])]
    y = F.conv3d(F.pad(x, pads, mode=mode), w, b, d.stride, 0, d.dilation, d.groups)
    act = {"identity": lambda v: v, "relu": F.relu, "silu": F.silu,
           "leaky_relu": lambda v: F.leaky_relu(v, float(np.float32(d.slope)))}[d.activation]
    return act(y).numpy()


@needs_torch
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", PADDINGS, ids=_padding_id)
def test_cpu_reference_against_pytorch(mode, case, activation):
    _, padding, (before, after) = case
    d = Conv3dDesc(**{**SHAPE, **padding}, padding_mode=mode, activation=activation, slope=0.2)
    x, w, b = _arrays(d, seed=2)
    expected = _torch_expected(x, w, b, before, after, mode, d)
    np.testing.assert_allclose(conv3djit.reference_conv3d(d, x, w, b), expected, rtol=1e-11, atol=1e-11)


@needs_torch
@pytest.mark.parametrize("mode", MODES)
def test_cpu_reference_with_stride_dilation_and_groups_against_pytorch(mode):
    d = Conv3dDesc((1, 4, 7, 8, 9), 6, (3, 2, 3), stride=(2, 1, 2), padding=(2, 1, 3), dilation=(1, 2, 1),
                   groups=2, bias=True, padding_mode=mode)
    x, w, b = _arrays(d, seed=3)
    expected = _torch_expected(x, w, b, (2, 1, 3), (2, 1, 3), mode, d)
    np.testing.assert_allclose(conv3djit.reference_conv3d(d, x, w, b), expected, rtol=1e-11, atol=1e-11)
