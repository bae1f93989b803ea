"""The one way this package opens a file it did not just write: a regular file, not through a symbolic link, of at
most a stated size (docs/guarantees.md)."""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO, Optional

_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


class FileRefused(ValueError):
    """A file that was not read, with one line that names it and says why."""


def missing(path: str) -> str:
    """Why ``path`` is neither a file nor a folder, in words."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{path}: a loop of symbolic links"
        if os.path.islink(path):
            return f"{path}: a symbolic link to nothing ({os.readlink(path)})"
        return f"{path}: no such file or folder"
    return f"{path}: not a file or folder (a pipe or a device)"


def size_words(size: float) -> str:
    """A size in bytes as words: ``64 MB`` (10**6 bytes), ``2.5 MB`` under 10 MB, ``40 kB`` under 1 MB, ``100 bytes``
    under 1 kB."""
    if size < 1e3:
        return f"{size:.0f} bytes"
    value, unit = (size / 1e6, "MB") if size >= 1e6 else (size / 1e3, "kB")
    return f"{value:.1f} {unit}" if value < 9.95 else f"{value:.0f} {unit}"


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"))


def _kind(st: os.stat_result) -> str:
    return next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")


def open_regular(path: str, limit: Optional[int] = None) -> BinaryIO:
    """``path`` opened for reading if it is a regular file of at most ``limit`` bytes, not a link; else
    :class:`FileRefused` before anything is read (an ``OSError`` where the folder cannot be read)."""
    try:
        fd = os.open(path, _READ)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOENT) and not os.path.exists(path):
            raise FileRefused(missing(path)) from None
        if err.errno == errno.ELOOP:
            raise FileRefused(f"{path}: a symbolic link, not read (link its folder, or copy the file)") from None
        try:
            st = os.lstat(path)
        except OSError:
            raise err from None  # the folder: not there, not readable
        raise FileRefused(f"{path}: {_kind(st)}, not a file: not read" if not stat.S_ISREG(st.st_mode)
                          else f"{path}: {err.strerror or err}: not read") from None  # a socket: ENXIO
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and (limit is None or st.st_size <= limit):
        return os.fdopen(fd, "rb")
    os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{path}: {_kind(st)}, not a file: not read")
    raise FileRefused(f"{path}: {size_words(st.st_size)}, over the {size_words(limit or 0)} such a file may be: "
                      "not read")


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`), at most ``limit`` of them."""
    with open_regular(path, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew since it was opened
        raise FileRefused(f"{path}: over the {size_words(limit)} such a file may be: not read")
    return data


def fd_path(f: BinaryIO) -> str:
    """A path to the open file ``f`` itself, for a library that opens files by path (DuckDB, fsspec)."""
    return f"/dev/fd/{f.fileno()}"
