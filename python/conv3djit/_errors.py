"""The exception classes: one base, conv3djit.Error, and one subclass per C++ ErrorCategory.

The extension raises the subclass of the C++ error's category, with its message, which names the
field and the value ("stride[W] = 0: stride must be in [1, 1024]").
"""


class Error(Exception):
    """Every conv3djit failure. ``category`` is the C++ category's stable name."""

    category = "error"


class InvalidArgument(Error, ValueError):
    """The description or the arrays are wrong; nothing was launched or written."""

    category = "invalid_argument"


class Unsupported(Error, NotImplementedError):
    """Valid for PyTorch, but not served by conv3djit (dtype, layout, device, strides, ...)."""

    category = "unsupported"


class CompileFailed(Error):
    """NVRTC refused a generated kernel; the message carries its log."""

    category = "compile_failed"


class DriverError(Error):
    """A CUDA Driver API call failed."""

    category = "driver_error"


class NoDevice(Error):
    """No CUDA driver or no CUDA device on this machine."""

    category = "no_device"


class CacheIO(Error):
    """Reading or writing the kernel cache failed (only from explicit cache calls)."""

    category = "cache_io"


class CacheMiss(Error):
    """The kernel is in no cache and compiling is off (compile_mode='never')."""

    category = "cache_miss"


BY_CATEGORY = {cls.category: cls for cls in
               (InvalidArgument, Unsupported, CompileFailed, DriverError, NoDevice, CacheIO, CacheMiss)}
