"""A trace file as rows, its large JSON decoded in pieces on several CPU cores.

Decoding JSON and building rows is most of the time ``profkit summary`` takes, and it is Python work that
one process cannot spread over cores. A large trace's ``traceEvents`` list is therefore cut at boundaries
between events into pieces of at least ``min_piece`` bytes. Forked workers and this process take pieces
from a queue (a pipe of piece numbers) until none is left, and the rows are put back in file order, so
the figures are those of a single pass. Nothing here imports numpy: :func:`start_loading` forks the
workers and returns, and the caller imports numpy while they decode (numpy's import is a fifth of a
summary of a 2 MB trace); this process joins in when it asks for the :meth:`Loading.result`. Where a cut
cannot be made safely (no boundary found, a piece that is not a list of events, a worker that fails) the
file is read in one pass, which also gives the one-line error of a bad file.

Workers are forked, so this runs in parallel only on Linux and only from a single-threaded process
(forking a process with threads can deadlock the child); elsewhere it reads in one pass.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import re
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

from lightning_profkit.trace.events import decode_json, decode_strict
from lightning_profkit.trace.file import read_json
from lightning_profkit.trace.rows import Rows, rows

MIN_PIECE = 2 * 2**20  # bytes of JSON per piece: small, so that this process, starting late, still takes its share
MIN_PIECES = 2  # a trace of fewer is read in one pass
MAX_PIECES = 255  # piece numbers are single bytes in the queue
# Between two objects. A match inside a string or a nested list makes a piece that does not decode, and
# the file is then read in one pass.
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_SEARCH = 2**20  # how far past a cut's target to look for a boundary
_OPEN = b'{"traceEvents":['


@dataclass
class LoadedTrace:
    parts: list[Rows]  # in file order
    distributed_info: Optional[dict[str, Any]]
    meta: Optional[dict[str, Any]]  # our labels under the "profkit" key
    pieces: int = 1  # how many pieces the JSON was decoded in


class _PieceError(Exception):
    """A piece that did not decode as events: read the file in one pass instead."""


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a trace is hundreds of thousands of records without cycles, and
    each collection the allocations trigger would walk all of them (about a tenth of the time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def start_loading(path: str, jobs: int = 1, min_piece: int = MIN_PIECE, raw: Optional[bytes] = None) -> Loading:
    """Start loading the rows and labels of the trace at ``path`` (whose JSON text is ``raw`` where given),
    with up to ``jobs`` processes and pieces of at least ``min_piece`` bytes of JSON; its workers start now,
    and ``.result()`` waits for the :class:`LoadedTrace`."""
    raw = read_json(path) if raw is None else raw
    workers = _workers(jobs)
    return Loading(path, raw, cut_points(raw, _pieces(len(raw), min_piece)) if workers else [], workers)


def _pieces(size: int, min_piece: int) -> int:
    pieces = min(MAX_PIECES, size // max(min_piece, 1))
    return pieces if pieces >= MIN_PIECES else 1


def _workers(jobs: int) -> int:
    """Forked workers beside this process."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return 0
    return max(0, jobs - 1)


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


_Piece = tuple[Rows, Optional[dict[str, Any]], Optional[dict[str, Any]]]


def _piece(raw: bytes, cuts: Sequence[tuple[int, int]], k: int, keep: list) -> _Piece:
    """Piece ``k`` as a document of its own (the head keeps the keys before the events, the tail those
    after): its rows and labels. The decoded document goes to ``keep``, which a worker leaves unfreed
    when it exits (freeing a decoded trace takes a tenth of the time decoding does)."""
    start = 0 if k == 0 else cuts[k - 1][1]
    end = len(raw) if k == len(cuts) else cuts[k][0]
    # One copy of the piece, framed (slicing and then adding would copy it twice: each copy of 16 MB costs
    # about 10 ms, most of it the kernel handing out fresh pages).
    text = b"".join((b"" if k == 0 else _OPEN, memoryview(raw)[start:end], b"" if k == len(cuts) else b"]}"))
    try:  # a cut outside the list of events, or an event that needs the tolerant path: one pass instead
        doc = decode_strict(text)
    except ValueError as err:
        raise _PieceError(str(err)) from None
    keep.append(doc)
    return rows(doc.traceEvents), doc.distributedInfo, doc.profkit


class Loading:
    """A trace being decoded, by forked workers where it is cut in pieces."""

    def __init__(self, path: str, raw: bytes, cuts: list[tuple[int, int]], workers: int) -> None:
        self.path, self.raw, self.cuts = path, raw, cuts
        self.children: list[tuple[int, int]] = []  # (pid, read end of its results)
        self.queue = -1
        if not cuts:
            return
        read_end, write_end = os.pipe()
        os.write(write_end, bytes(range(len(cuts) + 1)))  # every piece number; the pipe holds 64 kB
        os.close(write_end)  # so that the queue ends once read
        self.queue = read_end
        for _ in range(min(workers, len(cuts))):
            results, to_parent = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no more processes: this one and those started do all the pieces
                os.close(results)
                os.close(to_parent)
                break
            if pid == 0:  # the child: never returns
                self._child(results, to_parent)
            os.close(to_parent)
            self.children.append((pid, results))

    def _take(self) -> Iterator[int]:
        while True:
            got = os.read(self.queue, 1)
            if not got:
                return
            yield got[0]

    def _child(self, results: int, to_parent: int) -> None:
        try:
            os.close(results)
            gc.disable()  # it exits without freeing anything
            keep: list = []
            try:
                payload = pickle.dumps((True, [(k, _piece(self.raw, self.cuts, k, keep)) for k in self._take()]),
                                       protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException as err:  # noqa: BLE001 - reported to the parent, which reads in one pass
                payload = pickle.dumps((False, f"{type(err).__name__}: {err}"))
            with os.fdopen(to_parent, "wb") as f:
                f.write(payload)
        finally:
            os._exit(0)  # no interpreter teardown: nothing to free, no atexit of the parent's

    def result(self) -> LoadedTrace:
        """The trace's rows and labels, in one pass where the pieces failed."""
        raw, self.raw = self.raw, b""  # the text is not needed beside its events
        with _gc_paused():
            if self.cuts:
                try:
                    return self._gather(raw)
                except _PieceError:
                    pass
            doc = decode_json(self.path, raw)
            del raw
            return LoadedTrace([rows(doc.traceEvents)], doc.distributedInfo, doc.profkit)

    def _gather(self, raw: bytes) -> LoadedTrace:
        keep: list = []
        try:
            got = [(k, _piece(raw, self.cuts, k, keep)) for k in self._take()]
            while self.children:
                pid, results = self.children[0]
                try:
                    with os.fdopen(results, "rb") as f:
                        data = f.read()
                finally:
                    self.children.pop(0)
                    os.waitpid(pid, 0)
                ok, value = pickle.loads(data) if data else (False, "a worker ended without a result")
                if not ok:
                    raise _PieceError(value)
                got.extend(value)
        finally:
            os.close(self.queue)
            for pid, results in self.children:  # after a failure: stop the others
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(results)
            self.children = []
        pieces = [p for _, p in sorted(got, key=lambda kp: kp[0])]
        info = next((i for _, i, _ in pieces if i is not None), None)
        meta = next((m for _, _, m in pieces if m is not None), None)
        return LoadedTrace([r for r, _, _ in pieces], info, meta, len(pieces))
