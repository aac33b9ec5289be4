"""bf16, fp16, the NDHWC layout and float32 outputs of half inputs without a GPU: descriptions and
their names, manifests, tolerances, the CPU reference of every type and layout against a float64
numpy convolution of the same values, compare(), and the array checks (dtype, layout strides)."""
import json

import numpy as np
import pytest

import conv3djit
from conv3djit import Conv3dDesc
from conv3djit import _api

SHAPE = dict(input_shape=(2, 4, 5, 6, 7), out_channels=6, kernel_size=(3, 2, 3), stride=(1, 2, 1),
             padding=(1, 0, 2), dilation=(1, 1, 2), groups=2, bias=True)

# (N, C, D, H, W) <-> the NDHWC memory order, as numpy transposes.
TO_NDHWC, FROM_NDHWC = (0, 2, 3, 4, 1), (0, 4, 1, 2, 3)


def _desc(**changes):
    return Conv3dDesc(**{**SHAPE, **changes})


def test_dtype_names_pytorchs_and_conv3djits():
    for long, short in [("float32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16")]:
        d = _desc(dtype=short)
        assert d == _desc(dtype=long) == _desc(dtype=long.upper()) and hash(d) == hash(_desc(dtype=long))
        assert d.dtype == long and d.output_dtype == long and not d.fp32_output
    assert _desc().dtype == "float32" and _desc().layout == "ncdhw"
    assert len({_desc(), _desc(dtype="bf16"), _desc(dtype="fp16"), _desc(layout="ndhwc"),
                _desc(dtype="bf16", fp32_output=True)}) == 5


def test_fp32_output_layout_and_their_names():
    d = _desc(dtype="bf16", layout="NDHWC", fp32_output=True, precision="tf32")
    assert d.dtype == "bfloat16" and d.output_dtype == "float32" and d.fp32_output and d.layout == "ndhwc"
    assert d.precision == "tf32"  # kept; the library ignores it for half inputs
    assert str(d).endswith("_bf16_out32_ndhwc") and str(_desc(dtype="fp16")).endswith("_fp16")
    assert "dtype='bfloat16', layout='ndhwc', fp32_output=True" in repr(d)
    assert "dtype" not in repr(_desc()) and "layout" not in repr(_desc())
    for desc in (d, _desc(dtype="fp16"), _desc(layout="ndhwc"), _desc(dtype="fp16", fp32_output=True)):
        assert eval(repr(desc), {"Conv3dDesc": Conv3dDesc}) == desc
    # Shapes stay PyTorch's in both layouts.
    assert d.weight_shape == _desc().weight_shape == (6, 2, 3, 2, 3)
    assert d.output_shape == _desc().output_shape and d.input_shape == SHAPE["input_shape"]
    assert conv3djit.validate(d) and conv3djit.validate(_desc(fp32_output=True))


def test_unknown_dtype_and_layout():
    with pytest.raises(conv3djit.Unsupported, match="dtype = 'int8': conv3djit serves 'float32', 'bfloat16' and "
                                                    "'float16'"):
        _desc(dtype="int8")
    with pytest.raises(conv3djit.InvalidArgument, match="layout = 'channels_last': expected 'ncdhw' or 'ndhwc'"):
        _desc(layout="channels_last")


def test_tolerances_of_the_half_classes():
    assert conv3djit.tolerance(_desc(dtype="bf16")).rel_l2 == pytest.approx(4e-3)
    assert conv3djit.tolerance(_desc(dtype="fp16", layout="ndhwc")).rel_l2 == pytest.approx(5e-4)
    assert conv3djit.tolerance(_desc(dtype="bf16", fp32_output=True)).rel_l2 == pytest.approx(1e-5)
    assert conv3djit.tolerance(_desc(precision="tf32")).rel_l2 == conv3djit.tolerance("tf32").rel_l2
    assert conv3djit.tolerance(_desc(dtype="fp16", precision="tf32")).rel_l2 == pytest.approx(5e-4)  # ignored


def test_manifest_keys_are_the_clis(tmp_path):
    descs = [("a", _desc(dtype="bf16", layout="ndhwc")), ("b", _desc(dtype="fp16", fp32_output=True)),
             ("c", _desc(layout="ndhwc"))]
    path = tmp_path / "half.jsonl"
    conv3djit.write_manifest(str(path), descs)
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    assert (lines[0]["dtype"], lines[0]["layout"]) == ("bf16", "ndhwc") and "fp32_output" not in lines[0]
    assert (lines[1]["dtype"], lines[1]["fp32_output"]) == ("fp16", True) and "layout" not in lines[1]
    assert "dtype" not in lines[2] and lines[2]["layout"] == "ndhwc"
    assert conv3djit.read_manifest(str(path)) == descs
    plain = conv3djit.manifest_line(_desc())
    assert not {"dtype", "layout", "fp32_output"} & set(plain)


@pytest.mark.parametrize("value,pattern", [
    ('"dtype": 16', "key 'dtype': expected a string, got 16"),
    ('"layout": true', "key 'layout': expected a string, got true"),
    ('"fp32_output": 1', "key 'fp32_output': expected true or false, got 1"),
    ('"dtype": "int8"', "dtype = 'int8'"),
    ('"layout": "nhwc"', "layout = 'nhwc'"),
])
def test_manifest_type_errors_name_file_and_line(tmp_path, value, pattern):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"input": [1, 2, 4, 4, 4], "out_channels": 2, "kernel": 3, %s}\n' % value)
    with pytest.raises(conv3djit.InvalidArgument, match=f"bad.jsonl:1: .*{pattern}"):
        conv3djit.read_manifest(str(path))


def test_precompile_half_and_ndhwc_for_sm90(engine):
    for desc in (_desc(dtype="bf16", layout="ndhwc"), _desc(dtype="fp16", fp32_output=True)):
        main = conv3djit.precompile(desc, arch="sm_90", engine=engine).main
        assert main.on_disk and main.kernel == engine.kernel_for(desc, "sm_90")
        assert ("bf16" in main.kernel) == (desc.dtype == "bfloat16") and ("ndhwc" in main.kernel) == (
            desc.layout == "ndhwc")


def test_grouped_half_layers_of_4_or_8_channels_a_group_plan_grouped_mma(engine):
    """bf16 / fp16 grouped layers whose groups have 4 or a multiple of 8 channels in and out (ResNeXt's)
    run grouped_mma's tensor cores on sm_80 and sm_90 in both layouts; groups of 2 channels, and
    float32, stay on the grouped kernel. Nothing needs a GPU."""
    for shape, k in (((8, 256, 8, 28, 28), 256), ((8, 128, 16, 56, 56), 128)):
        for changes in (dict(dtype="bf16"), dict(dtype="fp16", layout="ndhwc"), dict(dtype="bf16", fp32_output=True)):
            desc = Conv3dDesc(shape, k, 3, padding=1, groups=32, bias=True, **changes)
            for arch in ("sm_80", "sm_90"):
                assert engine.kernel_for(desc, arch).startswith("grouped_mma "), (desc, arch)
    pairs = Conv3dDesc((2, 8, 5, 6, 7), 8, 3, padding=1, groups=4, dtype="bf16")
    assert engine.kernel_for(pairs, "sm_90").startswith("grouped ")
    assert engine.kernel_for(Conv3dDesc((8, 256, 8, 28, 28), 256, 3, padding=1, groups=32), "sm_90").startswith(
        "grouped ")


def test_channels_last_float32_and_few_channel_half_layers_plan_wgmma_for_sm90(engine):
    """Float32 channels_last_3d layers of one group (both classes), and half ones of fewer than 8
    channels, run igemm_sm90 on Hopper from a transposed copy of the input, not the generic kernel;
    precompile builds the copy too. Grouped NDHWC layers run the grouped kernel. tf32-class layers of
    32 input and 64 output channels or more run igemm_sm90_half, which reads them in place; narrower
    outputs stay with igemm_sm90's 32-column tiles."""
    dense = dict(SHAPE, groups=1, layout="ndhwc")
    for changes in (dict(precision="fp32"), dict(precision="tf32"), dict(dtype="bf16", input_shape=(2, 3, 5, 6, 7))):
        desc = Conv3dDesc(**{**dense, **changes})
        kernel = engine.kernel_for(desc, "sm_90")
        assert kernel.startswith("igemm_sm90 ") and " ndhwc " in kernel, kernel
        kernels = [k.kernel for k in conv3djit.precompile(desc, arch="sm_90", engine=engine).kernels]
        assert any(k.startswith("pitch_rows ") and " ndhwc" in k for k in kernels), kernels
    assert engine.kernel_for(_desc(layout="ndhwc"), "sm_90").startswith("grouped ")
    wide = Conv3dDesc(**{**dense, "precision": "tf32", "input_shape": (2, 64, 5, 6, 7), "out_channels": 64})
    assert engine.kernel_for(wide, "sm_90").startswith("igemm_sm90_half fp32 ndhwc ")
    narrow = Conv3dDesc(**{**dense, "precision": "tf32", "input_shape": (2, 64, 5, 6, 7), "out_channels": 32})
    assert engine.kernel_for(narrow, "sm_90").startswith("igemm_sm90 fp32 ndhwc ")
    kernels = [k.kernel for k in conv3djit.precompile(wide, arch="sm_90", engine=engine).kernels]
    assert len(kernels) == 2 and all(k.startswith("igemm_sm90_half ") for k in kernels), kernels  # and its twin


# --- The CPU reference against a float64 numpy convolution of the same values ---------------------

def _numpy_conv3d(x, w, b, d):
    """F.conv3d in float64 numpy (zero padding), through sliding windows: independent of conv3djit."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    (before, after) = conv3djit.resolved_padding(d)
    x = np.pad(x, [(0, 0), (0, 0)] + list(zip(before, after)))
    g, (k, cg) = d.groups, w.shape[:2]
    out = []
    for group in range(g):
        xg = x[:, group * cg:(group + 1) * cg]
        span = [dil * (kk - 1) + 1 for dil, kk in zip(d.dilation, d.kernel_size)]
        windows = np.lib.stride_tricks.sliding_window_view(xg, span, axis=(2, 3, 4))
        windows = windows[:, :, ::d.stride[0], ::d.stride[1], ::d.stride[2],
                          ::d.dilation[0], ::d.dilation[1], ::d.dilation[2]]
        wg = w[group * (k // g):(group + 1) * (k // g)]
        out.append(np.einsum("ncdhwijl,kcijl->nkdhw", windows, wg))
    y = np.concatenate(out, axis=1)
    return y if b is None else y + b.astype(np.float64).reshape(1, -1, 1, 1, 1)


def _bf16_bits(values):
    """float32 values rounded to bf16 (nearest even), as uint16 bit patterns, and those values."""
    u = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def _half_arrays(d, seed=0):
    """Fresh uniform values in [-1, 1) of desc d's shapes: (the arrays the reference takes, their
    float64 values), bf16 as uint16 bit patterns, fp16 as numpy float16; in PyTorch's shapes."""
    rng = np.random.default_rng(seed)
    shapes = [d.input_shape, d.weight_shape, (d.out_channels,)]
    given, values = [], []
    for shape in shapes:
        v = rng.uniform(-1, 1, shape).astype(np.float32)
        if d.dtype == "bfloat16":
            bits, v = _bf16_bits(v)
            given.append(bits)
        elif d.dtype == "float16":
            v = v.astype(np.float16)
            given.append(v)
        else:
            given.append(v)
        values.append(v.astype(np.float64))
    return given, values


def _as_layout(a, layout):
    """A 5-dim array laid out in a layout's memory order, in PyTorch's shape (a transposed view)."""
    if layout == "ncdhw" or a.ndim != 5:
        return np.ascontiguousarray(a)
    return np.ascontiguousarray(a.transpose(TO_NDHWC)).transpose(FROM_NDHWC)


@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
@pytest.mark.parametrize("dtype,fp32_output", [("bf16", False), ("fp16", False), ("bf16", True), ("fp16", True),
                                                ("fp32", False)])
def test_cpu_reference_against_numpy(dtype, fp32_output, layout):
    d = _desc(dtype=dtype, fp32_output=fp32_output, layout=layout)
    (x, w, b), (xv, wv, bv) = _half_arrays(d, seed=1)
    got = conv3djit.reference_conv3d(d, _as_layout(x, layout), _as_layout(w, layout), b)
    assert got.dtype == np.float64 and got.shape == d.output_shape
    # The result is in the layout's memory order: channels_last_3d strides for NDHWC.
    order = TO_NDHWC if layout == "ndhwc" else range(5)
    assert np.transpose(got, order).flags.c_contiguous
    np.testing.assert_allclose(got, _numpy_conv3d(xv, wv, bv, d), rtol=1e-12, atol=1e-12)


def test_cpu_reference_reads_any_strides():
    d = _desc(dtype="fp16", layout="ndhwc")
    (x, w, b), _ = _half_arrays(d, seed=2)
    dense = conv3djit.reference_conv3d(d, _as_layout(x, "ndhwc"), _as_layout(w, "ndhwc"), b)
    # C order (the other layout's), a reversed view and a strided bias: copied into the layout first.
    np.testing.assert_array_equal(conv3djit.reference_conv3d(d, x, w, b), dense)
    flipped = np.ascontiguousarray(x[:, :, ::-1])[:, :, ::-1]
    np.testing.assert_array_equal(conv3djit.reference_conv3d(d, flipped, w, np.repeat(b, 2)[::2]), dense)


def test_cpu_reference_epilogue_and_residual_of_the_output_type():
    for dtype, fp32_output in [("fp16", False), ("bf16", True)]:
        d = _desc(dtype=dtype, fp32_output=fp32_output, layout="ndhwc", activation="relu", residual=True, beta=0.5)
        (x, w, b), (xv, wv, bv) = _half_arrays(d, seed=3)
        r = np.random.default_rng(4).uniform(-1, 1, d.output_shape).astype(np.float32)
        if not fp32_output:
            r = r.astype(np.float16)
        got = conv3djit.reference_conv3d(d, _as_layout(x, "ndhwc"), _as_layout(w, "ndhwc"), b,
                                         residual=_as_layout(r, "ndhwc"))
        expected = np.maximum(_numpy_conv3d(xv, wv, bv, d), 0) + 0.5 * r.astype(np.float64)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_cpu_reference_type_errors():
    d = _desc(dtype="bf16")
    (x, w, b), _ = _half_arrays(d)
    with pytest.raises(conv3djit.InvalidArgument, match=r"input: dtype float32, but the description needs "
                                                        r"bfloat16 \(or uint16 bit patterns of it\)"):
        conv3djit.reference_conv3d(d, x.view(np.float16).astype(np.float32), w, b)
    with pytest.raises(conv3djit.InvalidArgument, match="weight: dtype uint16, but the description needs float32"):
        conv3djit.reference_conv3d(_desc(), x.astype(np.float32), w, b.astype(np.float32))
    r = np.zeros(d.output_shape, np.float16)
    with pytest.raises(conv3djit.InvalidArgument, match="residual: dtype float16, but the description needs float32"):
        conv3djit.reference_conv3d(_desc(dtype="bf16", fp32_output=True, residual=True), x, w, b, residual=r)
    with pytest.raises(conv3djit.InvalidArgument, match=r"bias: shape \(3,\) does not match"):
        conv3djit.reference_conv3d(d, x, w, b[:3])


def test_compare_reads_half_results_in_any_order():
    d = _desc(dtype="fp16", layout="ndhwc")
    (x, w, b), _ = _half_arrays(d, seed=5)
    ref = conv3djit.reference_conv3d(d, _as_layout(x, "ndhwc"), _as_layout(w, "ndhwc"), b)
    rounded = ref.astype(np.float16)  # numpy keeps the channels_last_3d strides
    assert conv3djit.compare(rounded, ref, conv3djit.tolerance(d)).passed
    assert conv3djit.compare(np.ascontiguousarray(rounded), ref, conv3djit.tolerance(d)).passed  # element order
    assert not conv3djit.compare(rounded, ref, conv3djit.tolerance(_desc(dtype="fp16", fp32_output=True))).passed
    bad = np.ascontiguousarray(rounded)
    bad[0, 0, 0, 0, 0] = np.nan
    assert conv3djit.compare(bad, ref, conv3djit.tolerance(d)).non_finite == 1
    with pytest.raises(conv3djit.InvalidArgument, match="got: dtype uint16"):
        conv3djit.compare(rounded.view(np.uint16), ref, conv3djit.tolerance(d))


# --- The GPU call's array checks, which run before the device is needed --------------------------

def _call_arrays(d, layout=None, out_dtype=None):
    layout = layout or d.layout
    numpy_type = {"float32": np.float32, "float16": np.float16}
    x = _as_layout(np.zeros(d.input_shape, numpy_type[d.dtype]), layout)
    w = _as_layout(np.zeros(d.weight_shape, numpy_type[d.dtype]), layout)
    b = np.zeros(d.out_channels, numpy_type[d.dtype])
    out = _as_layout(np.full(d.output_shape, np.nan, out_dtype or numpy_type[d.output_dtype]), layout)
    return x, w, b, out


def _refusal(d, x, w, b, out, **kwargs):
    v = conv3djit.validate(d, x, w, b, out, **kwargs)
    assert not v
    with pytest.raises(conv3djit.Error) as raised:
        conv3djit.default_engine().run(d, x, w, b, out=out, **kwargs)
    assert raised.value.category == v.category and str(raised.value).endswith(v.message)
    assert np.isnan(out).all()  # nothing written
    return v


def test_checks_pass_arrays_in_the_layout():
    for d in (_desc(dtype="fp16", layout="ndhwc"), _desc(layout="ndhwc"), _desc(dtype="fp16", fp32_output=True)):
        v = _refusal(d, *_call_arrays(d))
        assert v.category == "unsupported" and "input: on cpu" in v.message  # every other check passed


def test_checks_refuse_the_other_layouts_strides():
    d = _desc(dtype="fp16", layout="ndhwc")
    x, w, b, out = _call_arrays(d)
    v = _refusal(d, np.ascontiguousarray(x), w, b, out)
    assert v.category == "unsupported"
    assert v.message.startswith("input: not contiguous (strides (840, 210, 42, 7, 1) elements for shape "
                                "(2, 4, 5, 6, 7)): layout 'ndhwc' needs strides (840, 1, 168, 28, 4) "
                                "(channels_last_3d); these are the strides of layout 'ncdhw'"), v.message
    v = _refusal(d, x, np.ascontiguousarray(w), b, out)
    assert v.message.startswith("weight: not contiguous") and "layout 'ndhwc' needs" in v.message
    v = _refusal(d, x, w, b, np.ascontiguousarray(out))
    assert v.message.startswith("out: not contiguous")
    plain = _desc(dtype="fp16")
    v = _refusal(plain, x, np.ascontiguousarray(w), b, np.ascontiguousarray(out))
    assert v.message.startswith("input: not contiguous") and "describe the call with layout='ndhwc'" in v.message
    sliced = np.zeros((2, 6, 5, 6, 7), np.float16).transpose(TO_NDHWC)[..., :4].transpose(FROM_NDHWC)
    v = _refusal(d, sliced, w, b, out)
    assert "pass a dense copy in that memory format" in v.message


def test_size_one_axes_serve_both_layouts():
    d = Conv3dDesc((1, 1, 4, 4, 4), 1, 1, dtype="fp16", layout="ndhwc")
    x, w, out = (np.zeros(shape, np.float16) for shape in (d.input_shape, d.weight_shape, d.output_shape))
    out[:] = np.nan
    v = _refusal(d, x, w, None, out)  # C order is NDHWC too when C == K == 1
    assert "on cpu" in v.message


def test_checks_refuse_other_element_types():
    d = _desc(dtype="fp16")
    x, w, b, out = _call_arrays(d)
    v = _refusal(d, x.astype(np.float32), w, b, out)
    assert v.category == "invalid_argument"
    assert v.message == "input: dtype float32, but the description has dtype = 'float16'"
    v = _refusal(d, x.astype(np.float64), w, b, out)
    assert v.category == "unsupported" and v.message == "input: dtype float64: conv3djit serves float32, bfloat16 " \
                                                        "and float16"
    v = _refusal(d, x.view(np.uint16), w, b, out)  # bit patterns are for the CPU reference only
    assert v.category == "unsupported" and v.message.startswith("input: dtype uint16")
    assert _refusal(d, x, w.astype(np.float32), b, out).message == "weight: dtype float32, but the call needs float16"
    assert _refusal(d, x, w, b.astype(np.float32), out).message == "bias: dtype float32, but the call needs float16"
    assert _refusal(d, x, w, b, out.astype(np.float32)).message == "out: dtype float32, but the call needs float16"
    d32 = _desc(dtype="fp16", fp32_output=True, residual=True)
    x, w, b, out = _call_arrays(d32)
    r = np.zeros(d32.output_shape, np.float16)
    assert _refusal(d32, x, w, b, out.astype(np.float16), residual=out).message.startswith(
        "out: dtype float16, but the call needs float32 (fp32_output)")
    assert _refusal(d32, x, w, b, out, residual=r).message == ("residual: dtype float16, but the call needs float32 "
                                                               "(fp32_output)")


def test_conv3d_takes_dtype_and_layout_from_the_arrays():
    d = _desc(dtype="fp16", layout="ndhwc")
    x, w, b, out = _call_arrays(d)
    assert _api._dtype_name(x) == "float16" and _api._dtype_name(x.astype(np.float64)) == "float32"
    assert _api._layout_of(x, x.shape, w, w.shape) == "ndhwc"
    assert _api._layout_of(np.ascontiguousarray(x), x.shape, w, w.shape) == "ncdhw"
    one = np.zeros((1, 1, 4, 4, 4), np.float16)  # both layouts': the weight decides
    assert _api._layout_of(one, one.shape, w, w.shape) == "ndhwc"
    assert _api._layout_of(one, one.shape, np.ascontiguousarray(w), w.shape) == "ncdhw"
    kwargs = dict(stride=d.stride, padding=d.padding, dilation=d.dilation, groups=d.groups)
    # The description the call builds matches the arrays: only the device is left to refuse.
    with pytest.raises(conv3djit.Unsupported, match="input: on cpu"):
        conv3djit.conv3d(x, w, b, out=out, **kwargs)
    with pytest.raises(conv3djit.Unsupported, match="input: not contiguous"):
        conv3djit.conv3d(x, w, b, out=out, layout="ncdhw", **kwargs)
    with pytest.raises(conv3djit.InvalidArgument, match=r"out: dtype float16, but the call needs float32 "
                                                        r"\(fp32_output\)"):
        conv3djit.conv3d(x, w, b, out=out, fp32_output=True, **kwargs)
