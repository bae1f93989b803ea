"""The one way this package writes a file others may read: under a new temporary name nobody can foresee beside it
(never through a link), renamed into place when complete (docs/guarantees.md)."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
from typing import BinaryIO, Iterator

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def temporary_pattern(final_path: str) -> str:
    """A glob of the hidden temporary names :func:`atomic_writer` uses for ``final_path`` (none a reader looks for)."""
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
