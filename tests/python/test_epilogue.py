"""The epilogue without a GPU: out = act(alpha * conv + bias) * gamma + beta * residual in
descriptions (every activation, repr, equality, hashing, the C++ checks of the scalars), the
residual array's checks on every path, manifests, kernel keys for sm_90, and the CPU reference
with each activation and a residual against a NumPy float64 composition."""
import json
import math
import re

import numpy as np
import pytest

import conv3djit
from conv3djit import Conv3dDesc

ACTIVATIONS = ["identity", "relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "hardswish",
               "clamp"]
SCALARS = ["alpha", "slope", "clamp_min", "clamp_max", "gamma", "beta"]
PLAIN = dict(activation="identity", alpha=1.0, slope=0.01, clamp_min=0.0, clamp_max=6.0, gamma=1.0, residual=False,
             beta=1.0)
SHAPE = dict(input_shape=(2, 4, 5, 6, 7), out_channels=6, kernel_size=3, padding=1, bias=True)


def _desc(**epilogue):
    return Conv3dDesc(**SHAPE, **epilogue)


def test_plain_epilogue_by_default():
    d = _desc()
    assert {key: getattr(d, key) for key in PLAIN} == PLAIN
    assert d == _desc(**PLAIN) and hash(d) == hash(_desc(**PLAIN))
    assert "activation" not in repr(d) and "residual" not in repr(d) and "alpha" not in repr(d)
    assert str(d).endswith("_bias_fp32")  # describe() adds nothing for the plain epilogue


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_activation_by_name(name):
    d = _desc(activation=name.upper())  # any case
    assert d.activation == name and d == _desc(activation=name)
    assert eval(repr(d), {"Conv3dDesc": Conv3dDesc}) == d
    assert conv3djit.validate(d) and d.output_shape == (2, 6, 5, 6, 7)
    if name == "identity":
        assert d == _desc()
    else:
        assert d != _desc() and f"activation='{name}'" in repr(d) and name in str(d)


def test_scalars_read_as_given():
    d = _desc(activation="clamp", alpha=0.2, slope=0.3, clamp_min=-1.5, clamp_max=2.25, gamma=1e-3, residual=True,
              beta=-0.7)
    # Stored as float32, read back as the shortest decimal of it: the values given.
    assert (d.alpha, d.slope, d.clamp_min, d.clamp_max, d.gamma, d.beta) == (0.2, 0.3, -1.5, 2.25, 1e-3, -0.7)
    assert d.residual is True
    text = repr(d)
    assert ("activation='clamp'" in text and "residual=True" in text and "alpha=0.2" in text and "slope=0.3" in text
            and "beta=-0.7" in text)
    assert eval(text, {"Conv3dDesc": Conv3dDesc}) == d
    assert "_a0.2_clamp-1.5-2.25_g0.001_res-0.7" in str(d)


@pytest.mark.parametrize("field,value", [(name, 0.5) for name in SCALARS] + [("residual", True),
                                                                               ("activation", "silu")])
def test_each_field_takes_part_in_equality_and_hash(field, value):
    changed = _desc(**{field: value})
    assert changed != _desc()
    assert changed == _desc(**{field: value}) and hash(changed) == hash(_desc(**{field: value}))
    assert len({_desc(), changed}) == 2
    assert f"{field}=" in repr(changed)


def test_unknown_activation_names_the_value_and_the_names():
    with pytest.raises(conv3djit.InvalidArgument, match="activation = 'swish': expected one of 'identity', 'relu', "
                                                        "'leaky_relu', 'gelu', 'gelu_tanh', 'silu', 'sigmoid', "
                                                        "'tanh', 'hardswish', 'clamp'"):
        _desc(activation="swish")
    with pytest.raises(conv3djit.InvalidArgument, match="activation = 'swish'"):
        conv3djit.conv3d(np.zeros((1, 2, 3, 3, 3), np.float32), np.zeros((2, 2, 1, 1, 1), np.float32),
                         activation="swish")


@pytest.mark.parametrize("field", SCALARS)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scalars_are_invalid(field, value):
    d = _desc(**{field: value})  # built, as any description; the C++ validate() refuses it
    v = conv3djit.validate(d)
    shown = "nan" if value != value else ("inf" if value > 0 else "-inf")
    assert not v and v.category == "invalid_argument" and v.message == f"epilogue.{field} = {shown}: must be finite"
    with pytest.raises(conv3djit.InvalidArgument, match=f"epilogue.{field} = {shown}"):
        d.output_shape
    assert f"{field}=float('{shown}')" in repr(d)


def test_reversed_clamp_bounds():
    with pytest.raises(conv3djit.InvalidArgument, match="clamp_min = 2 > epilogue.clamp_max = 1: the clamp's bounds"):
        _desc(activation="clamp", clamp_min=2, clamp_max=1).output_shape
    assert conv3djit.validate(_desc(activation="relu", clamp_min=2, clamp_max=1))  # bounds unused without clamp


def _arrays(desc, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, desc.input_shape).astype(np.float32)
    w = rng.uniform(-1, 1, desc.weight_shape).astype(np.float32)
    b = rng.uniform(-1, 1, (desc.out_channels,)).astype(np.float32) if desc.bias else None
    r = rng.uniform(-1, 1, desc.output_shape).astype(np.float32)
    out = np.full(desc.output_shape, np.nan, dtype=np.float32)
    return x, w, b, r, out


def test_residual_array_checks():
    desc = _desc(activation="relu", residual=True)
    x, w, b, r, out = _arrays(desc)
    run = conv3djit.default_engine().run
    cases = [
        (dict(residual=None), conv3djit.InvalidArgument,
         "residual: the description has residual = True, but no residual array was given"),
        (dict(residual=r[:, :3]), conv3djit.InvalidArgument,
         r"residual: shape \(2, 3, 5, 6, 7\) does not match the description, which needs \(2, 6, 5, 6, 7\)"),
        (dict(residual=r.astype(np.float64)), conv3djit.InvalidArgument,
         "residual: dtype float64, but the call needs float32"),
        (dict(residual=np.asfortranarray(r)), conv3djit.Unsupported, "residual: not contiguous"),
        (dict(), conv3djit.Unsupported, "input: on cpu"),
    ]
    for change, cls, pattern in cases:
        args = dict(residual=r)
        args.update(change)
        with pytest.raises(cls, match=pattern):
            run(desc, x, w, b, out=out, residual=args["residual"])
        v = conv3djit.validate(desc, x, w, b, out, residual=args["residual"])
        assert not v and v.category == cls.category and re.search(pattern, v.message)
        with pytest.raises(cls, match=pattern):
            conv3djit.default_engine().run_reference(desc, x, w, b, out=out.astype(np.float64),
                                                     residual=args["residual"])
        assert np.isnan(out).all()  # nothing written
    refused = "residual: an array was given, but the description has residual = False"
    with pytest.raises(conv3djit.InvalidArgument, match=refused):
        run(_desc(activation="relu"), x, w, b, out=out, residual=r)
    assert conv3djit.validate(_desc(), x, w, b, out, residual=r).message == refused
    assert np.isnan(out).all()


def test_keyword_form_of_validate_takes_the_flags():
    x, w, b, r, out = _arrays(_desc(residual=True))
    assert conv3djit.validate(**SHAPE, activation="relu", residual=True)  # SHAPE has bias=True
    assert not conv3djit.validate(**SHAPE, residual=True, beta=float("inf"))
    v = conv3djit.validate(_desc(residual=True), x, w, b, out)
    assert not v and "no residual array was given" in v.message
    v = conv3djit.validate(_desc(residual=True), x, w, b, out, residual=r)
    assert not v and "input: on cpu" in v.message  # every other check passed


def test_array_call_builds_the_epilogue():
    x, w, b, r, out = _arrays(_desc(residual=True))
    # A valid call on host arrays gets past every check of the epilogue and the residual to the device.
    with pytest.raises(conv3djit.Unsupported, match="input: on cpu"):
        conv3djit.conv3d(x, w, b, padding=1, out=out, residual=r, activation="Gelu", alpha=0.5, gamma=2, beta=-1)
    with pytest.raises(conv3djit.InvalidArgument, match="epilogue.gamma = inf"):
        conv3djit.conv3d(x, w, b, padding=1, out=out, residual=r, activation="gelu", gamma=float("inf"))
    with pytest.raises(conv3djit.InvalidArgument, match=r"residual: shape \(2, 6, 5, 6, 6\)"):
        conv3djit.conv3d(x, w, b, padding=1, out=out, residual=r[..., :6])
    assert np.isnan(out).all()


def test_pointer_call_checks_the_residual():
    engine = conv3djit.default_engine()
    # Checked before anything needs a device: the same errors with or without one.
    with pytest.raises(conv3djit.InvalidArgument, match="tensors.residual = null"):
        engine.run_pointers(_desc(residual=True), 16, 16, 16, 16, 0)
    with pytest.raises(conv3djit.InvalidArgument, match="tensors.residual is given but desc.epilogue.residual is false"):
        engine.run_pointers(_desc(), 16, 16, 16, 16, 0, residual=16)


def _gelu(v):
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))


def _numpy_epilogue(conv, bias, residual, d):
    """The formula in float64 NumPy, with the description's float32 scalars."""
    f = lambda value: float(np.float32(value))  # noqa: E731
    slope, low, high = f(d.slope), f(d.clamp_min), f(d.clamp_max)
    act = {
        "identity": lambda v: v,
        "relu": lambda v: np.maximum(v, 0),
        "leaky_relu": lambda v: np.where(v >= 0, v, v * slope),
        "gelu": _gelu,
        "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))),
        "silu": lambda v: v / (1 + np.exp(-v)),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "tanh": np.tanh,
        "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
        "clamp": lambda v: np.clip(v, low, high),
    }[d.activation]
    v = act(f(d.alpha) * conv + bias.astype(np.float64).reshape(1, -1, 1, 1, 1)) * f(d.gamma)
    return v if residual is None else v + f(d.beta) * residual.astype(np.float64)


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_cpu_reference_applies_the_epilogue(name, residual):
    # alpha brings the sums (about +-5) into each activation's bends (hardswish's +-3, the clamp's bounds).
    d = _desc(activation=name, alpha=0.35, slope=0.2, clamp_min=-0.5, clamp_max=1.25, gamma=1.5, residual=residual,
              beta=-0.75)
    x, w, b, r, _ = _arrays(d, seed=4)
    conv = conv3djit.reference_conv3d(Conv3dDesc(**{**SHAPE, "bias": False}), x, w)
    got = conv3djit.reference_conv3d(d, x, w, b, residual=r if residual else None)
    expected = _numpy_epilogue(conv, b, r if residual else None, d)
    assert got.dtype == np.float64 and got.shape == d.output_shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_cpu_reference_residual_checks():
    d = _desc(residual=True)
    x, w, b, r, _ = _arrays(d)
    with pytest.raises(conv3djit.InvalidArgument, match="residual: the description has residual = True, but no "
                                                        "residual array was given"):
        conv3djit.reference_conv3d(d, x, w, b)
    with pytest.raises(conv3djit.InvalidArgument, match="residual: an array was given, but the description has "
                                                        "residual = False"):
        conv3djit.reference_conv3d(_desc(), x, w, b, residual=r)
    with pytest.raises(conv3djit.InvalidArgument, match=r"residual: shape \(2, 6, 5, 6\) does not match"):
        conv3djit.reference_conv3d(d, x, w, b, residual=r[..., 0])
    with pytest.raises(conv3djit.InvalidArgument, match="epilogue.beta = nan"):
        conv3djit.reference_conv3d(_desc(residual=True, beta=float("nan")), x, w, b, residual=r)


def test_manifest_round_trip_of_the_epilogue(tmp_path):
    descs = [("plain", _desc()),
             ("block", _desc(activation="relu", residual=True)),
             ("scaled", _desc(activation="leaky_relu", slope=0.2, alpha=0.5, gamma=2.0, residual=True, beta=-0.3)),
             ("relu6", _desc(activation="CLAMP", clamp_min=-1.0, clamp_max=6.0)),
             (None, Conv3dDesc((1, 8, 4, 4, 4), 8, 1, activation="gelu_tanh", precision="tf32"))]
    path = tmp_path / "fused.jsonl"
    assert conv3djit.write_manifest(str(path), descs) == len(descs)
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    epilogue_keys = set(PLAIN)
    assert not epilogue_keys & set(lines[0])  # only what differs from the plain convolution
    assert {k: lines[1][k] for k in epilogue_keys & set(lines[1])} == {"activation": "relu", "residual": True}
    assert {k: lines[2][k] for k in epilogue_keys & set(lines[2])} == {"activation": "leaky_relu", "slope": 0.2,
                                                                       "alpha": 0.5, "gamma": 2.0, "residual": True,
                                                                       "beta": -0.3}
    assert {k: lines[3][k] for k in epilogue_keys & set(lines[3])} == {"activation": "clamp", "clamp_min": -1.0}
    back = conv3djit.read_manifest(str(path))
    assert [d for _, d in back] == [d for _, d in descs]
    assert back[4][0] == conv3djit.describe(descs[4][1])


@pytest.mark.parametrize("extra,pattern", [
    ('"activation": "swish"', "activation = 'swish': expected one of"),
    ('"activation": 3', "key 'activation': expected a string, got 3"),
    ('"alpha": "0.5"', "key 'alpha': expected a number, got \"0.5\""),
    ('"beta": true', "key 'beta': expected a number, got true"),
    ('"residual": 1', "key 'residual': expected true or false, got 1"),
    ('"activation": "clamp", "clamp_min": 3, "clamp_max": 1', "the clamp's bounds are reversed"),
    ('"gamma": NaN', "epilogue.gamma = nan: must be finite"),
    ('"slopes": 0.1', "key 'slopes': unknown key"),
])
def test_manifest_epilogue_errors(tmp_path, extra, pattern):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"input": [1, 2, 4, 4, 4], "out_channels": 2, "kernel": 3, ' + extra + "}\n")
    with pytest.raises(conv3djit.InvalidArgument, match=f"bad.jsonl:1: .*{pattern}"):
        conv3djit.read_manifest(str(path))


def test_manifest_scalars_may_be_integers(tmp_path):
    path = tmp_path / "ints.jsonl"
    path.write_text('{"input": [1, 2, 4, 4, 4], "out_channels": 2, "kernel": 3, "alpha": 2, "activation": "clamp",'
                    ' "clamp_min": -1, "clamp_max": 1}\n')
    [(_, d)] = conv3djit.read_manifest(str(path))
    assert (d.alpha, d.clamp_min, d.clamp_max, d.activation) == (2.0, -1.0, 1.0, "clamp")


def test_kernels_for_sm90_bake_in_the_epilogue_not_its_values(engine):
    shape = dict(input_shape=(1, 16, 8, 12, 12), out_channels=32, kernel_size=3, padding=1, bias=True)
    plain = engine.kernel_for(Conv3dDesc(**shape), "sm_90")
    fused = Conv3dDesc(**shape, activation="silu", alpha=0.5, residual=True)
    key = engine.kernel_for(fused, "sm_90")
    assert key != plain
    # The scalars' values are run-time arguments: one kernel serves all of them.
    assert engine.kernel_for(Conv3dDesc(**shape, activation="silu", alpha=2.0, residual=True, beta=-1.0),
                             "sm_90") == key
    assert engine.kernel_for(Conv3dDesc(**shape, activation="relu", alpha=0.5, residual=True), "sm_90") != key
    result = conv3djit.precompile(fused, arch="sm_90", engine=engine)
    assert result.main.compiled and result.main.kernel == key
