"""How our warnings reach the user: ``DataWaitWarning: PerformanceMonitor: ...``, the category and the text.

Lightning formats every warning raised from a path containing "lightning" as ``<file>:<line>: <text>``,
which would print our library's path and drop the category. :func:`warn` formats this one warning itself,
for the call only; filters (``warnings.filterwarnings(..., category=DataWaitWarning)``) work as for any
warning, and other warnings keep whatever format is in place.
"""

from __future__ import annotations

import warnings

from lightning_profkit.printable import redact


def warn(message: str, category: type[Warning] = RuntimeWarning, stacklevel: int = 1) -> None:
    """Warn with ``message``, printed as ``<category name>: <message>``; ``stacklevel`` as in :func:`warnings.warn`
    for our caller."""
    previous = warnings.formatwarning

    def formatwarning(msg, cat, filename, lineno, line=None):  # type: ignore[no-untyped-def]
        if cat is category and str(msg) == message:
            return f"{cat.__name__}: {msg}\n"
        return previous(msg, cat, filename, lineno, line)

    warnings.formatwarning = formatwarning
    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    finally:
        warnings.formatwarning = previous


class Notices:
    """One callback's problems, each said once (``key``, default the message itself), as a RuntimeWarning
    ``PerformanceMonitor: ...``. Kept across fits: a problem said in one fit is not said again in the next."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def __call__(self, message: str, key: str = "") -> None:
        key = key or message
        if key not in self.said:
            self.said.add(key)
            warn(f"PerformanceMonitor: {redact(message)}", RuntimeWarning, stacklevel=3)
