"""conv3djit.torch.Conv3d, the nn.Conv3d drop-in, and convert(), which swaps it into a model."""
from dataclasses import dataclass, field

import torch
from torch import nn

from ._op import _DTYPES, PreparedCache, conv3d, precision_of


def _autocast_dtype(input):
    """The dtype autocast runs a CUDA convolution in, or None outside autocast."""
    if input.is_cuda and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return None


def _served(input, weight):
    """Whether conv3djit runs this call: CUDA tensors of a type it serves (float32, bfloat16,
    float16), the weight's the input's, or both cast by autocast to one it serves. The rest goes to
    nn.Conv3d's own forward (CPU tensors, float64, mixed types outside autocast)."""
    if not input.is_cuda or input.dtype not in _DTYPES or weight.dtype not in _DTYPES:
        return False
    autocast = _autocast_dtype(input)
    return autocast in _DTYPES if autocast is not None else weight.dtype == input.dtype


class Conv3d(nn.Conv3d):
    """nn.Conv3d whose CUDA forward (float32, bfloat16 or float16; contiguous or channels_last_3d
    inputs) runs through conv3djit.

    Same constructor (plus the keyword `precision`: 'fp32', 'tf32', or None to follow
    torch.backends.cudnn.allow_tf32), same parameters and state_dict, so checkpoints load either
    way. Every padding_mode ('zeros', 'reflect', 'replicate', 'circular') is conv3djit's own,
    applied in the kernel's loads without the padded copy nn.Conv3d makes (except when autograd
    records the call: see conv3djit.torch.conv3d). Under autocast the input, weight and bias are
    cast to the autocast dtype first, as autocast does for nn.Conv3d, and the output has that type.
    The output is channels_last_3d when the input (or the weight) is, as nn.Conv3d's. Calls conv3djit does not serve (CPU, float64) run
    nn.Conv3d's forward. The backward is PyTorch's.

    prepared_weights=True (inference with fixed weights): calls without autograd read the weight
    rewritten once into the kernel's layout (conv3djit.Engine.prepare_weights) instead of rewriting
    it on every call, where the kernel has such a step; the copy is made again after the weight
    changes in place (load_state_dict, an optimizer step) and costs device memory of the weight's
    size. Writes through weight.data are not seen (as autograd does not see them).
    """

    def __init__(self, *args, precision=None, prepared_weights=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.precision = precision
        self.prepared_weights = prepared_weights
        self._prepared = PreparedCache()

    def extra_repr(self):
        text = super().extra_repr()
        if self.precision is not None:
            text += f", precision={self.precision!r}"
        return text + (", prepared_weights=True" if self.prepared_weights else "")

    def forward(self, input):
        if not _served(input, self.weight):
            return super().forward(input)
        weight, bias = self.weight, self.bias
        autocast = _autocast_dtype(input)
        if autocast is not None:  # autocast's casts for a convolution; they are differentiable
            input, weight = input.to(autocast), weight.to(autocast)
            bias = None if bias is None else bias.to(autocast)
        unbatched = input.dim() == 4  # nn.Conv3d takes C x D x H x W too
        if unbatched:
            input = input.unsqueeze(0)
        # nn.Conv3d pads by _reversed_padding_repeated_twice, which splits 'same' as conv3djit does.
        # (Autocast's cast is a new tensor each call: nothing to keep. getattr: a module pickled
        # before the option existed.)
        prepared = None
        if getattr(self, "prepared_weights", False) and weight is self.weight:
            prepared = self.__dict__.setdefault("_prepared", PreparedCache())
        out = conv3d(input, weight, bias, self.stride, self.padding, self.dilation, self.groups,
                     precision=self.precision, padding_mode=self.padding_mode, prepared=prepared)
        return out.squeeze(0) if unbatched else out


@dataclass
class ConversionReport:
    """What convert() did: the swapped modules' names, and each skipped nn.Conv3d with the reason."""

    swapped: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)

    def __str__(self):
        lines = [f"conv3djit: {len(self.swapped)} Conv3d swapped, {len(self.skipped)} left as they were"]
        lines += [f"  swapped {name or '(root)'}" for name in self.swapped]
        lines += [f"  kept    {name or '(root)'}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)


def _why_not(module):
    if type(module) is Conv3d:
        return "already a conv3djit.torch.Conv3d"
    if type(module) is not nn.Conv3d:
        return f"{type(module).__qualname__} subclasses nn.Conv3d, and its forward may differ"
    if module.weight.dtype not in _DTYPES:
        return f"weight dtype {module.weight.dtype}: conv3djit serves torch.float32, torch.bfloat16 and torch.float16"
    return None


def convert(model, *, precision=None, prepared_weights=False):
    """Makes every plain nn.Conv3d in `model` (the model itself included) a conv3djit.torch.Conv3d,
    in place: only the class changes, so parameters, buffers, hooks, optimizer references and
    state_dict keys stay as they are. Subclasses of nn.Conv3d and layers of other types than
    float32, bfloat16 and float16 are left alone. precision and prepared_weights: Conv3d's.
    Returns a ConversionReport (print it for a summary)."""
    precision_of(precision)  # refuse a wrong value before changing anything
    report = ConversionReport()
    for name, module in model.named_modules():
        if not isinstance(module, nn.Conv3d):
            continue
        reason = _why_not(module)
        if reason:
            report.skipped[name] = reason
            continue
        module.__class__ = Conv3d
        module.precision = precision
        module.prepared_weights = prepared_weights
        module._prepared = PreparedCache()
        report.swapped.append(name)
    return report
