"""A trace file as columns, its large JSON decoded in pieces on several CPU cores.

Decoding JSON and building columns is most of the time ``profkit summary`` takes, and it is Python work
that one process cannot spread over cores. A large trace's ``traceEvents`` list is therefore cut at
boundaries between events, each piece is decoded by a forked worker, and the columns are joined in file
order (:func:`trace_columns.concat`), so the figures are those of a single pass. Where a cut cannot be
made safely (no boundary found, a piece that is not a list of events, a worker that fails) the file is
read in one pass, which also gives the one-line error of a bad file.

Workers are forked, so this runs in parallel only on Linux and only from a single-threaded process
(forking a process with threads can deadlock the child); elsewhere it reads in one pass.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from lightning_profkit.trace_columns import Columns, columns, concat
from lightning_profkit.trace_events import TraceDoc, decode_strict
from lightning_profkit.trace_file import decode_json, read_json

MIN_PIECE = 8 * 2**20  # bytes of JSON per worker: below this, a fork costs more than it saves
# Between two objects. A match inside a string or a nested list makes a piece that does not decode, and
# the file is then read in one pass.
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_SEARCH = 2**20  # how far past a cut's target to look for a boundary
_OPEN = b'{"traceEvents":['


@dataclass
class LoadedTrace:
    columns: Columns
    distributed_info: Optional[dict[str, Any]]
    meta: Optional[dict[str, Any]]  # our labels under the "profkit" key
    pieces: int = 1  # how many pieces the JSON was decoded in


class _PieceError(Exception):
    """A piece that did not decode as events: read the file in one pass instead."""


def load_trace(path: str, jobs: int = 1, min_piece: int = MIN_PIECE, raw: Optional[bytes] = None) -> LoadedTrace:
    """Columns and labels of the trace at ``path`` (whose JSON text is ``raw`` where given), using up to
    ``jobs`` processes, each for at least ``min_piece`` bytes of JSON."""
    raw = read_json(path) if raw is None else raw
    cuts = cut_points(raw, _pieces(len(raw), jobs, min_piece))
    if cuts:
        try:
            return _load_pieces(raw, cuts)
        except _PieceError:
            pass
    doc = decode_json(path, raw)
    del raw  # the text is not needed beside its events
    return LoadedTrace(columns(doc.traceEvents), doc.distributedInfo, doc.profkit)


def _pieces(size: int, jobs: int, min_piece: int) -> int:
    if sys.platform != "linux" or threading.active_count() > 1:
        return 1
    return max(1, min(jobs, size // max(min_piece, 1)))


def cut_points(raw: bytes, pieces: int) -> list[tuple[int, int]]:
    """``pieces - 1`` cuts in the ``traceEvents`` list, each ``(end of an event, start of the next)``;
    empty where the text gives no safe cut."""
    start = raw.find(b'"traceEvents"')
    start = raw.find(b"[", start) + 1 if start >= 0 else 0
    if pieces < 2 or start == 0:
        return []
    cuts = []
    for k in range(1, pieces):
        target = max(start + (len(raw) - start) * k // pieces, cuts[-1][1] if cuts else start)
        found = _BOUNDARY.search(raw, target, target + _SEARCH)
        if found is None:
            return []
        cuts.append((found.start() + 1, found.end() - 1))
    return cuts


def _piece(raw: bytes, cuts: Sequence[tuple[int, int]], k: int) -> tuple[LoadedTrace, TraceDoc]:
    """Piece ``k`` as a document of its own (the head keeps the keys before the events, the tail those
    after), its columns, and the decoded document, which a worker leaves unfreed when it exits."""
    start = 0 if k == 0 else cuts[k - 1][1]
    end = len(raw) if k == len(cuts) else cuts[k][0]
    # One copy of the piece, framed (slicing and then adding would copy it twice: each copy of 16 MB costs
    # about 10 ms, most of it the kernel handing out fresh pages).
    text = b"".join((b"" if k == 0 else _OPEN, memoryview(raw)[start:end], b"" if k == len(cuts) else b"]}"))
    try:  # a cut outside the list of events, or an event that needs the tolerant path: one pass instead
        doc = decode_strict(text)
    except ValueError as err:
        raise _PieceError(str(err)) from None
    return LoadedTrace(columns(doc.traceEvents), doc.distributedInfo, doc.profkit), doc


def _load_pieces(raw: bytes, cuts: Sequence[tuple[int, int]]) -> LoadedTrace:
    parts = in_workers(lambda k: _piece(raw, cuts, k), range(len(cuts) + 1))
    info = next((p.distributed_info for p in parts if p.distributed_info is not None), None)
    meta = next((p.meta for p in parts if p.meta is not None), None)
    return LoadedTrace(concat([p.columns for p in parts]), info, meta, len(parts))


def in_workers(fn: Callable[[int], tuple[Any, Any]], items: Sequence[int]) -> list:
    """``[fn(i)[0] for i in items]``: the first here, the others in forked children that send it back
    pickled through a pipe and exit without freeing ``fn(i)[1]`` (freeing a decoded trace takes a tenth of
    the time decoding does). Any failure raises :class:`_PieceError` once every child is gone."""
    children = []
    try:
        for item in items[1:]:
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                _child(fn, item, read_end, write_end)
            os.close(write_end)
            children.append((pid, read_end))
        results = [fn(items[0])[0]]
        while children:
            pid, read_end = children.pop(0)
            try:
                with os.fdopen(read_end, "rb") as f:
                    data = f.read()
            finally:
                os.waitpid(pid, 0)
            ok, value = pickle.loads(data) if data else (False, "a worker ended without a result")
            if not ok:
                raise _PieceError(value)
            results.append(value)
        return results
    finally:
        for pid, read_end in children:  # after a failure: stop the others
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)


def _child(fn: Callable[[int], tuple[Any, Any]], item: int, read_end: int, write_end: int) -> None:
    try:
        os.close(read_end)
        try:
            result, _unfreed = fn(item)
            payload = pickle.dumps((True, result), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as err:  # noqa: BLE001 - reported to the parent, which reads in one pass
            payload = pickle.dumps((False, f"{type(err).__name__}: {err}"))
        with os.fdopen(write_end, "wb") as f:
            f.write(payload)
    finally:
        os._exit(0)  # no interpreter teardown: nothing to free, no atexit of the parent's
