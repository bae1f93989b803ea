"""The one way this package writes a file that others may read while it is written: under a temporary name
beside it, renamed into place when complete, so that a reader sees the whole file or none. The temporary file is
created new under a name nobody can foresee (``O_EXCL | O_NOFOLLOW``: never through a link or into a file someone
else made)."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
from typing import BinaryIO, Iterator

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def temporary_pattern(final_path: str) -> str:
    """A glob of the hidden sibling names :func:`write_atomic` uses for ``final_path``, which match none of the
    names readers look for (not torch-tb-profiler's ``*.pt.trace.json(.gz)``, not ``capture.request``), so that
    any process can find them to clean up."""
    head, tail = os.path.split(final_path)
    return os.path.join(glob.escape(head), f".{glob.escape(tail)}.*.tmp")


@contextlib.contextmanager
def atomic_writer(path: str) -> Iterator[BinaryIO]:
    """A new temporary file beside ``path``, renamed to ``path`` when the block ends; removed if it raises."""
    head, tail = os.path.split(path)
    tmp = os.path.join(head, f".{tail}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, _NEW, 0o666)  # the umask applies, as to a plain open()
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a new temporary file; nothing is left behind on failure."""
    with atomic_writer(path) as f:
        f.write(data)
