"""The Python conveniences over the extension: F.conv3d-style calls that derive the description
from the arrays (shapes, element type, layout from the strides), allocate the output and pick the
array's framework's current stream."""
import sys

from . import _ext
from ._errors import InvalidArgument


def _desc_of(desc, kwargs):
    """A Conv3dDesc given as one, or as Conv3dDesc's keyword arguments (nn.Conv3d's names)."""
    if desc is None:
        return _ext.Conv3dDesc(**kwargs)
    if kwargs:
        raise InvalidArgument(f"give a Conv3dDesc or its keyword arguments, not both (got {sorted(kwargs)})")
    if not isinstance(desc, _ext.Conv3dDesc):
        raise InvalidArgument(f"desc = {desc!r}: expected a Conv3dDesc")
    return desc


def _plain(array):
    """A tensor that requires grad refuses DLPack export; conv3d here is not differentiable
    (conv3djit.torch.conv3d is), so it reads the data alone."""
    return array.detach() if getattr(array, "requires_grad", False) else array


def validate(desc=None, input=None, weight=None, bias=None, out=None, *, residual=None, **kwargs):
    """Checks a description (a Conv3dDesc or its keyword arguments) and, if given, its arrays,
    without raising: a Validation (ok, category, message). bias and residual are arrays; in the
    keyword form, True or False is the description's own field of that name."""
    if desc is None:
        if isinstance(bias, bool):
            kwargs["bias"], bias = bias, None
        if isinstance(residual, bool):
            kwargs["residual"], residual = residual, None
    input, weight, bias, out, residual = (None if a is None else _plain(a) for a in (input, weight, bias, out, residual))
    return _ext.validate(_desc_of(desc, kwargs), input, weight, bias, out, residual=residual)


def output_shape(desc=None, **kwargs):
    """(N, K, OD, OH, OW) of a valid description; raises InvalidArgument otherwise."""
    return _ext.output_shape(_desc_of(desc, kwargs))


def resolved_padding(desc=None, **kwargs):
    """((D, H, W) before, (D, H, W) after): the padding applied on each side."""
    return _ext.resolved_padding(_desc_of(desc, kwargs))


def precompile(desc=None, *, arch=None, engine=None, **kwargs):
    """Compiles (or finds in the disk cache) every kernel a description needs on `arch` ('sm_90',
    'sm_90a', ...; None: the current device's), so that later calls need no compile. Needs no GPU
    when arch is given. Returns a PrecompileResult (its kernels, the main one first)."""
    return (engine or _ext.default_engine()).precompile(_desc_of(desc, kwargs), arch or "")


def tune(desc=None, *, stream=None, retune=False, engine=None, **kwargs):
    """Times the planner's best few kernels for a description (a Conv3dDesc or its keyword
    arguments) on `stream`'s device (an int handle or a stream object; None: the legacy default
    stream), checks each against float64, and keeps the fastest accurate one as a record in the
    disk cache, which every later call of the description on such a device runs. With a record
    already there it answers from it unless `retune`. Returns a TuneResult (.best, .candidates;
    .best is None, and nothing is stored, when no candidate is accurate)."""
    return (engine or _ext.default_engine()).tune(_desc_of(desc, kwargs), stream, retune)


def _framework(array):
    return type(array).__module__.split(".", 1)[0]


def _shape(array, name):
    shape = getattr(array, "shape", None)
    if shape is None:
        raise InvalidArgument(f"{name}: expected an array (DLPack), got {type(array).__name__}")
    return tuple(int(s) for s in shape)


# The element types conv3djit serves, by the name every framework gives them (torch.bfloat16's
# text is 'torch.bfloat16', numpy's and CuPy's 'float16').
_DTYPES = ("float32", "bfloat16", "float16")


def _dtype_name(array):
    """conv3djit's name of an array's element type; 'float32' for a type it does not serve, which
    the array checks then refuse with the type's own name."""
    name = str(getattr(array, "dtype", "")).rsplit(".", 1)[-1]
    return name if name in _DTYPES else "float32"


def _strides(array, shape):
    """An array's strides in elements (PyTorch's, or numpy-style bytes divided by the item size);
    C order for arrays that tell none (JAX)."""
    if _framework(array) == "torch":
        return tuple(array.stride())
    strides, itemsize = getattr(array, "strides", None), getattr(array, "itemsize", None)
    if strides is None or not itemsize:
        return _dense(shape, range(len(shape)))
    return tuple(s // itemsize for s in strides)


def _dense(shape, order):
    """The strides of a dense array whose axes lie in memory in `order`, outermost first."""
    strides, step = [0] * len(shape), 1
    for axis in reversed(list(order)):
        strides[axis] = step
        step *= shape[axis]
    return tuple(strides)


_ORDERS = {"ncdhw": (0, 1, 2, 3, 4), "ndhwc": (0, 2, 3, 4, 1)}


def _is_layout(shape, strides, layout):
    """Whether strides are a layout's dense ones on every axis longer than 1."""
    want = _dense(shape, _ORDERS[layout])
    return all(n == 1 or s == w for n, s, w in zip(shape, strides, want))


def _layout_of(input, in_shape, weight, w_shape):
    """'ndhwc' for an input with channels_last_3d strides, else 'ncdhw'; an input that has both
    (its size-1 axes allow either) follows the weight."""
    for array, shape in ((input, in_shape), (weight, w_shape)):
        if len(shape) != 5:  # the description refuses it
            return "ncdhw"
        strides = _strides(array, shape)
        ncdhw, ndhwc = _is_layout(shape, strides, "ncdhw"), _is_layout(shape, strides, "ndhwc")
        if ncdhw != ndhwc:
            return "ndhwc" if ndhwc else "ncdhw"
    return "ncdhw"


def _new_output(input, shape, dtype, layout):
    """An uninitialised array of the input's framework and device, of conv3djit's dtype name, in the
    layout's memory order (PyTorch's channels_last_3d for 'ndhwc')."""
    framework = _framework(input)
    if framework == "torch":
        torch = sys.modules["torch"]
        memory_format = torch.channels_last_3d if layout == "ndhwc" else torch.contiguous_format
        return torch.empty(shape, dtype=getattr(torch, dtype), device=input.device, memory_format=memory_format)
    if framework == "cupy":
        cupy = sys.modules["cupy"]
        order = _ORDERS[layout]
        with cupy.cuda.Device(input.device.id):
            dense = cupy.empty([shape[axis] for axis in order], dtype=dtype)
            return dense.transpose([order.index(axis) for axis in range(len(shape))])
    raise InvalidArgument(f"out: conv3djit allocates outputs for PyTorch and CuPy arrays; for a "
                          f"{type(input).__name__}, pass out= (a writable CUDA array)")


def _current_stream(input):
    """The current stream of the input's framework (PyTorch, CuPy), else None: the legacy default
    stream."""
    framework = _framework(input)
    if framework == "torch" and input.is_cuda:
        return sys.modules["torch"].cuda.current_stream(input.device).cuda_stream
    if framework == "cupy":
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return None


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, out=None, stream=None,
           precision="fp32", engine=None, padding_mode="zeros", residual=None, activation="identity", alpha=1.0,
           slope=0.01, clamp_min=0.0, clamp_max=6.0, gamma=1.0, beta=1.0, layout=None, fp32_output=False,
           prepared_weights=None):
    """F.conv3d on CUDA arrays of any DLPack framework, through conv3djit, with what follows it fused
    into the kernel's store: out = act(alpha * conv + bias) * gamma + beta * residual.

    input N x C x D x H x W, weight K x C/groups x KD x KH x KW, bias K (or None), residual (or None)
    of the output's shape: float32, bfloat16 or float16 arrays (the input's type; the output's and
    the residual's too, or float32 with fp32_output=True) on one CUDA device, dense in one layout:
    'ncdhw' (contiguous) or 'ndhwc' (PyTorch's channels_last_3d strides; the shapes stay these).
    layout None takes the input's (an input dense in both follows the weight). The result goes into
    `out` (N x K x OD x OH x OW; allocated for PyTorch and CuPy inputs when None, in the layout; it
    may be the residual itself) and is returned. padding_mode: what the padding reads, as nn.Conv3d's ('zeros',
    'reflect', 'replicate', 'circular'), mapped in the kernel's loads: no padded copy. activation:
    'identity', 'relu', 'leaky_relu' (slope), 'gelu', 'gelu_tanh', 'silu', 'sigmoid', 'tanh',
    'hardswish' or 'clamp' (clamp_min, clamp_max). Runs asynchronously on `stream` (an int handle or
    a stream object; None: the current stream of the input's framework, else the legacy default
    stream). precision: 'fp32' (default) or 'tf32', the class of float32 inputs (half inputs
    have their type's; it is then ignored). prepared_weights: what Engine.prepare_weights(desc, weight)
    made from this call's weight (another weight raises InvalidArgument), read instead of rewriting
    the weight on the call. A wrong call raises and writes nothing. For autograd and
    torch.compile use conv3djit.torch.conv3d.
    """
    in_shape = _shape(input, "input")
    w_shape = _shape(weight, "weight")
    if len(w_shape) != 5:
        raise InvalidArgument(f"weight: shape {w_shape}: expected 5 dims (K, C / groups, KD, KH, KW)")
    if layout is None:
        layout = _layout_of(input, in_shape, weight, w_shape)
    desc = _ext.Conv3dDesc(in_shape, w_shape[0], w_shape[2:], stride, padding, dilation, groups,
                           bias is not None, precision, _dtype_name(input), layout, fp32_output=fp32_output,
                           padding_mode=padding_mode, activation=activation, alpha=alpha, slope=slope,
                           clamp_min=clamp_min, clamp_max=clamp_max, gamma=gamma, residual=residual is not None,
                           beta=beta)
    if out is None:
        out = _new_output(input, desc.output_shape, desc.output_dtype, desc.layout)
    if stream is None:
        stream = _current_stream(input)
    (engine or _ext.default_engine()).run(desc, _plain(input), _plain(weight), None if bias is None else _plain(bias),
                                          out=_plain(out), residual=None if residual is None else _plain(residual),
                                          stream=stream, prepared_weights=prepared_weights)
    return out
