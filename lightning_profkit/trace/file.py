"""Find torch.profiler (Kineto) trace files and read their JSON text; every problem is one :class:`TraceError` line.
No msgspec here, so that ``profkit`` starts reading while it imports it."""

from __future__ import annotations

import io
import os
import re
from typing import Any, Iterator, Optional

from isal import isal_zlib  # inflates about twice as fast as zlib

from lightning_profkit.opener import FileRefused, missing, open_regular

_GZIP = 31  # wbits: a gzip header and trailer

# A gzip file's JSON may inflate to this many times the file's size (a kineto trace: about 10-15x) once past
# ALWAYS_INFLATED bytes: beyond, it is a gzip bomb (whitespace or one huge string: 1000x and more), refused before
# its text is held. PROFKIT_MAX_INFLATION raises the ratio.
MAX_INFLATION = 100
ALWAYS_INFLATED = 64 * 10**6

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
JSON_SUFFIXES = (".json", ".json.gz")


class TraceError(FileRefused):
    """A path that is not a readable trace, with a message fit for one line."""


def _ratio() -> int:
    try:
        return max(1, int(os.environ.get("PROFKIT_MAX_INFLATION", MAX_INFLATION)))
    except ValueError:
        return MAX_INFLATION


def inflation_limit(compressed: int) -> int:
    """The most JSON bytes a gzip file of ``compressed`` bytes may inflate to (see :data:`MAX_INFLATION`)."""
    return max(ALWAYS_INFLATED, _ratio() * compressed)


def _bomb(path: str, compressed: int) -> TraceError:
    return TraceError(f"{path}: inflates past {inflation_limit(compressed) / 1e6:.0f} MB of JSON from "
                      f"{compressed / 1e6:.1f} MB of gzip (a profiler trace inflates about 10-15x; the limit is "
                      f"{_ratio()}x, and at least {ALWAYS_INFLATED / 1e6:.0f} MB): refused as a gzip bomb, unread; "
                      "PROFKIT_MAX_INFLATION=<ratio> raises it")


def read_json(path: str, limit: Optional[int] = None) -> bytes:
    """The trace's JSON text, gunzipped where needed (within :func:`inflation_limit`); a text over ``limit`` bytes
    is a :class:`TraceError` before more than that is held."""
    text, _ = whole(json_blocks(path, 10**6), limit)
    if text is None:
        raise TraceError(f"{path}: over {limit / 1e6:.0f} MB of JSON that cannot be read in pieces (no "
                         "boundary between its events where one was expected): not read")
    return text


Blocks = Iterator[tuple[bytes, int]]  # blocks of text, each with the bytes of the file read so far


def whole(blocks: Blocks, limit: Optional[int]) -> tuple[Optional[bytes], Blocks]:
    """The text of ``blocks`` whole, if it is at most ``limit`` bytes (and the blocks as one); else None and the
    blocks, those already read first."""
    text, done = io.BytesIO(), 0  # its value is its buffer, not a copy: a list of blocks joined held the text twice
    for block, done in blocks:
        if limit is not None and text.tell() + len(block) > limit:
            return None, _then([(text.getvalue(), done), (block, done)], blocks)
        text.write(block)
    return text.getvalue(), iter([(text.getvalue(), done)])


def _then(read: list[tuple[bytes, int]], blocks: Blocks) -> Blocks:
    """The blocks ``read``, each let go of once taken, then ``blocks``."""
    read.reverse()
    while read:
        yield read.pop()
    yield from blocks


_FEED = 2**16  # compressed bytes given to the inflater at a time: what each gzip member's end copies, at most


def json_blocks(path: str, size: int) -> Blocks:
    """The trace's JSON text in blocks of at most ``size`` bytes, gunzipped where needed (within
    :func:`inflation_limit`), each with how many bytes of the file have been read so far: the whole text is
    never held, and the work is linear in the file whatever its gzip members."""
    try:
        with open_regular(path) as f:
            compressed = os.fstat(f.fileno()).st_size
            if compressed == 0:
                raise TraceError(f"{path}: empty file")
            data = f.read(size)
            if data[:2] != b"\x1f\x8b":
                while data:
                    yield data, f.tell()
                    data = f.read(size)
                return
            limit, inflated, inflater, started = inflation_limit(compressed), 0, isal_zlib.decompressobj(_GZIP), False
            while data:
                view = memoryview(data)
                for at in range(0, len(data), _FEED):
                    feed: Any = view[at:at + _FEED]
                    while feed:
                        block = inflater.decompress(feed, size)
                        started = True
                        inflated += len(block)
                        if inflated > limit:
                            raise _bomb(path, compressed)
                        if block:
                            yield block, f.tell()
                        if inflater.eof:  # the end of a gzip member: another may follow
                            feed, inflater, started = inflater.unused_data, isal_zlib.decompressobj(_GZIP), False
                        else:
                            feed = inflater.unconsumed_tail
                view.release()
                data = f.read(max(size // 8, _FEED))  # a trace's JSON inflates about tenfold
            if started and not inflater.eof:
                raise TraceError(f"{path}: not a complete gzip file (it ends inside its compressed stream)")
    except isal_zlib.error as err:
        raise TraceError(f"{path}: not a complete gzip file ({err})") from None
    except TraceError:
        raise
    except FileRefused as err:
        raise TraceError(str(err)) from None
    except OSError as err:
        raise TraceError(f"{path}: {err.strerror or err}") from None


def natural(path: str) -> list:
    """Sort key that orders numbers by value: ``batch=75`` before ``batch=101``."""
    return [(0, int(t), "") if i % 2 else (1, 0, t) for i, t in enumerate(re.split(r"([0-9]{1,18})", path))]


DEEPEST = 32  # folders below the one given that are looked in (a run's traces are 1-3 deep: profiler/run=…/epoch=…)


def find_traces(path: str) -> list[str]:
    """``path`` itself if it is a file, else the trace files under it (``*.pt.trace.json[.gz]``, or any
    ``*.json[.gz]`` when there are none of those), in natural order (step 75 before step 101)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise TraceError(missing(path))
    # a loop, not a recursion (a tree a thousand folders deep ended the command), never into a linked folder
    found, todo = [], [(path, 0)]
    while todo:
        folder, depth = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # gone, or not ours to read
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if depth < DEEPEST:
                    todo.append((entry.path, depth + 1))
            elif entry.name.endswith(JSON_SUFFIXES) and not entry.name.startswith("."):  # not our temporary files
                found.append(entry.path)
    traces = sorted([p for p in found if p.endswith(TRACE_SUFFIXES)] or found, key=natural)
    if not traces:
        raise TraceError(f"{path}: no trace files (*.pt.trace.json[.gz]) in this folder")
    return traces
