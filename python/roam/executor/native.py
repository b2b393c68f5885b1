"""Loading the compiled extension ``roam._native`` (src/executor/, built by CMake)."""

_NATIVE = None

BUILD_HINT = ("roam._native is not built (or not for this Python's torch): run `bash "
              "scripts/setup` from the repository root (it makes .venv with the pinned torch "
              "and builds the module into python/roam/ against it)")


class NativeMissing(ImportError):
    """The executor extension is not built (see :data:`BUILD_HINT`)."""


def native():
    """The ``roam._native`` module (imported once). Raises :class:`NativeMissing`."""
    global _NATIVE
    if _NATIVE is None:
        import torch  # noqa: F401  (loads libc10 first; the extension shares it)
        try:
            from .. import _native as mod
        except ImportError as e:
            raise NativeMissing(f"{BUILD_HINT} ({e})") from e
        _NATIVE = mod
    return _NATIVE


def available() -> bool:
    """True when the extension can be imported."""
    try:
        native()
        return True
    except NativeMissing:
        return False


def pass_through_peak(fn, alignment: int = 64, priority: int = 100):
    """``(fn(), peak bytes)``: ``fn`` run under a pass-through session of the executor's
    allocator (every CPU allocation served as usual and counted, rounded up to
    ``alignment``); the peak is of the bytes allocated during the call above what existed
    before it. Raises NativeMissing without the extension."""
    s = native().Session()
    s.configure(0, alignment, [])
    s.set_pass_through(True)
    s.install(priority)
    try:
        out = fn()
    finally:
        s.uninstall()
    return out, int(s.stats()["total_peak"])
