"""conv3djit.torch.Conv3d, the nn.Conv3d drop-in, and convert(), which swaps it into a model."""
from dataclasses import dataclass, field

import torch
from torch import nn

from ._op import conv3d, precision_of


def _served(input, weight):
    """Whether conv3djit runs this call; the rest goes to nn.Conv3d's own forward (CPU tensors, other
    dtypes, autocast to half precision)."""
    if not input.is_cuda or input.dtype != torch.float32 or weight.dtype != torch.float32:
        return False
    return not (torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") != torch.float32)


class Conv3d(nn.Conv3d):
    """nn.Conv3d whose float32 CUDA forward runs through conv3djit.

    Same constructor (plus the keyword `precision`: 'fp32', 'tf32', or None to follow
    torch.backends.cudnn.allow_tf32), same parameters and state_dict, so checkpoints load either
    way. Every padding_mode ('zeros', 'reflect', 'replicate', 'circular') is conv3djit's own,
    applied in the kernel's loads without the padded copy nn.Conv3d makes (except when autograd
    records the call: see conv3djit.torch.conv3d). Calls conv3djit does not serve (CPU, other
    dtypes, autocast to fp16/bf16) run nn.Conv3d's forward. The backward is PyTorch's.
    """

    def __init__(self, *args, precision=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.precision = precision

    def extra_repr(self):
        text = super().extra_repr()
        return text if self.precision is None else f"{text}, precision={self.precision!r}"

    def forward(self, input):
        if not _served(input, self.weight):
            return super().forward(input)
        unbatched = input.dim() == 4  # nn.Conv3d takes C x D x H x W too
        if unbatched:
            input = input.unsqueeze(0)
        # nn.Conv3d pads by _reversed_padding_repeated_twice, which splits 'same' as conv3djit does.
        out = conv3d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
                     precision=self.precision, padding_mode=self.padding_mode)
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
    if module.weight.dtype != torch.float32:
        return f"weight dtype {module.weight.dtype}: conv3djit serves torch.float32"
    return None


def convert(model, *, precision=None):
    """Makes every plain nn.Conv3d in `model` (the model itself included) a conv3djit.torch.Conv3d,
    in place: only the class changes, so parameters, buffers, hooks, optimizer references and
    state_dict keys stay as they are. Subclasses of nn.Conv3d and non-float32 layers are left
    alone. Returns a ConversionReport (print it for a summary)."""
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
        report.swapped.append(name)
    return report
