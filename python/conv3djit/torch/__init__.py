"""conv3djit for PyTorch (import it where torch is installed).

- conv3d(input, weight, bias, stride, padding, dilation, groups, precision=None, padding_mode='zeros',
  activation=..., residual=..., ...): F.conv3d through the custom op torch.ops.conv3djit.conv3d (fake
  implementation for torch.compile, autograd through PyTorch's convolution backward, current stream,
  CUDA-graph capturable), with nn.Conv3d's padding modes in the kernel's loads and an epilogue
  act(alpha * conv + bias) * gamma + beta * residual fused into its store when no gradient is needed.
- Conv3d: the nn.Conv3d drop-in; convert(model): swaps it in, returns a ConversionReport. With
  prepared_weights=True, calls without autograd read weights rewritten once (PreparedCache).
- record_shapes(model) / warmup(model, *inputs, manifest=path): the manifest of what ran.
"""
from ._module import Conv3d, ConversionReport, convert
from ._op import PreparedCache, conv3d, precision_of
from ._warmup import ShapeRecorder, record_shapes, warmup

__all__ = ["Conv3d", "ConversionReport", "PreparedCache", "ShapeRecorder", "conv3d", "convert", "precision_of",
           "record_shapes", "warmup"]
