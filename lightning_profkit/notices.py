"""Our warnings, shown at the user's running line (``train.py:42: DataWaitWarning: PerformanceMonitor: ...``).
Design notes: docs/how-it-works.md."""

from __future__ import annotations

import inspect
import threading
import warnings

from lightning_profkit.internals import thread_frame
from lightning_profkit.printable import redact

# the modules whose frames are not the user's: ours, Lightning's, torch's, and the standard library's wrappers
FRAMEWORKS = ("lightning_profkit", "lightning", "lightning_fabric", "pytorch_lightning", "torch", "contextlib",
              "functools", "threading", "concurrent")


def warn(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """Warn with ``message`` of ``category``, shown at the innermost line of the user's code on the training thread
    (the main thread, from a helper thread of ours); here where there is none (a fit started by a framework)."""
    frame = inspect.currentframe()
    if threading.current_thread() is not threading.main_thread():
        frame = thread_frame(threading.main_thread().ident) or frame
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in FRAMEWORKS:
        frame = frame.f_back
    if frame is None:
        warnings.warn(message, category, stacklevel=2)
        return
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))


class Notices:
    """One callback's problems as RuntimeWarnings, each ``key`` (default: the message) said once, across fits too."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def __call__(self, message: str, key: str = "") -> None:
        key = key or message
        if key not in self.said:
            self.said.add(key)
            warn(f"PerformanceMonitor: {redact(message)}", RuntimeWarning)
