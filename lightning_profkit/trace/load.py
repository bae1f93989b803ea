"""A trace file as rows, read as a stream: its JSON inflated a block at a time and cut between events into
pieces, which forked workers decode into rows while this process inflates the next ones.

The whole text is never held, nor all its events as Python objects: this process keeps the rows (about 50
bytes an event against about 280 of JSON) and a few pieces of text in flight, so a trace of any size is read
in a fraction of its size. A piece is a document of its own (the first keeps the keys before the events,
the last those after), so each decodes with the same strict decoder as a whole file, and the rows are
appended in file order: the figures are those of a single pass. Pieces of a few MB also keep decoding in
the CPU's caches, which makes it faster per byte than decoding a large text at once.

Workers are forked at the first cut, before numpy is imported (the caller imports it for the figures), and
only on Linux from a single-threaded process (forking beside threads can deadlock the child); elsewhere the
pieces are decoded here. Pieces reach the workers through shared memory and their rows come back pickled.
Where a cut cannot be made safely (no boundary found, a piece that is not a list of events, a worker that
fails) the file is read in one pass, which also gives the one-line error of a bad file.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import pickle
import re
import select
import signal
import struct
import sys
import threading
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from lightning_profkit.trace.events import decode, decode_json
from lightning_profkit.trace.file import json_blocks, read_json
from lightning_profkit.trace.rows import CODED, COLUMNS, Rows, rows

PIECE = 4 * 2**20  # bytes of JSON a piece: small enough to decode in the caches, large enough to send cheaply
_SLOTS = 2  # pieces in shared memory per worker: one it decodes, one waiting
# A file up to this size (gzip: about 40-80 MB of JSON) is read at once and its pieces are handed to the
# workers as places in the text they inherit: they are all handed out at once, and this process imports
# numpy while the workers decode.
WHOLE_FILE = 4 * 2**20
# Text without a boundary between events (or without the list) this long: the file is read in one pass, if its
# whole text is at most ONE_PASS bytes, else left out. Both bound what a file that cannot be cut costs.
_NO_BOUNDARY = 64 * 2**20
ONE_PASS = 64 * 2**20
_OVERLAP = 256  # bytes searched again when a block arrives: the most a match may reach back
# Between two objects, the second starting with a key: never inside a string (where every quote follows a
# backslash). A match inside a nested list of objects makes a piece that does not decode, and the file is then
# read in one pass.
_BOUNDARY = re.compile(rb'\}\s*,\s*\{(?=\s*")')
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_OPEN, _CLOSE = b'{"traceEvents":[', b"]}"
_TASK = struct.Struct("=iiqq")  # piece number, slot (-1: the inherited text), start, end: written at once
_LENGTH = struct.Struct("=q")
_QUEUED = 2**16 // _TASK.size // 2  # tasks in the pipe at most: half of what a pipe holds on Linux

Progress = Callable[[int, int], None]  # (bytes of the file read, its size)


@dataclass
class LoadedTrace:
    rows: Rows
    distributed_info: Optional[dict[str, Any]]
    meta: Optional[dict[str, Any]]  # our labels under the "profkit" key
    pieces: int = 1  # how many pieces the JSON was decoded in


class PieceError(Exception):
    """A piece that did not decode as events: read the file in one pass instead."""


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a trace is hundreds of thousands of records without cycles, and
    each collection the allocations trigger would walk all of them (about a tenth of the time). Only in a
    process's main thread: the collector is the process's, and a helper thread (the training process's writer)
    must not pause the user's."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load(path: str, jobs: int = 1, piece: int = PIECE, progress: Optional[Progress] = None,
         text: Optional[bytes] = None) -> LoadedTrace:
    """The rows and labels of the trace at ``path`` (whose JSON text is ``text`` where given), read in pieces
    of about ``piece`` bytes with up to ``jobs`` worker processes; ``progress`` is told of each block read."""
    size = len(text) if text is not None else os.path.getsize(path) if os.path.exists(path) else 0
    if text is None and 0 < size <= WHOLE_FILE:  # small: read at once, and the workers inherit the text
        text = read_json(path)
    blocks = json_blocks(path, piece) if text is None else iter([(text, size)])
    with _gc_paused():
        stream = _Stream(path, piece, _workers(jobs), text)
        try:
            return stream.read(blocks, (lambda done: progress(min(done, size), size)) if progress else None)
        except PieceError:
            pass
        finally:
            stream.close()
        doc = decode_json(path, read_json(path, ONE_PASS) if text is None else text)
        return LoadedTrace(rows(doc.traceEvents), doc.distributedInfo, doc.profkit)


def _workers(jobs: int) -> int:
    """Worker processes to fork: none where forking is unsafe."""
    if sys.platform != "linux" or threading.active_count() > 1 or jobs < 2:
        return 0
    return jobs


def pieces(blocks: Iterable[bytes], piece: int) -> Iterator[tuple[Any, int, int, bool, bool]]:
    """The text of ``blocks`` cut between events of the ``traceEvents`` list into pieces of about ``piece``
    bytes: each ``(text, start, end, first, last)``, the piece being ``text[start:end]``. A text with no cut is one piece, first and last; a text given as one block is ``text`` in every
    piece. Each byte is searched once: linear in the text, whatever it holds."""
    buf: Any = b""
    start = 0  # where the next piece starts in buf
    events: Optional[int] = None  # where the list's first event starts in buf, once found
    searched = 0  # buf[:searched] was searched (for the list, then for a cut) and held none past where it looked
    first = True
    for block in blocks:
        if start == len(buf):
            buf, searched = block, 0
        else:  # the rest joins the block: appended in place, the pieces before dropped (both linear)
            buf = buf if isinstance(buf, bytearray) else bytearray(buf)
            del buf[:start]
            buf += block
            searched, events = max(searched - start, 0), None if events is None else max(events - start, 0)
        start = 0
        if events is None:
            found = EVENTS_KEY.search(buf, max(searched - _OVERLAP, 0))
            searched = len(buf)
            if found is None:
                if len(buf) > _NO_BOUNDARY:
                    raise PieceError(f"no traceEvents list in its first {_NO_BOUNDARY // 2**20} MB")
                continue
            events = searched = found.end()
        while len(buf) - start > piece:
            cut = _BOUNDARY.search(buf, max(start + piece, events, searched - _OVERLAP))
            if cut is None:
                searched = len(buf)
                if len(buf) - start > _NO_BOUNDARY:
                    raise PieceError("no boundary between events")
                break
            yield (*_held(buf, start, cut.start() + 1), first, False)
            first, start, events = False, cut.end() - 1, 0
    yield (*_held(buf, start, len(buf)), first, True)


def _held(buf: Any, start: int, end: int) -> tuple[bytes, int, int]:
    """The piece ``buf[start:end]`` as ``(text, start, end)``: a given block as it is, a piece of the buffer
    :func:`pieces` goes on changing as a copy of its own."""
    if isinstance(buf, bytes):
        return buf, start, end
    text = bytes(memoryview(buf)[start:end])
    return text, 0, len(text)


def _framed(first: bool, last: bool) -> tuple[bytes, bytes]:
    """What goes before and after a piece to make it a document: the first has the file's opening, the
    last its end."""
    return b"" if first else _OPEN, b"" if last else _CLOSE


def framed_piece(text: bytes, start: int, end: int, first: bool, last: bool) -> bytes:
    head, tail = _framed(first, last)
    # one copy (slicing and then adding would copy it twice)
    return b"".join((head, memoryview(text)[start:end], tail))


_Result = tuple[Rows, Optional[dict[str, Any]], Optional[dict[str, Any]]]


def decode_piece(text: Any) -> _Result:
    try:  # a cut outside the list of events: one pass instead
        doc = decode(text)
    except ValueError as err:
        raise PieceError(str(err)) from None
    return rows(doc.traceEvents), doc.distributedInfo, doc.profkit


class Appender:
    """Rows of consecutive pieces appended into one :class:`Rows`, their codes turned into codes of tables
    that hold every piece's values (first seen first)."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Any, int]] = {column: {} for column in CODED}
        self.columns: dict[str, array] = {}
        self.fractional = False

    def add(self, r: Rows) -> None:
        import numpy as np  # here, after the workers are forked

        for column in COLUMNS:
            values: array = getattr(r, column)
            into = self.columns.setdefault(column, array(values.typecode))
            if column not in CODED:
                into.extend(values)
                continue
            table = self.tables[column]
            codes = [table.setdefault(v, len(table)) for v in getattr(r, CODED[column])]
            if codes == list(range(len(codes))):  # this piece's table starts the one of all pieces
                into.extend(values)
            else:
                into.frombytes(np.asarray(codes, dtype=values.typecode)[np.frombuffer(values, dtype=values.typecode)].tobytes())
        self.fractional |= r.fractional

    def rows(self) -> Rows:
        tables = {table: list(self.tables[column]) for column, table in CODED.items()}
        return Rows(**tables, **self.columns, fractional=self.fractional)


class _Stream:
    """One read: pieces handed to workers (or decoded here), their rows appended in order."""

    def __init__(self, path: str, piece: int, workers: int, whole: Optional[bytes] = None) -> None:
        self.path, self.piece, self.workers = path, piece, workers
        self.whole = whole  # the file's whole text, where it was read at once
        self.inherited: Optional[bytes] = None  # that text, once the workers have it
        # a piece ends at the first boundary past ``piece`` bytes; a larger one than a slot is decoded here
        self.slot = 2 * piece + len(_OPEN) + len(_CLOSE)
        self.children: dict[int, int] = {}  # results pipe -> pid
        self.tasks = -1
        self.slots: Optional[mmap.mmap] = None
        self.free: list[int] = []
        self.in_flight: dict[int, int] = {}  # piece -> slot
        self.done: dict[int, _Result] = {}
        self.appender = Appender()
        self.appended = 0
        self.info: Optional[dict[str, Any]] = None
        self.meta: Optional[dict[str, Any]] = None

    def read(self, blocks: Iterable[tuple[bytes, int]], progress: Optional[Callable[[int], None]]) -> LoadedTrace:
        def text() -> Iterator[bytes]:
            for block, done in blocks:
                if progress:
                    progress(done)
                yield block

        k = -1
        for k, (buf, start, end, first, last) in enumerate(pieces(text(), self.piece)):
            if first and last:  # no cut: the whole text, by the path that gives a bad file's error
                doc = decode_json(self.path, buf[start:end])
                return LoadedTrace(rows(doc.traceEvents), doc.distributedInfo, doc.profkit)
            if first:
                self._fork(buf)
            if self.children and (buf is self.inherited or end - start + len(_OPEN) + len(_CLOSE) <= self.slot):
                self._send(k, buf, start, end, first, last)
            else:
                self.done[k] = decode_piece(framed_piece(buf, start, end, first, last))
            self._append()
        if self.inherited is not None:
            import numpy  # noqa: F401  # every piece is handed out: while the workers decode
        while self.in_flight:
            self._receive()
            self._append()
        return LoadedTrace(self.appender.rows(), self.info, self.meta, k + 1)

    def _fork(self, text: bytes) -> None:
        """Fork the workers, who inherit ``text`` (pieces in it need no copy if it is the whole file)."""
        if not self.workers:
            return
        self.inherited = text if text is self.whole else None
        self.slots = mmap.mmap(-1, self.slot * _SLOTS * self.workers)  # shared with the children
        self.free = list(range(_SLOTS * self.workers))
        tasks, self.tasks = os.pipe()
        for _ in range(self.workers):
            results, to_parent = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no more processes: those started (or this one) do the pieces
                os.close(results)
                os.close(to_parent)
                break
            if pid == 0:  # the child: never returns
                os.close(self.tasks)
                os.close(results)
                self._work(tasks, to_parent)
            os.close(to_parent)
            self.children[results] = pid
        os.close(tasks)

    def _work(self, tasks: int, to_parent: int) -> None:
        try:
            for results in self.children:
                os.close(results)
            assert self.slots is not None
            slots = memoryview(self.slots)
            while True:
                message = os.read(tasks, _TASK.size)
                if len(message) < _TASK.size:
                    break
                k, slot, start, end = _TASK.unpack(message)
                try:
                    if slot < 0:
                        assert self.inherited is not None
                        text: Any = framed_piece(self.inherited, start, end, start == 0, end == len(self.inherited))
                    else:
                        text = slots[slot * self.slot + start:slot * self.slot + end]
                    value: Any = (True, decode_piece(text))
                except BaseException as err:  # noqa: BLE001 - reported to the parent, which reads in one pass
                    value = (False, f"{type(err).__name__}: {err}")
                payload = pickle.dumps((k, value), protocol=pickle.HIGHEST_PROTOCOL)
                _write_all(to_parent, _LENGTH.pack(len(payload)) + payload)
                if not value[0]:
                    break
        finally:
            os._exit(0)  # no interpreter teardown: nothing to free, no atexit of the parent's

    def _send(self, k: int, text: bytes, start: int, end: int, first: bool, last: bool) -> None:
        if text is self.inherited:
            while len(self.in_flight) >= _QUEUED:  # the pipe would be full: a write would wait for the workers,
                self._receive()  # who wait for this process to read their results
            self.in_flight[k] = -1
            os.write(self.tasks, _TASK.pack(k, -1, start, end))
            return
        while not self.free:
            self._receive()
        slot = self.free.pop()
        assert self.slots is not None
        at = slot * self.slot
        head, tail = _framed(first, last)
        for part in (head, memoryview(text)[start:end], tail):
            self.slots[at:at + len(part)] = part
            at += len(part)
        self.in_flight[k] = slot
        os.write(self.tasks, _TASK.pack(k, slot, 0, at - slot * self.slot))

    def _receive(self) -> None:
        """Wait for one worker's result."""
        ready, _, _ = select.select(list(self.children), [], [])
        results = ready[0]
        header = _read_all(results, _LENGTH.size)
        if len(header) < _LENGTH.size:
            raise PieceError("a worker ended without a result")
        k, (ok, value) = pickle.loads(_read_all(results, _LENGTH.unpack(header)[0]))
        if not ok:
            raise PieceError(value)
        slot = self.in_flight.pop(k)
        if slot >= 0:
            self.free.append(slot)
        self.done[k] = value

    def _append(self) -> None:
        while self.appended in self.done:
            r, info, meta = self.done.pop(self.appended)
            self.appender.add(r)
            self.info = self.info if self.info is not None else info
            self.meta = self.meta if self.meta is not None else meta
            self.appended += 1

    def close(self) -> None:
        """End the workers (after a failure, at once) and wait for them."""
        if self.tasks >= 0:
            os.close(self.tasks)
            self.tasks = -1
        for results, pid in self.children.items():
            if self.in_flight:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(results)
        self.children = {}
        if self.slots is not None:
            self.slots.close()
            self.slots = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        got = os.read(fd, min(left, 2**20))
        if not got:
            break
        parts.append(got)
        left -= len(got)
    return b"".join(parts)
