"""Find torch.profiler (Kineto) Chrome-trace files and read their JSON text; every problem is one
:class:`TraceError` line. Decoding is :mod:`trace_events`' (this module starts without msgspec, so that
``profkit`` starts reading while it imports it)."""

from __future__ import annotations

import os
import re

from typing import Iterator

try:  # ISA-L inflates about twice as fast as zlib
    from isal.isal_zlib import decompress as _gunzip
    from isal.isal_zlib import decompressobj as _inflater
    from isal.isal_zlib import error as _GunzipError
except ImportError:  # installed without its dependencies
    from zlib import decompress as _gunzip
    from zlib import decompressobj as _inflater
    from zlib import error as _GunzipError

_GZIP = 31  # wbits: a gzip header and trailer

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
JSON_SUFFIXES = (".json", ".json.gz")


class TraceError(ValueError):
    """A path that is not a readable trace, with a message fit for one line."""


def read_json(path: str) -> bytes:
    """The trace's JSON text, gunzipped where needed."""
    if not os.path.exists(path):
        raise TraceError(f"{path}: no such file or folder")
    try:
        if os.path.getsize(path) == 0:
            raise TraceError(f"{path}: empty file")
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = _gunzip(raw, _GZIP)
    except _GunzipError as err:
        raise TraceError(f"{path}: not a complete gzip file ({err})") from None
    except OSError as err:
        raise TraceError(f"{path}: {err.strerror or err}") from None
    return raw


def json_blocks(path: str, size: int) -> Iterator[tuple[bytes, int]]:
    """The trace's JSON text in blocks of at most ``size`` bytes, gunzipped where needed, each with how many
    bytes of the file have been read so far: the whole text is never held."""
    if not os.path.exists(path):
        raise TraceError(f"{path}: no such file or folder")
    try:
        if os.path.getsize(path) == 0:
            raise TraceError(f"{path}: empty file")
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
                    yield block, f.tell()
                    block = inflater.decompress(inflater.unconsumed_tail, size)
                if inflater.eof:  # the end of a gzip member: another may follow
                    data = inflater.unused_data + f.read(read)
                    inflater = _inflater(_GZIP) if data else inflater
                else:
                    data = f.read(read)
                yield block, f.tell()
            if not inflater.eof:
                raise TraceError(f"{path}: not a complete gzip file (it ends inside its compressed stream)")
    except _GunzipError as err:
        raise TraceError(f"{path}: not a complete gzip file ({err})") from None
    except OSError as err:
        raise TraceError(f"{path}: {err.strerror or err}") from None


def _natural(path: str) -> list:
    """Sort key that orders numbers by value: ``step=75`` before ``step=101``."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", path)]


def find_traces(path: str) -> list[str]:
    """``path`` itself if it is a file, else the trace files under it (``*.pt.trace.json[.gz]``, or any
    ``*.json[.gz]`` when there are none of those), in natural order (step 75 before step 101)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        there = os.path.exists(path) or os.path.islink(path)
        raise TraceError(f"{path}: " + ("not a file or folder (a pipe, a device or a broken link)" if there
                                        else "no such file or folder"))
    found: dict[bool, list[str]] = {True: [], False: []}
    for folder, _, files in os.walk(path):
        for name in files:
            if name.startswith("."):
                continue  # our temporary files
            if name.endswith(TRACE_SUFFIXES):
                found[True].append(os.path.join(folder, name))
            elif name.endswith(JSON_SUFFIXES):
                found[False].append(os.path.join(folder, name))
    traces = sorted(found[True] or found[False], key=_natural)
    if not traces:
        raise TraceError(f"{path}: no trace files (*.pt.trace.json[.gz]) in this folder")
    return traces
