"""Shape recording for deployment: run a model once, write the manifest of the convolutions it ran
through conv3djit (`conv3djit precompile --manifest`, or conv3djit.precompile_manifest), so the
servers' caches hold exactly those kernels."""
import contextlib

import torch

from .. import _manifest
from . import _op
from ._module import Conv3d


class ShapeRecorder:
    """The descriptions conv3djit.torch ran while recording, each once, named after the first
    module that ran it (when the recording knows the model)."""

    def __init__(self):
        self._names = {}  # Conv3dDesc -> name, in first-run order
        self._current = []

    def add(self, desc):
        self._names.setdefault(desc, self._current[-1] if self._current else None)

    @property
    def descs(self):
        """[(name, Conv3dDesc)] in the order they first ran; name None where unknown."""
        return [(name, desc) for desc, name in self._names.items()]

    def write(self, path):
        """Writes the manifest; returns the number of lines."""
        return _manifest.write_manifest(path, self.descs)


@contextlib.contextmanager
def record_shapes(model=None):
    """While active, every conv3djit.torch convolution records its description (yields the
    ShapeRecorder). With `model`, each is named after its module (e.g. 'encoder.conv1')."""
    recorder = ShapeRecorder()
    hooks = []
    # Hooks return None: a forward hook's result would replace the module's output.
    def enter(name):
        def hook(_module, _args):
            recorder._current.append(name)
        return hook

    def leave(_module, _args, _out):
        recorder._current.pop()

    if model is not None:
        for name, module in model.named_modules():
            if isinstance(module, Conv3d):
                hooks.append(module.register_forward_pre_hook(enter(name)))
                hooks.append(module.register_forward_hook(leave))
    previous, _op._recorder = _op._recorder, recorder
    try:
        yield recorder
    finally:
        _op._recorder = previous
        for hook in hooks:
            hook.remove()


def warmup(model, *example_inputs, manifest=None, **example_kwargs):
    """Runs model(*example_inputs, **example_kwargs) once without autograd, recording shapes: every
    conv3djit layer's kernel is compiled (or read from the disk cache) and loaded, so later calls
    (and CUDA graph capture) find it ready. Writes the manifest to `manifest` if given. Returns
    [(name, Conv3dDesc)]."""
    with torch.no_grad(), record_shapes(model) as recorder:
        model(*example_inputs, **example_kwargs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    if manifest is not None:
        recorder.write(manifest)
    return recorder.descs
