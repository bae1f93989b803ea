"""The one way this package writes a file that others may read while it is written: under a temporary name
beside it, renamed into place when complete, so that a reader sees the whole file or none."""

from __future__ import annotations

import os


def temporary_name(final_path: str) -> str:
    """A hidden sibling name that matches none of the names readers look for (not torch-tb-profiler's
    ``*.pt.trace.json(.gz)``, not ``capture.request``); any process can name it, to clean it up."""
    head, tail = os.path.split(final_path)
    return os.path.join(head, f".{tail}.tmp")


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`temporary_name`; nothing is left behind on failure."""
    tmp = temporary_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
