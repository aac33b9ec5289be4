"""conv3djit: 3D convolutions on NVIDIA GPUs, each shape with a CUDA kernel compiled for it (NVRTC),
cached in memory and on disk.

Arrays cross through DLPack: PyTorch tensors, CuPy and JAX arrays (and any other DLPack producer)
on a CUDA device. Importing needs neither PyTorch nor a GPU; ``conv3djit.torch`` is the PyTorch
integration (custom op, autograd, ``nn.Conv3d`` drop-in). docs/python.md is the guide.
"""
from ._errors import (CacheIO, CacheMiss, CompileFailed, DriverError, Error, InvalidArgument, NoDevice,
                      Unsupported)
from ._ext import (CacheEntry, CacheInfo, Comparison, Conv3dDesc, DeviceInfo, Engine, EngineStats,
                   KernelResources, PlanExplanation, PlanStep, PrecompiledKernel, PrecompileResult, PreparedWeights,
                   Tolerance,
                   TunedCandidate, TuneResult,
                   Validation, check_arch, compare, current_device, default_engine, describe, nvrtc_version,
                   reference_conv3d, supported_archs, tolerance)
from ._ext import version as _version
from ._api import conv3d, output_shape, precompile, resolved_padding, tune, validate
from ._manifest import manifest_line, precompile_manifest, read_manifest, write_manifest

__version__ = _version()

__all__ = [
    "CacheEntry", "CacheIO", "CacheInfo", "CacheMiss", "Comparison", "CompileFailed", "Conv3dDesc",
    "DeviceInfo", "DriverError", "Engine", "EngineStats", "Error", "InvalidArgument", "KernelResources",
    "NoDevice", "PlanExplanation", "PlanStep", "PrecompileResult", "PrecompiledKernel", "PreparedWeights", "Tolerance", "TuneResult", "TunedCandidate", "Unsupported",
    "Validation", "check_arch", "compare", "conv3d", "current_device", "default_engine", "describe", "manifest_line",
    "nvrtc_version", "output_shape", "precompile", "precompile_manifest", "read_manifest", "reference_conv3d",
    "resolved_padding", "supported_archs", "tolerance", "tune", "validate", "write_manifest",
]
