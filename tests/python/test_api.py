"""The package without a GPU: import, descriptions, validation errors as exception classes, shape
functions, the CPU reference, array checks, precompile for sm_90, the disk cache and manifests."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import conv3djit
from conv3djit import Conv3dDesc


def test_imports_without_torch():
    # A None entry in sys.modules makes `import torch` fail, as if PyTorch were not installed.
    code = ("import sys; sys.modules['torch'] = None\n"
            "import conv3djit\n"
            "print(conv3djit.__version__, conv3djit.output_shape(input_shape=(1, 2, 5, 5, 5), out_channels=3,"
            " kernel_size=3))\n"
            "try:\n    import conv3djit.torch\nexcept ImportError:\n    print('no torch')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split("\n")[0] == f"{conv3djit.__version__} (1, 3, 3, 3, 3)"
    assert "no torch" in result.stdout


def test_versions():
    assert conv3djit.__version__.count(".") == 2
    assert conv3djit.nvrtc_version()[0].isdigit()


def test_desc_fields_follow_nn_conv3d():
    d = Conv3dDesc((2, 6, 9, 10, 11), 8, (3, 5, 7), stride=(1, 2, 3), padding=2, dilation=(2, 1, 1), groups=2,
                   bias=True, precision="tf32")
    assert d.input_shape == (2, 6, 9, 10, 11)
    assert (d.in_channels, d.out_channels, d.groups, d.bias) == (6, 8, 2, True)
    assert d.kernel_size == (3, 5, 7) and d.stride == (1, 2, 3) and d.padding == (2, 2, 2)
    assert d.dilation == (2, 1, 1) and d.precision == "tf32" and d.dtype == "float32" and d.layout == "ncdhw"
    assert d.weight_shape == (8, 3, 3, 5, 7)
    assert str(d) == conv3djit.describe(d)
    assert eval(repr(d), {"Conv3dDesc": Conv3dDesc}) == d  # repr reads back
    assert hash(d) == hash(Conv3dDesc((2, 6, 9, 10, 11), 8, (3, 5, 7), (1, 2, 3), (2, 2, 2), (2, 1, 1), 2, True,
                                      "tf32"))
    assert d != Conv3dDesc((2, 6, 9, 10, 11), 8, (3, 5, 7), (1, 2, 3), 2, (2, 1, 1), 2, True, "fp32")


def test_numpy_integers_are_ints():
    d = Conv3dDesc(np.array([1, 2, 4, 4, 4]), np.int64(3), np.int32(3))
    assert d.output_shape == (1, 3, 2, 2, 2)


def _output_size(size, k, s, p_before, p_after, dil):
    return (size + p_before + p_after - dil * (k - 1) - 1) // s + 1


@pytest.mark.parametrize("kernel,stride,padding,dilation", [
    (3, 1, 0, 1), ((3, 5, 7), (1, 2, 3), (1, 2, 3), 1), (4, 1, "same", 1), ((2, 3, 4), 1, "same", (3, 2, 1)),
    (3, 2, "valid", 2), (1, 1, 0, 1), ((5, 1, 2), (3, 1, 2), (2, 0, 1), (1, 1, 3)),
])
def test_output_shape_and_padding_match_pytorch_rules(kernel, stride, padding, dilation):
    d = Conv3dDesc((3, 4, 13, 17, 19), 5, kernel, stride=stride, padding=padding, dilation=dilation)
    before, after = conv3djit.resolved_padding(d)
    k, s, dil = d.kernel_size, d.stride, d.dilation
    for axis in range(3):
        span = dil[axis] * (k[axis] - 1)
        if padding == "same":  # PyTorch: the odd element of the total at the end
            assert (before[axis], after[axis]) == (span // 2, span - span // 2)
        elif padding == "valid":
            assert before[axis] == after[axis] == 0
        else:
            assert before[axis] == after[axis] == d.padding[axis]
    expected = tuple(_output_size(d.input_shape[2 + a], k[a], s[a], before[a], after[a], dil[a]) for a in range(3))
    assert conv3djit.output_shape(d) == (3, 5) + expected == d.output_shape
    if padding == "same":
        assert expected == d.input_shape[2:]


def test_keyword_form_of_shape_functions():
    kwargs = dict(input_shape=(1, 3, 8, 8, 8), out_channels=4, kernel_size=3, padding=1)
    assert conv3djit.output_shape(**kwargs) == (1, 4, 8, 8, 8)
    assert conv3djit.resolved_padding(**kwargs) == ((1, 1, 1), (1, 1, 1))
    assert conv3djit.validate(**kwargs)
    with pytest.raises(conv3djit.InvalidArgument, match="not both"):
        conv3djit.output_shape(Conv3dDesc(**kwargs), groups=1)


def test_exception_classes():
    assert issubclass(conv3djit.InvalidArgument, conv3djit.Error) and issubclass(conv3djit.InvalidArgument, ValueError)
    assert issubclass(conv3djit.Unsupported, NotImplementedError)
    for cls in (conv3djit.CompileFailed, conv3djit.DriverError, conv3djit.NoDevice, conv3djit.CacheIO,
                conv3djit.CacheMiss):
        assert issubclass(cls, conv3djit.Error)
    names = {cls.category for cls in conv3djit._errors.BY_CATEGORY.values()}
    assert names == {"invalid_argument", "unsupported", "compile_failed", "driver_error", "no_device", "cache_io",
                     "cache_miss"}


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(stride=(1, 1, 0)), r"stride\[W\] = 0"),
    (dict(dilation=(1, 0, 1)), r"dilation\[H\] = 0"),
    (dict(padding=-1), r"padding\[D\] = -1"),
    (dict(groups=2), r"c = 3: in_channels must be divisible by groups = 2"),
    (dict(kernel_size=9), r"kernel\[D\] = 9"),
    (dict(padding="same", stride=2), r"padding='same'"),
])
def test_invalid_descriptions_name_field_and_value(kwargs, pattern):
    args = dict(input_shape=(1, 3, 8, 8, 8), out_channels=4, kernel_size=3)
    args.update(kwargs)
    desc = Conv3dDesc(**args)
    v = conv3djit.validate(desc)
    assert not v and v.category == "invalid_argument"
    assert pytest.importorskip("re").search(pattern, v.message), v.message
    with pytest.raises(conv3djit.InvalidArgument, match=pattern):
        conv3djit.output_shape(desc)
    with pytest.raises(ValueError, match=pattern):
        desc.output_shape


@pytest.mark.parametrize("args,pattern", [
    (((1, 3, 8, 8), 4, 3), r"input_shape = \(1, 3, 8, 8\): expected 5 ints"),
    (((1, 3, 8, 8, 8), 4, (3, 3)), r"kernel_size = \(3, 3\): expected an int or a sequence of 3 ints"),
    (((1, 3, 8, 8, 8), 4, 3, 1, "full"), r"padding = 'full'"),
    (((1, 3, 8, 8, 8), 4.5, 3), r"out_channels = 4.5: expected an int"),
])
def test_malformed_arguments(args, pattern):
    with pytest.raises(conv3djit.InvalidArgument, match=pattern):
        Conv3dDesc(*args)


def test_unknown_precision_dtype_layout():
    with pytest.raises(conv3djit.InvalidArgument, match="precision = 'fp16'"):
        Conv3dDesc((1, 3, 8, 8, 8), 4, 3, precision="fp16")
    with pytest.raises(conv3djit.Unsupported, match="dtype = 'float64': conv3djit serves 'float32', 'bfloat16'"):
        Conv3dDesc((1, 3, 8, 8, 8), 4, 3, dtype="float64")
    with pytest.raises(conv3djit.InvalidArgument, match="layout = 'nhwc': expected 'ncdhw' or 'ndhwc'"):
        Conv3dDesc((1, 3, 8, 8, 8), 4, 3, layout="nhwc")
    with pytest.raises(conv3djit.InvalidArgument, match="compile_mode = 'sometimes'"):
        conv3djit.Engine(compile_mode="sometimes")


def _naive_conv3d(x, w, b, stride, pad, dil, groups):
    """Direct float64 loops (numpy) over a tiny problem: an independent check of the reference's layout."""
    n, c, d, h, wd = x.shape
    k, cg = w.shape[:2]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in pad])
    out_sizes = [(xp.shape[2 + a] - dil[a] * (w.shape[2 + a] - 1) - 1) // stride[a] + 1 for a in range(3)]
    out = np.zeros((n, k) + tuple(out_sizes))
    kg = k // groups
    for o in range(k):
        g = o // kg
        for z, y, xx in np.ndindex(*out_sizes):
            for i, j, l in np.ndindex(*w.shape[2:]):
                v = xp[:, g * cg:(g + 1) * cg, z * stride[0] + i * dil[0], y * stride[1] + j * dil[1],
                       xx * stride[2] + l * dil[2]]
                out[:, o, z, y, xx] += v @ w[o, :, i, j, l].astype(np.float64)
        if b is not None:
            out[:, o] += b[o]
    return out


def test_reference_matches_direct_loops():
    rng = np.random.default_rng(1)
    desc = Conv3dDesc((2, 4, 5, 6, 7), 6, (2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1),
                      groups=2, bias=True)
    x = rng.uniform(-1, 1, desc.input_shape).astype(np.float32)
    w = rng.uniform(-1, 1, desc.weight_shape).astype(np.float32)
    b = rng.uniform(-1, 1, (6,)).astype(np.float32)
    ref = conv3djit.reference_conv3d(desc, x, w, b)
    assert ref.shape == desc.output_shape and ref.dtype == np.float64
    np.testing.assert_allclose(ref, _naive_conv3d(x, w, b, desc.stride, desc.padding, desc.dilation, 2), rtol=1e-12,
                               atol=1e-12)
    got = ref.astype(np.float32)
    assert conv3djit.compare(got, ref, conv3djit.tolerance("fp32")).passed
    got[0, 0, 0, 0, 0] += 1
    assert not conv3djit.compare(got, ref, conv3djit.tolerance("fp32"))
    assert conv3djit.tolerance("tf32").rel_l2 == pytest.approx(5e-4)


def _arrays(desc, bias=True):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, desc.input_shape).astype(np.float32)
    w = rng.uniform(-1, 1, desc.weight_shape).astype(np.float32)
    b = rng.uniform(-1, 1, (desc.out_channels,)).astype(np.float32) if bias else None
    out = np.full(desc.output_shape, np.nan, dtype=np.float32)
    return x, w, b, out


def test_array_checks_name_the_array():
    desc = Conv3dDesc((1, 4, 6, 6, 6), 8, 3, groups=2, bias=True)
    x, w, b, out = _arrays(desc)
    run = conv3djit.default_engine().run
    cases = [
        (dict(input=x[:, :2]), conv3djit.InvalidArgument, r"input: shape \(1, 2, 6, 6, 6\) does not match the "
                                                          r"description, which needs \(1, 4, 6, 6, 6\)"),
        (dict(weight=np.zeros((8, 4, 3, 3, 3), np.float32)), conv3djit.InvalidArgument, r"weight: shape \(8, 4, 3"),
        (dict(bias=b[:4]), conv3djit.InvalidArgument, r"bias: shape \(4,\)"),
        (dict(out=out[:, :, :3]), conv3djit.InvalidArgument, r"out: shape"),
        (dict(bias=None), conv3djit.InvalidArgument, "no bias array was given"),
        (dict(input=x.astype(np.float64)), conv3djit.Unsupported, "input: dtype float64: conv3djit serves float32"),
        (dict(weight=w.astype(np.int32)), conv3djit.InvalidArgument, "weight: dtype int32, but the call needs float32"),
        (dict(out=out.astype(np.float64)), conv3djit.InvalidArgument, "out: dtype float64, but the call needs float32"),
        (dict(input=np.ascontiguousarray(x.transpose(0, 1, 2, 4, 3)).transpose(0, 1, 2, 4, 3)),
         conv3djit.Unsupported, r"input: not contiguous \(strides \(864, 216, 36, 1, 6\) elements"),
        (dict(out=np.full((1, 8, 4, 4, 8), np.nan, np.float32)[..., ::2]), conv3djit.Unsupported,
         "out: not contiguous"),
        (dict(), conv3djit.Unsupported, r"input: on cpu: conv3djit runs on CUDA arrays"),
    ]
    for change, cls, pattern in cases:
        args = dict(input=x, weight=w, bias=b, out=out)
        args.update(change)
        with pytest.raises(cls, match=pattern):
            run(desc, args["input"], args["weight"], args["bias"], out=args["out"])
        v = conv3djit.validate(desc, args["input"], args["weight"], args["bias"], args["out"])
        assert not v and v.category == cls.category
        assert np.isnan(out).all()  # nothing written
    with pytest.raises(conv3djit.InvalidArgument, match="an array was given, but the description has bias = False"):
        run(Conv3dDesc((1, 4, 6, 6, 6), 8, 3, groups=2), x, w, b, out=out)
    # Size-1 axes may have any stride (PyTorch gives them arbitrary ones): past the stride check.
    odd = np.lib.stride_tricks.as_strided(b, shape=(8,), strides=(4,))
    one = np.lib.stride_tricks.as_strided(x, shape=x.shape, strides=(12345,) + x.strides[1:])
    with pytest.raises(conv3djit.Unsupported, match="on cpu"):
        run(desc, one, w, odd, out=out)


def test_conv3d_checks_before_allocating():
    x, w, _, _ = _arrays(Conv3dDesc((1, 4, 6, 6, 6), 8, 3))
    with pytest.raises(conv3djit.InvalidArgument, match=r"weight: shape \(8, 4, 3, 3\): expected 5 dims"):
        conv3djit.conv3d(x, w[..., 0])
    with pytest.raises(conv3djit.InvalidArgument, match="input: expected an array"):
        conv3djit.conv3d([1, 2, 3], w)
    with pytest.raises(conv3djit.InvalidArgument, match="out: conv3djit allocates outputs for PyTorch and CuPy"):
        conv3djit.conv3d(x, w)
    with pytest.raises(conv3djit.InvalidArgument, match="stream: expected None"):
        conv3djit.conv3d(x, w, out=np.zeros((1, 8, 4, 4, 4), np.float32), stream="fast")


def test_explain_names_the_kernel_and_why_the_families_before_it_passed(engine):
    # A grouped NDHWC layer: the tensor-core families before the grouped kernel pass it on, each
    # saying why; nothing is compiled.
    desc = Conv3dDesc((8, 256, 8, 28, 28), 256, 3, padding=1, groups=32, layout="ndhwc")
    e = engine.explain(desc, "sm_90", candidates=2)
    assert e.kernel == engine.kernel_for(desc, "sm_90") and e.kernel.startswith("grouped fp32 ndhwc ")
    assert e.source == "planner" and e.block > 0 and e.grid > 0 and e.shared_bytes > 0
    passed = dict(e.passed)
    assert passed["igemm_sm90"] == "needs groups == 1"
    assert passed["igemm_sm80"] == "serves float32 NCDHW tensors"
    assert "grouped" not in passed and len(e.candidates) >= 1 and e.candidates[0].startswith("grouped:")
    assert engine.stats().compiles == 0
    # The reference problem: its input copy where rows need one; forced, no verdicts.
    ref = Conv3dDesc((16, 3, 64, 64, 64), 64, (3, 5, 7))
    steps = engine.explain(ref, "sm_90").steps
    assert [s.role for s in steps] == ["input copy where needed"] and steps[0].kernel.startswith("pitch_rows ")
    forced = conv3djit.Engine(kernel_config="igemm_sm80:bm=64,bn=32", disk_cache=False).explain(ref, "sm_90")
    assert forced.source == "forced configuration" and forced.passed == [] and forced.kernel.startswith("igemm_sm80 ")


def test_precompile_for_sm90_without_gpu(engine):
    desc = Conv3dDesc((2, 16, 8, 12, 12), 32, 3, padding=1, bias=True)
    result = conv3djit.precompile(desc, arch="sm_90", engine=engine)
    assert result.kernels and result.main is not None
    main = result.main
    assert main.compiled and main.on_disk and main.compile_ms > 0 and main.key and main.kernel
    assert main.kernel == engine.kernel_for(desc, "sm_90")
    assert main.registers > 0 and main.stack_bytes == 0  # read from the cubin
    assert main.code_bytes > 0 and main.code_bytes % 16 == 0
    again = engine.precompile(desc, "sm_90")
    assert not again.main.compiled  # from the memory cache
    assert (again.main.registers, again.main.stack_bytes, again.main.code_bytes) == (
        main.registers, main.stack_bytes, main.code_bytes)
    stats = engine.stats()
    assert stats.compiles == len(result.kernels) and stats.compile_ms > 0
    fresh = conv3djit.Engine(cache_dir=engine.cache_info().dir)
    assert not fresh.precompile(desc, "sm_90").main.compiled  # from the disk cache
    assert fresh.stats().disk_hits >= 1 and fresh.stats().compiles == 0


def test_cache_listing_export_import(engine, tmp_path):
    conv3djit.precompile(input_shape=(1, 8, 6, 6, 6), out_channels=8, kernel_size=3, groups=8, arch="sm_90",
                         engine=engine)
    info = engine.cache_info()
    entries = engine.cache_entries()
    assert info.exists and info.writable and not info.problem
    assert all(e.kernel for e in entries)
    assert info.entries == len(entries) >= 1 and info.bytes == sum(e.bytes for e in entries)
    assert all(os.path.isfile(e.path) and e.key and e.last_use_unix > 0 for e in entries)
    archive = str(tmp_path / "cache.c3j")
    assert engine.cache_export(archive) == len(entries)
    other = conv3djit.Engine(cache_dir=str(tmp_path / "other"))
    assert other.cache_import(archive) == len(entries)
    assert sorted(e.key for e in other.cache_entries()) == sorted(e.key for e in entries)
    assert engine.cache_clear() == len(entries) and engine.cache_info().entries == 0
    with pytest.raises(conv3djit.CacheIO):
        other.cache_import(str(tmp_path / "missing.c3j"))


def test_compile_mode_never_and_readable_entries(engine, tmp_path):
    desc = Conv3dDesc((1, 4, 6, 6, 6), 4, 3)
    never = conv3djit.Engine(cache_dir=str(tmp_path / "empty"), compile_mode="never")
    with pytest.raises(conv3djit.CacheMiss, match="N1_C4"):
        never.precompile(desc, "sm_90")
    assert never.stats().refused_compiles == 1 and never.stats().compiles == 0
    engine.precompile(desc, "sm_90")
    assert engine.cache_info().exists
    assert all(e.kernel for e in engine.cache_entries())
    warm = conv3djit.Engine(cache_dir=engine.cache_info().dir, compile_mode="never")
    assert not warm.precompile(desc, "sm_90").main.compiled  # a disk hit is no compile


def test_archs():
    archs = conv3djit.supported_archs()
    assert "sm_90" in archs
    conv3djit.check_arch("sm_90a")
    with pytest.raises(conv3djit.InvalidArgument, match="arch = 'compute_90'"):
        conv3djit.check_arch("compute_90")
    with pytest.raises(conv3djit.Unsupported, match="arch = 'sm_10'"):
        conv3djit.precompile(input_shape=(1, 2, 4, 4, 4), out_channels=2, kernel_size=1, arch="sm_10")


def test_compile_mode_from_environment(tmp_path):
    code = ("import conv3djit\n"
            "e = conv3djit.Engine(cache_dir=%r)\n"
            "try:\n    e.precompile(conv3djit.Conv3dDesc((1, 2, 4, 4, 4), 2, 1), 'sm_90')\n"
            "except conv3djit.CacheMiss:\n    print('miss', e.stats().refused_compiles)\n") % str(tmp_path)
    env = dict(os.environ, CONV3DJIT_COMPILE="never")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.strip() == "miss 1"


def test_shared_cache_folder_needs_trust(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    desc = Conv3dDesc((1, 2, 4, 4, 4), 2, 1)
    refused = conv3djit.Engine(cache_dir=str(shared))
    assert "writable by other users" in refused.cache_info().problem
    with pytest.raises(conv3djit.CacheIO, match="writable by other users"):
        refused.precompile(desc, "sm_90")  # precompile that cannot store fails
    trusted = conv3djit.Engine(cache_dir=str(shared), trust_shared_cache=True)
    assert trusted.precompile(desc, "sm_90").main.on_disk


def test_memory_only_engine(tmp_path):
    e = conv3djit.Engine(cache_dir=str(tmp_path / "never"), disk_cache=False, cache_limit_bytes=1 << 20)
    assert not e.precompile(Conv3dDesc((1, 2, 4, 4, 4), 2, 1), "sm_90").main.on_disk
    assert not (tmp_path / "never").exists()


def test_manifest_round_trip(tmp_path):
    descs = [("stem", Conv3dDesc((2, 3, 16, 32, 32), 8, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=True)),
             (None, Conv3dDesc((1, 8, 5, 6, 7), 8, 3, padding="same", groups=8, precision="tf32"))]
    path = tmp_path / "shapes.jsonl"
    assert conv3djit.write_manifest(str(path), descs) == 2
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {"input": [2, 3, 16, 32, 32], "out_channels": 8, "kernel": [3, 7, 7], "stride": [1, 2, 2],
                     "padding": [1, 3, 3], "dilation": [1, 1, 1], "groups": 1, "bias": True, "precision": "fp32",
                     "name": "stem"}
    back = conv3djit.read_manifest(str(path))
    assert back == [("stem", descs[0][1]), (conv3djit.describe(descs[1][1]), descs[1][1])]


@pytest.mark.parametrize("line,pattern", [
    ('{"input": [1, 2, 4, 4, 4], "out_channels": 2}', "key 'kernel': missing"),
    ('{"input": [1, 2, 4, 4, 4], "out_channels": 2, "kernel": 3, "strides": 2}', "key 'strides': unknown key"),
    ('{"input": [1, 2, 4, 4, 4], "out_channels": 2, "kernel": 3, "groups": 2, "precision": "tf32", "bias": 1,'
     ' "padding": "same", "dilation": 1, "stride": 1, "name": "x", "extra": 0}', "key 'extra'"),
    ('{"input": [1, 3, 4, 4, 4], "out_channels": 2, "kernel": 3, "groups": 2}', "divisible by groups"),
    ('{"input": [1, 3, 4, 4, 4],', "Expecting"),
])
def test_manifest_errors_name_file_and_line(tmp_path, line, pattern):
    path = tmp_path / "bad.jsonl"
    path.write_text("# a comment\n\n" + line + "\n")
    with pytest.raises(conv3djit.InvalidArgument, match=f"bad.jsonl:3: .*{pattern}"):
        conv3djit.read_manifest(str(path))


def test_precompile_manifest(tmp_path, engine):
    path = tmp_path / "m.jsonl"
    path.write_text('{"name": "pw", "input": [4, 16, 4, 8, 8], "out_channels": 16, "kernel": 1}\n')
    [(name, result)] = conv3djit.precompile_manifest(str(path), arch="sm_90", engine=engine)
    assert name == "pw" and result.main.on_disk


def test_no_device_errors():
    if conv3djit.current_device() is not None:
        pytest.skip("a CUDA device is present")
    desc = Conv3dDesc((1, 2, 4, 4, 4), 2, 1)
    with pytest.raises(conv3djit.NoDevice):
        conv3djit.default_engine().precompile(desc)  # no arch: needs the current device
    with pytest.raises(conv3djit.NoDevice):
        conv3djit.default_engine().run_pointers(desc, 16, 16, 0, 16, 0)


def test_padding_per_side(tmp_path):
    causal = Conv3dDesc((1, 4, 9, 8, 8), 4, 3, padding_before=(2, 1, 1), padding_after=(0, 1, 1))
    assert causal.padding == "per_side" and causal.padding_after == (0, 1, 1)
    assert conv3djit.resolved_padding(causal) == ((2, 1, 1), (0, 1, 1))
    assert causal.output_shape == (1, 4, 9, 8, 8)
    assert eval(repr(causal), {"Conv3dDesc": Conv3dDesc}) == causal
    assert causal != Conv3dDesc((1, 4, 9, 8, 8), 4, 3, padding=1)
    assert Conv3dDesc((1, 4, 9, 8, 8), 4, 3).padding_before is None
    with pytest.raises(conv3djit.InvalidArgument, match="not both"):
        Conv3dDesc((1, 4, 9, 8, 8), 4, 3, padding=1, padding_before=2)
    path = tmp_path / "causal.jsonl"
    conv3djit.write_manifest(str(path), [("vae", causal)])
    line = json.loads(path.read_text())
    assert "padding" not in line and line["padding_before"] == [2, 1, 1] and line["padding_after"] == [0, 1, 1]
    assert conv3djit.read_manifest(str(path)) == [("vae", causal)]
