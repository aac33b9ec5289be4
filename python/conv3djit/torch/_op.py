"""The conv3djit::conv3d custom op: its CUDA implementation (conv3djit on PyTorch's current stream,
float32, bfloat16 or float16 tensors, contiguous or channels_last_3d, with the padding mode in the
kernel's loads and the epilogue out = act(alpha * conv + bias) * gamma + beta * residual in its
store), its fake implementation (shapes, dtype and strides only: torch.compile traces through it) and its autograd formula (PyTorch's own convolution backward, for the zero-padded plain
convolution). conv3d() runs the one kernel when no gradient is needed, and otherwise what autograd
can differentiate: F.pad for a padding mode other than zeros, the plain convolution, then the
epilogue as PyTorch's ops."""
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from .. import _ext
from .._errors import InvalidArgument, Unsupported

# The shape recorder of conv3djit.torch.record_shapes(), while one is active.
_recorder = None

# Checked descriptions by call signature: a repeated shape costs one dict lookup, not a new
# description and its checks. Cleared when it grows past _MAX_DESCS (many dynamic shapes).
_descs = {}
_MAX_DESCS = 4096

# The op's epilogue arguments after the residual, in order; epilogue tuples hold their values.
_EPILOGUE_ARGS = ("activation", "alpha", "slope", "clamp_min", "clamp_max", "gamma", "beta")

# Each activation (conv3djit's names) as PyTorch's function of y, slope, clamp_min, clamp_max.
_ACTIVATIONS = {
    "identity": lambda y, *_: y,
    "relu": lambda y, *_: F.relu(y),
    "leaky_relu": lambda y, slope, *_: F.leaky_relu(y, slope),
    "gelu": lambda y, *_: F.gelu(y),
    "gelu_tanh": lambda y, *_: F.gelu(y, approximate="tanh"),
    "silu": lambda y, *_: F.silu(y),
    "sigmoid": lambda y, *_: torch.sigmoid(y),
    "tanh": lambda y, *_: torch.tanh(y),
    "hardswish": lambda y, *_: F.hardswish(y),
    "clamp": lambda y, _, low, high: torch.clamp(y, low, high),
}


def _triple(value, name):
    if isinstance(value, int):
        return [value] * 3
    values = list(value)
    if len(values) != 3:
        raise InvalidArgument(f"{name} = {value!r}: expected an int or 3 ints")
    return values


def precision_of(precision):
    """'fp32' or 'tf32'; None follows torch.backends.cudnn.allow_tf32 (PyTorch's own switch for
    convolutions, on by default). The class of float32 inputs: bfloat16 and float16 inputs have
    their type's, and the library ignores this for them."""
    if precision is None:
        return "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"
    if precision not in ("fp32", "tf32"):
        raise InvalidArgument(f"precision = {precision!r}: expected None, 'fp32' or 'tf32'")
    return precision


# The element types conv3djit serves, by the description's names.
_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}

# The memory format of each layout.
_FORMATS = {"ncdhw": torch.contiguous_format, "ndhwc": torch.channels_last_3d}


def _check_tensor(name, t, input, dtype, of="input"):
    if t.device != input.device:
        raise InvalidArgument(f"{name}: on {t.device}, but input is on {input.device}")
    if t.dtype != dtype:
        raise InvalidArgument(f"{name}: dtype {t.dtype}, but the {of} is {dtype}")


def _output_dtype(input, fp32_output):
    """The output's (and the residual's) dtype: the input's, or float32 for fp32_output."""
    return torch.float32 if fp32_output else input.dtype


def _format_of(t):
    """'ndhwc' for a tensor in channels_last_3d order, 'ncdhw' for a contiguous one; None for one
    that is both (its size-1 axes allow either). A view in neither order (a slice) goes by the
    order of its strides: channels innermost is 'ndhwc'."""
    if t.dim() != 5:
        return None
    channels_last = t.is_contiguous(memory_format=torch.channels_last_3d)
    if t.is_contiguous():
        return None if channels_last else "ncdhw"
    if channels_last or t.stride(1) < t.stride(4):
        return "ndhwc"
    return "ncdhw"


def _layout_of(input, weight):
    """A call's layout, as F.conv3d picks its memory format on CUDA: 'ndhwc' (channels_last_3d)
    when the input or the weight is in it, else 'ncdhw'. The tensors in the other format are copied
    into the call's, as PyTorch does, and the output is in it."""
    return "ndhwc" if "ndhwc" in (_format_of(input), _format_of(weight)) else "ncdhw"


# nn.Conv3d's padding modes; the others are F.pad's mode of the same name.
_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _padding_mode_of(padding_mode):
    """conv3djit's name of a padding mode, given in any case; InvalidArgument for an unknown one."""
    name = padding_mode.lower() if isinstance(padding_mode, str) else padding_mode
    if name not in _PADDING_MODES:
        names = ", ".join(map(repr, _PADDING_MODES))
        raise InvalidArgument(f"padding_mode = {padding_mode!r}: expected one of {names}")
    return name


def _activation_of(activation):
    """conv3djit's name of an activation, given in any case; InvalidArgument for an unknown one."""
    name = activation.lower() if isinstance(activation, str) else activation
    if name not in _ACTIVATIONS:
        raise InvalidArgument(f"activation = {activation!r}: expected one of {', '.join(map(repr, _ACTIVATIONS))}")
    return name


def _desc(input, weight, bias, stride, padding, padding_kind, dilation, groups, precision, residual, epilogue,
          padding_mode, layout="ncdhw", fp32_output=False):
    # The description of the input's dtype (float32 for one conv3djit does not serve, which the
    # launch refuses by its name); fp32_output only where it changes the output.
    dtype = _DTYPES.get(input.dtype, "float32")
    fp32_output = bool(fp32_output) and dtype != "float32"
    key = (input.shape, weight.shape, None if bias is None else bias.shape, tuple(stride), tuple(padding),
           padding_kind, tuple(dilation), groups, precision, None if residual is None else residual.shape, epilogue,
           padding_mode, dtype, layout, fp32_output)
    desc = _descs.get(key)
    if desc is not None:
        return desc
    if input.dim() != 5:
        raise InvalidArgument(f"input: shape {tuple(input.shape)}: expected 5 dims (N, C, D, H, W)")
    if weight.dim() != 5:
        raise InvalidArgument(f"weight: shape {tuple(weight.shape)}: expected 5 dims (K, C / groups, KD, KH, KW)")
    desc = _ext.Conv3dDesc(tuple(input.shape), weight.shape[0], tuple(weight.shape[2:]), stride,
                           padding if padding_kind == "explicit" else padding_kind, dilation, groups,
                           bias is not None, precision, dtype, layout, fp32_output=fp32_output,
                           padding_mode=padding_mode, residual=residual is not None,
                           **dict(zip(_EPILOGUE_ARGS, epilogue)))
    valid = _ext.validate(desc)
    if not valid:
        raise InvalidArgument(valid.message)
    if tuple(weight.shape) != desc.weight_shape:
        raise InvalidArgument(f"weight: shape {tuple(weight.shape)} does not match input {tuple(input.shape)} with "
                              f"groups = {groups}, which needs {desc.weight_shape}")
    if bias is not None and tuple(bias.shape) != (desc.out_channels,):
        raise InvalidArgument(f"bias: shape {tuple(bias.shape)}, but the weight needs ({desc.out_channels},)")
    if residual is not None and tuple(residual.shape) != desc.output_shape:
        raise InvalidArgument(f"residual: shape {tuple(residual.shape)}, but the output is {desc.output_shape}")
    if len(_descs) >= _MAX_DESCS:
        _descs.clear()
    _descs[key] = desc
    return desc


class PreparedCache:
    """One weight tensor's prepared weights (Engine.prepare_weights), made again when the tensor
    changes: another tensor or storage at its address, or an in-place update (its _version). The
    storage is kept while the copy is, so that no other tensor can take its address meanwhile.
    Updates through .data escape _version, as they escape autograd."""

    def __init__(self):
        self._key, self._storage, self._prepared = None, None, None

    # A copy (copy.deepcopy of a model, pickling) starts empty: device memory is not copied.
    def __deepcopy__(self, memo):
        return PreparedCache()

    def __reduce__(self):
        return (PreparedCache, ())

    def get(self, desc, weight, stream):
        """The prepared weights of `weight` (dense in desc's layout), for calls of desc; None while
        the stream captures a graph and they are not made yet (the call then prepares its own)."""
        key = (weight.data_ptr(), weight._version, weight.device, tuple(weight.shape), weight.dtype, desc.layout)
        if key != self._key:
            if torch.cuda.is_current_stream_capturing():
                return None
            self._prepared = None  # (its memory back first)
            # (detach: DLPack exports no tensor that requires grad; the same memory)
            self._prepared = _ext.default_engine().prepare_weights(desc, weight.detach(), stream=stream)
            self._key, self._storage = key, weight.untyped_storage()
        return self._prepared


def _launch(input, weight, bias, stride, padding, padding_kind, dilation, groups, precision, residual, epilogue,
            padding_mode, fp32_output=False, prepared=None):
    """The op's CUDA implementation: checks, then conv3djit on PyTorch's current stream.
    prepared: a PreparedCache of the weight, used where the weight is dense in the call's layout."""
    if not input.is_cuda:
        raise Unsupported(f"input: on {input.device}: conv3djit runs on CUDA tensors")
    if input.dtype not in _DTYPES:
        raise Unsupported(f"input: dtype {input.dtype}: conv3djit serves torch.float32, torch.bfloat16 and "
                          "torch.float16")
    _check_tensor("weight", weight, input, input.dtype)
    if bias is not None:
        _check_tensor("bias", bias, input, input.dtype)
    out_dtype = _output_dtype(input, fp32_output)
    if residual is not None:
        _check_tensor("residual", residual, input, out_dtype, of="output")
    layout = _layout_of(input, weight)
    desc = _desc(input, weight, bias, stride, padding, padding_kind, dilation, groups, precision, residual, epilogue,
                 padding_mode, layout, fp32_output)
    # Any strides are accepted: a tensor that is not dense in the layout (a weight in the other
    # memory format, a slice) is copied into it first.
    memory_format = _FORMATS[layout]
    dense = weight.is_contiguous(memory_format=memory_format)
    input, weight = input.contiguous(memory_format=memory_format), weight.contiguous(memory_format=memory_format)
    bias = None if bias is None else bias.contiguous()
    residual = None if residual is None else residual.contiguous(memory_format=memory_format)
    out = torch.empty(desc.output_shape, dtype=out_dtype, device=input.device, memory_format=memory_format)
    stream = torch.cuda.current_stream(input.device).cuda_stream
    weights = prepared.get(desc, weight, stream) if prepared is not None and dense else None
    _ext.default_engine().run_pointers(desc, input.data_ptr(), weight.data_ptr(),
                                       0 if bias is None else bias.data_ptr(), out.data_ptr(), stream,
                                       residual=0 if residual is None else residual.data_ptr(),
                                       prepared_weights=weights)
    if _recorder is not None:
        _recorder.add(desc)
    return out


@torch.library.custom_op("conv3djit::conv3d", mutates_args=())
def conv3d_op(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Sequence[int],
              padding: Sequence[int], padding_kind: str, dilation: Sequence[int], groups: int, precision: str,
              residual: Optional[torch.Tensor] = None, activation: str = "identity", alpha: float = 1.0,
              slope: float = 0.01, clamp_min: float = 0.0, clamp_max: float = 6.0, gamma: float = 1.0,
              beta: float = 1.0, padding_mode: str = "zeros", fp32_output: bool = False) -> torch.Tensor:
    """conv3djit's convolution and epilogue. padding_kind 'explicit' uses `padding`; 'same' and 'valid'
    ignore it. activation and padding_mode are conv3djit's names of them (lower case). fp32_output:
    a float32 output (and residual) of bfloat16 or float16 inputs. The output is channels_last_3d
    when the input or the weight is, as F.conv3d's, else contiguous. padding_mode and fp32_output come last so that
    calls written before them keep their meaning."""
    return _launch(input, weight, bias, stride, padding, padding_kind, dilation, groups, precision, residual,
                   (activation, alpha, slope, clamp_min, clamp_max, gamma, beta), padding_mode, fp32_output)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _needs_grad(*tensors):
    """Whether autograd records a call on these tensors (None where the call has none)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _direct(input, *others):
    """Whether a call may skip the dispatcher and run _launch itself. The custom op's round trip
    through the dispatcher and back into Python costs tens of microseconds per call; it is needed
    only while tracing (torch.compile, export), for autograd, for tensor subclasses (fake,
    functional) and under an active dispatch or function mode, and it is taken for all of those.
    others: the call's other tensors, None where it has none."""
    return (input.is_cuda and not torch.compiler.is_compiling() and type(input) in _PLAIN
            and all(t is None or type(t) in _PLAIN for t in others) and not _needs_grad(input, *others)
            and not torch._C._len_torch_dispatch_stack() and not torch._C._is_torch_function_mode_enabled())


def _padding_sides(weight, padding, padding_kind, dilation):
    """Per-axis (before, after) padding, as conv3djit and PyTorch resolve 'same' (the odd element
    of a total goes to the end)."""
    sides = []
    for axis in range(3):
        span = dilation[axis] * (weight.shape[2 + axis] - 1)
        if padding_kind == "same":
            sides.append((span // 2, span - span // 2))
        elif padding_kind == "valid":
            sides.append((0, 0))
        else:
            sides.append((padding[axis], padding[axis]))
    return sides


@conv3d_op.register_fake
def _(input, weight, bias, stride, padding, padding_kind, dilation, groups, precision, residual=None,
      activation="identity", alpha=1.0, slope=0.01, clamp_min=0.0, clamp_max=6.0, gamma=1.0, beta=1.0,
      padding_mode="zeros", fp32_output=False):
    torch._check(input.dim() == 5, lambda: f"input: expected 5 dims, got {input.dim()}")
    torch._check(weight.dim() == 5, lambda: f"weight: expected 5 dims, got {weight.dim()}")
    sides = _padding_sides(weight, padding, padding_kind, dilation)
    out = [input.shape[0], weight.shape[0]]
    for axis in range(3):
        before, after = sides[axis]
        span = dilation[axis] * (weight.shape[2 + axis] - 1)
        out.append((input.shape[2 + axis] + before + after - span - 1) // stride[axis] + 1)
    if residual is not None:
        torch._check(residual.dim() == 5, lambda: f"residual: expected 5 dims, got {residual.dim()}")
        for axis in range(5):
            torch._check(residual.shape[axis] == out[axis], lambda: f"residual: shape {tuple(residual.shape)}, but "
                                                                    f"the output is {tuple(out)}")
    # The implementation's dtype and memory format.
    return torch.empty(out, dtype=_output_dtype(input, fp32_output), device=input.device,
                       memory_format=_FORMATS[_layout_of(input, weight)])


def _plain_epilogue(residual, epilogue):
    """Whether an epilogue (values in _EPILOGUE_ARGS order) is the plain convolution's, plus bias."""
    activation, alpha, _, _, _, gamma, _ = epilogue
    return residual is None and activation == "identity" and alpha == 1 and gamma == 1


def _setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, padding_kind, dilation, groups, _, residual, *rest = inputs
    epilogue, padding_mode = rest[:7], rest[7]
    if not _plain_epilogue(residual, epilogue):
        raise Unsupported("conv3djit::conv3d: no backward through a fused epilogue; conv3djit.torch.conv3d runs the "
                          "epilogue as PyTorch's ops when gradients are needed")
    if padding_mode != "zeros":
        raise Unsupported(f"conv3djit::conv3d: no backward through padding_mode = '{padding_mode}'; "
                          "conv3djit.torch.conv3d pads with F.pad when gradients are needed")
    ctx.save_for_backward(input, weight)
    ctx.has_bias = bias is not None
    ctx.conv = (list(stride), list(padding), padding_kind, list(dilation), groups)


def _backward(ctx, grad_out):
    """PyTorch's convolution backward (cuDNN on CUDA) for the same convolution."""
    input, weight = ctx.saved_tensors
    stride, padding, padding_kind, dilation, groups = ctx.conv
    # A float32 output of half inputs (fp32_output): its gradient in the inputs' type, as
    # PyTorch's convolution backward takes it.
    grad_out = grad_out.to(input.dtype)
    sides = _padding_sides(weight, padding, padding_kind, dilation)
    before = [b for b, _ in sides]
    extra = [a - b for b, a in sides]
    x = input
    if any(extra):  # asymmetric 'same': pad the end explicitly, as PyTorch's own forward does
        x = F.pad(input, [0, extra[2], 0, extra[1], 0, extra[0]])
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    grad_input, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
        grad_out, x, weight, [weight.shape[0]] if ctx.has_bias else None, stride, before, dilation, False,
        [0, 0, 0], groups, mask)
    if grad_input is not None and any(extra):
        grad_input = grad_input[:, :, :input.shape[2], :input.shape[3], :input.shape[4]]
    # Nothing for the op's other arguments: six of the convolution, the residual, seven of the epilogue, the
    # padding mode and fp32_output.
    return (grad_input, grad_weight, grad_bias) + (None,) * 16


conv3d_op.register_autograd(_backward, setup_context=_setup_context)


def _check_epilogue(epilogue):
    """The C++ checks of the epilogue's values (finite, the clamp's bounds in order), for the
    composed path, whose convolution has none of them."""
    valid = _ext.validate(_ext.Conv3dDesc((1, 1, 1, 1, 1), 1, 1, **dict(zip(_EPILOGUE_ARGS, epilogue))))
    if not valid:
        raise InvalidArgument(valid.message)


def _epilogue_ops(y, bias, residual, activation, alpha, slope, clamp_min, clamp_max, gamma, beta):
    """act(alpha * y + bias) * gamma + beta * residual as PyTorch's ops, which autograd differentiates."""
    if alpha != 1:
        y = y * alpha
    if bias is not None:
        y = y + bias.view(1, -1, 1, 1, 1)
    y = _ACTIVATIONS[activation](y, slope, clamp_min, clamp_max)
    if gamma != 1:
        y = y * gamma
    return y if residual is None else torch.add(y, residual, alpha=beta)


def _composed(conv, residual, epilogue, fp32_output):
    """The differentiable form: conv3djit's convolution (with the bias when alpha is 1), then the
    epilogue as PyTorch's ops. The fused kernel keeps no pre-activation values for a backward;
    this keeps them as autograd does for any sequence of ops."""
    input, weight, bias, *rest = conv
    alpha = epilogue[1]
    if not torch.compiler.is_compiling():  # the extension is opaque to torch.compile's tracing
        _check_epilogue(epilogue)
    y = torch.ops.conv3djit.conv3d.default(input, weight, bias if alpha == 1 else None, *rest,
                                           fp32_output=fp32_output)
    return _epilogue_ops(y, None if alpha == 1 else bias, residual, *epilogue)


def _padded(conv, padding_mode):
    """The call with its input padded by F.pad in `padding_mode` and the convolution unpadded: what
    nn.Conv3d runs for that mode, and what autograd differentiates."""
    input, weight, bias, stride, padding, padding_kind, dilation, *rest = conv
    sides = _padding_sides(weight, padding, padding_kind, dilation)
    pads = [amount for side in reversed(sides) for amount in side]  # F.pad's order: W first
    return (F.pad(input, pads, mode=padding_mode), weight, bias, stride, [0, 0, 0], "explicit", dilation, *rest)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, precision=None,
           padding_mode="zeros", activation="identity", alpha=1.0, slope=0.01, clamp_min=0.0, clamp_max=6.0,
           gamma=1.0, residual=None, beta=1.0, fp32_output=False, prepared=None):
    """torch.nn.functional.conv3d through conv3djit: the same arguments and result, differentiable,
    traceable by torch.compile, capturable in CUDA graphs once its kernel is loaded. Runs on
    torch.cuda.current_stream(). precision: 'fp32', 'tf32', or None to follow
    torch.backends.cudnn.allow_tf32 (the class of float32 inputs; bfloat16 and float16 have their
    type's). Calls that need nothing of the dispatcher (no autograd, no tracing) run the op's
    implementation directly.

    Tensors: float32, bfloat16 or float16 (weight and bias of the input's type), in any memory
    format. As F.conv3d, a call with a channels_last_3d input or weight runs in that format
    (conv3djit's NDHWC layout) and gives a channels_last_3d output, others run contiguous (NCDHW);
    a tensor in the other format is copied into the call's. fp32_output=True: a float32 output
    (and residual) of half inputs.

    padding_mode: what the padding reads, as nn.Conv3d's: 'zeros', 'reflect' (padding < the input
    extent), 'replicate' or 'circular' (padding <= the extent), in any case. Without gradients the
    kernel maps the padded positions in its loads (no padded copy); when autograd records the call
    it is F.pad in that mode and the unpadded convolution, so the gradients are PyTorch's own.

    The epilogue: the result is act(alpha * conv + bias) * gamma + beta * residual, with activation
    'identity', 'relu', 'leaky_relu' (slope), 'gelu', 'gelu_tanh', 'silu', 'sigmoid', 'tanh',
    'hardswish' or 'clamp' (clamp_min, clamp_max), and residual a tensor of the output's shape (or
    None). Without gradients it is fused into the kernel's store; when autograd records the call it
    is the convolution followed by PyTorch's ops, so gradients are PyTorch's own.

    prepared: a conv3djit.torch.PreparedCache for `weight`: calls that run the kernel directly (no
    autograd, no tracing) read the weight rewritten once in the kernel's layout (made again after
    the weight changes in place) instead of rewriting it on every call."""
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise InvalidArgument(f"padding = {padding!r}: expected an int, 3 ints, 'same' or 'valid'")
        kind, amounts = padding, [0, 0, 0]
    else:
        kind, amounts = "explicit", _triple(padding, "padding")
    conv = (input, weight, bias, _triple(stride, "stride"), amounts, kind, _triple(dilation, "dilation"), groups,
            precision_of(precision))
    epilogue = (_activation_of(activation), float(alpha), float(slope), float(clamp_min), float(clamp_max),
                float(gamma), float(beta))
    mode = _padding_mode_of(padding_mode)
    needs_grad = _needs_grad(input, weight, bias, residual)
    if needs_grad and mode != "zeros":
        if not torch.compiler.is_compiling():  # conv3djit's checks (and messages) before F.pad's
            _desc(*conv, residual, epilogue, mode)
        conv, mode = _padded(conv, mode), "zeros"
    fp32_output = bool(fp32_output)
    if needs_grad and not _plain_epilogue(residual, epilogue):
        return _composed(conv, residual, epilogue, fp32_output)
    if _direct(input, weight, bias, residual):
        return _launch(*conv, residual, epilogue, mode, fp32_output, prepared)
    return torch.ops.conv3djit.conv3d.default(*conv, residual, *epilogue, mode, fp32_output)
