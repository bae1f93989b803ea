"""How our warnings reach the user: ``DataWaitWarning: PerformanceMonitor: ...``, the category and the text.

Lightning formats every warning raised from a path containing "lightning" as ``<file>:<line>: <text>``,
which would print our library's path and drop the category. :func:`warn` formats this one warning itself,
for the call only; filters (``warnings.filterwarnings(..., category=DataWaitWarning)``) work as for any
warning, and other warnings keep whatever format is in place.
"""

from __future__ import annotations

import warnings


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
