"""Find torch.profiler (Kineto) Chrome-trace files and read their JSON text; every problem is one
:class:`TraceError` line. Decoding is :mod:`~lightning_profkit.trace.events`' (this module starts without msgspec, so that
``profkit`` starts reading while it imports it)."""

from __future__ import annotations

import errno
import os
import re
from typing import Iterator

try:  # ISA-L inflates about twice as fast as zlib
    from isal.isal_zlib import decompressobj as _inflater
    from isal.isal_zlib import error as _GunzipError
except ImportError:  # installed without its dependencies
    from zlib import decompressobj as _inflater
    from zlib import error as _GunzipError

_GZIP = 31  # wbits: a gzip header and trailer

# A gzip file's JSON may inflate to this many times the file's size (a kineto trace: about 10-15x) once past
# ALWAYS_INFLATED bytes: beyond, it is a gzip bomb (whitespace or one huge string: 1000x and more), refused before
# its text is held. PROFKIT_MAX_INFLATION raises the ratio.
MAX_INFLATION = 100
ALWAYS_INFLATED = 64 * 2**20

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
JSON_SUFFIXES = (".json", ".json.gz")


class TraceError(ValueError):
    """A path that is not a readable trace, with a message fit for one line."""


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


def _ratio() -> int:
    try:
        return max(1, int(os.environ.get("PROFKIT_MAX_INFLATION", MAX_INFLATION)))
    except ValueError:
        return MAX_INFLATION


def inflation_limit(compressed: int) -> int:
    """The most JSON bytes a gzip file of ``compressed`` bytes may inflate to (see :data:`MAX_INFLATION`)."""
    return max(ALWAYS_INFLATED, _ratio() * compressed)


def _bomb(path: str, compressed: int) -> TraceError:
    return TraceError(f"{path}: inflates past {inflation_limit(compressed) / 2**20:.0f} MB of JSON from "
                      f"{compressed / 2**20:.1f} MB of gzip (a profiler trace inflates about 10-15x; the limit is "
                      f"{_ratio()}x, and at least {ALWAYS_INFLATED // 2**20} MB): refused as a gzip bomb, unread; "
                      "PROFKIT_MAX_INFLATION=<ratio> raises it")


def read_json(path: str) -> bytes:
    """The trace's JSON text, gunzipped where needed (within :func:`inflation_limit`)."""
    if not os.path.isfile(path):
        raise TraceError(missing(path))
    try:
        if os.path.getsize(path) == 0:
            raise TraceError(f"{path}: empty file")
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = _inflate(path, raw)
    except _GunzipError as err:
        raise TraceError(f"{path}: not a complete gzip file ({err})") from None
    except OSError as err:
        raise TraceError(f"{path}: {err.strerror or err}") from None
    return raw


def _inflate(path: str, raw: bytes) -> bytes:
    """The gzip ``raw`` (one or more members) inflated, never past :func:`inflation_limit`."""
    limit, out, data = inflation_limit(len(raw)), [], raw
    while data:
        inflater = _inflater(_GZIP)
        out.append(inflater.decompress(data, limit + 1 - sum(map(len, out))))
        if sum(map(len, out)) > limit or inflater.unconsumed_tail:
            raise _bomb(path, len(raw))
        if not inflater.eof:
            raise TraceError(f"{path}: not a complete gzip file (it ends inside its compressed stream)")
        data = inflater.unused_data
    return b"".join(out)


def json_blocks(path: str, size: int) -> Iterator[tuple[bytes, int]]:
    """The trace's JSON text in blocks of at most ``size`` bytes, gunzipped where needed (within
    :func:`inflation_limit`), each with how many bytes of the file have been read so far: the whole text is
    never held."""
    if not os.path.isfile(path):
        raise TraceError(missing(path))
    try:
        if os.path.getsize(path) == 0:
            raise TraceError(f"{path}: empty file")
        limit, inflated = inflation_limit(os.path.getsize(path)), 0
        with open(path, "rb") as f:
            data = f.read(size)
            if data[:2] != b"\x1f\x8b":
                while data:
                    yield data, f.tell()
                    data = f.read(size)
                return
            inflater = _inflater(_GZIP)
            read = size // 8  # compressed bytes a read: a trace's JSON inflates about tenfold
            while data:
                block = inflater.decompress(data, size)
                while inflater.unconsumed_tail:  # the rest of this read, a block at a time
                    inflated += len(block)
                    if inflated > limit:
                        raise _bomb(path, os.path.getsize(path))
                    yield block, f.tell()
                    block = inflater.decompress(inflater.unconsumed_tail, size)
                if inflater.eof:  # the end of a gzip member: another may follow
                    data = inflater.unused_data + f.read(read)
                    inflater = _inflater(_GZIP) if data else inflater
                else:
                    data = f.read(read)
                inflated += len(block)
                if inflated > limit:
                    raise _bomb(path, os.path.getsize(path))
                yield block, f.tell()
            if not inflater.eof:
                raise TraceError(f"{path}: not a complete gzip file (it ends inside its compressed stream)")
    except _GunzipError as err:
        raise TraceError(f"{path}: not a complete gzip file ({err})") from None
    except OSError as err:
        raise TraceError(f"{path}: {err.strerror or err}") from None


def natural(path: str) -> list:
    """Sort key that orders numbers by value: ``step=75`` before ``step=101``."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", path)]


def find_traces(path: str) -> list[str]:
    """``path`` itself if it is a file, else the trace files under it (``*.pt.trace.json[.gz]``, or any
    ``*.json[.gz]`` when there are none of those), in natural order (step 75 before step 101)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise TraceError(missing(path))
    found: dict[bool, list[str]] = {True: [], False: []}
    for folder, _, files in os.walk(path):
        for name in files:
            if name.startswith("."):
                continue  # our temporary files
            if name.endswith(TRACE_SUFFIXES):
                found[True].append(os.path.join(folder, name))
            elif name.endswith(JSON_SUFFIXES):
                found[False].append(os.path.join(folder, name))
    traces = sorted(found[True] or found[False], key=natural)
    if not traces:
        raise TraceError(f"{path}: no trace files (*.pt.trace.json[.gz]) in this folder")
    return traces
