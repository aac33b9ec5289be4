"""Manifests: the JSON-lines shape lists `conv3djit precompile --manifest` reads (tools/manifest.cpp),
one convolution per line with the keys input, out_channels, kernel and optional stride, padding
(or padding_before and padding_after), padding_mode, dilation, groups, bias, precision, dtype
('fp32', 'bf16', 'fp16'), layout ('ncdhw', 'ndhwc'), fp32_output, the epilogue's activation, slope, clamp_min, clamp_max, alpha, gamma, residual, beta, and name. Written
by conv3djit.torch's warm-up, read here and by the CLI, so a deployment precompiles exactly the
layers its model runs."""
import json

from . import _ext
from ._errors import Error, InvalidArgument

# The epilogue's keys with the plain convolution's values: a line carries only those that differ.
_EPILOGUE = {"activation": "identity", "slope": 0.01, "clamp_min": 0.0, "clamp_max": 6.0, "alpha": 1.0, "gamma": 1.0,
             "residual": False, "beta": 1.0}

# The element types by the manifests' (the CLI's) names; Conv3dDesc.dtype gives PyTorch's.
_DTYPE_KEYS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# The element type and layout with their defaults: a line carries those that differ.
_TYPES = {"dtype": "fp32", "layout": "ncdhw", "fp32_output": False}

_KEYS = ("input", "out_channels", "kernel", "stride", "padding", "padding_before", "padding_after", "padding_mode",
         "dilation", "groups", "bias", "precision", *_TYPES, *_EPILOGUE, "name")


def manifest_line(desc, name=None):
    """The manifest object (a dict) of a Conv3dDesc."""
    line = {"input": list(desc.input_shape), "out_channels": desc.out_channels,
            "kernel": list(desc.kernel_size), "stride": list(desc.stride),
            "padding": desc.padding if isinstance(desc.padding, str) else list(desc.padding),
            "dilation": list(desc.dilation), "groups": desc.groups, "bias": desc.bias,
            "precision": desc.precision}
    if desc.padding_before is not None:  # per side, as F.pad gives it
        del line["padding"]
        line["padding_before"], line["padding_after"] = list(desc.padding_before), list(desc.padding_after)
    if desc.padding_mode != "zeros":
        line["padding_mode"] = desc.padding_mode
    types = {"dtype": _DTYPE_KEYS[desc.dtype], "layout": desc.layout, "fp32_output": desc.fp32_output}
    for key, plain in _TYPES.items():
        if types[key] != plain:
            line[key] = types[key]
    for key, plain in _EPILOGUE.items():
        value = getattr(desc, key)
        if value != plain:
            line[key] = value
    if name:
        line["name"] = name
    return line


def write_manifest(path, descs):
    """Writes descriptions (Conv3dDesc, or (name, Conv3dDesc) pairs) as a manifest file; returns the
    number of lines."""
    lines = []
    for item in descs:
        name, desc = item if isinstance(item, tuple) else (None, item)
        lines.append(json.dumps(manifest_line(desc, name)))
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return len(lines)


def _desc_of_line(line):
    if not isinstance(line, dict):
        raise InvalidArgument("expected a JSON object")
    for key in line:
        if key not in _KEYS:
            raise InvalidArgument(f"key '{key}': unknown key")
    for key in ("input", "out_channels", "kernel"):
        if key not in line:
            raise InvalidArgument(f"key '{key}': missing")
    padding_mode = line.get("padding_mode", "zeros")
    if not isinstance(padding_mode, str):
        raise InvalidArgument(f"key 'padding_mode': expected a string, got {json.dumps(padding_mode)}")
    epilogue = {key: line.get(key, plain) for key, plain in _EPILOGUE.items()}
    types = {key: line.get(key, plain) for key, plain in _TYPES.items()}
    defaults = {**_TYPES, **_EPILOGUE}
    for key, value in {**types, **epilogue}.items():
        # The CLI's types: a string, true or false, numbers (JSON's true is no number here).
        kind = type(defaults[key])
        if not (isinstance(value, kind) or (kind is float and type(value) is int)):
            wanted = {str: "a string", bool: "true or false", float: "a number"}[kind]
            raise InvalidArgument(f"key '{key}': expected {wanted}, got {json.dumps(value)}")
    return _ext.Conv3dDesc(line["input"], line["out_channels"], line["kernel"], line.get("stride", 1),
                           line.get("padding", 0), line.get("dilation", 1), line.get("groups", 1),
                           bool(line.get("bias", False)), line.get("precision", "fp32"), types["dtype"],
                           types["layout"], fp32_output=types["fp32_output"], padding_before=line.get("padding_before"),
                           padding_after=line.get("padding_after"), padding_mode=padding_mode, **epilogue)


def read_manifest(path):
    """[(name, Conv3dDesc)] of a manifest file; blank lines and lines starting with '#' are skipped.
    A bad line raises InvalidArgument naming FILE:LINE. Lines without a name get describe(desc)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            stripped = text.strip()
            if not stripped or stripped.startswith("#"):
                continue
            try:
                line = json.loads(stripped)
                desc = _desc_of_line(line)
                valid = _ext.validate(desc)
                if not valid:
                    raise InvalidArgument(valid.message)
            except (ValueError, TypeError, Error) as e:  # json errors, InvalidArgument, Unsupported (a dtype)
                raise InvalidArgument(f"{path}:{number}: {e}") from None
            out.append((line.get("name") or _ext.describe(desc), desc))
    if not out:
        raise InvalidArgument(f"{path}: no shapes")
    return out


def precompile_manifest(path, *, arch=None, engine=None):
    """Precompiles every line of a manifest (see precompile()); returns [(name, PrecompileResult)]."""
    engine = engine or _ext.default_engine()
    return [(name, engine.precompile(desc, arch or "")) for name, desc in read_manifest(path)]
