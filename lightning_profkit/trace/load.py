"""A trace file read as a stream into columns: its JSON cut between events into pieces, which worker processes decode
while this process inflates the next ones (docs/performance.md, Large traces). Design notes: docs/how-it-works.md."""

from __future__ import annotations

import collections
import contextlib
import gc
import multiprocessing
import os
import re
import sys
import threading
from array import array
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np

from lightning_profkit.trace.events import LOOSE_BYTES, TooLoose, TraceDoc, decode
from lightning_profkit.trace.file import TraceError, json_blocks, read_json, whole
from lightning_profkit.trace.columns import CODED, COLUMNS, Columns, columns, wrap

PIECE = 4 * 10**6  # bytes of JSON a piece: small enough to decode in the caches, large enough to send cheaply
WHOLE_FILE = 4 * 10**6  # a file up to this size is read at once, then cut
WHOLE_FILE_JSON = 64 * 10**6  # unless its JSON is larger (a gzip file inflates about tenfold): then as a stream
# A text whose pieces do not decode is read in one pass where it is at most this long, else left out, as is one
# without a boundary between events (or without the list) in this many bytes: what a file that cannot be cut costs.
ONE_PASS = 16 * 10**6
_OVERLAP = 256  # bytes searched again when a block arrives: the most a match may reach back
# Between two objects, the second starting with a key: never inside a string (where every quote follows a
# backslash). A match inside a nested list of objects makes a piece that does not decode, and the file is then
# read in one pass.
_BOUNDARY = re.compile(rb'\}\s*,\s*\{(?=\s*")')
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_OPEN, _CLOSE = b'{"traceEvents":[', b"]}"
IN_FLIGHT = 1  # pieces handed to each worker beyond the one being appended: the pool queues one more itself
# The events a file may hold, by its size: real traces hold at most 0.075 events a byte of gzip and 0.005 a byte of
# JSON (tests/data/traces), an event of a few bytes costs its ~50-byte row all the same: a file of more is a flood,
# refused once past these (at least FEWEST_EVENTS), so that a trace's memory and time follow its file's size.
EVENTS_PER_FILE_BYTE = 0.5
EVENTS_PER_JSON_BYTE = 0.025
FEWEST_EVENTS = 250_000

Progress = Callable[[int, int], None]  # (bytes of the file read, its size)


@dataclass
class LoadedTrace:
    rows: Columns
    distributed_info: Optional[dict[str, Any]]
    meta: Optional[dict[str, Any]]  # our labels under the "profkit" key
    pieces: int = 1  # how many pieces the JSON was decoded in


class PieceError(ValueError):
    """A piece that did not decode as events: read the file in one pass instead."""


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector, whose collections would walk a trace's records and rows, none of them in a
    cycle (a tenth of the reading time; 10x the summary's with an operator of each name). Only in the main thread: a
    helper thread (the training process's writer) must not pause the user's."""
    pause = threading.current_thread() is threading.main_thread() and gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause:
            gc.enable()


def load(path: str, jobs: int = 1, piece: int = PIECE, progress: Optional[Progress] = None) -> LoadedTrace:
    """The rows and labels of the trace at ``path``, read in pieces of about ``piece`` bytes with up to ``jobs``
    worker processes; ``progress`` is told of each block read."""
    size = os.path.getsize(path) if os.path.exists(path) else 0
    blocks, text = json_blocks(path, piece), None
    if 0 < size <= WHOLE_FILE:  # small: read at once, unless it inflates past WHOLE_FILE_JSON
        text, blocks = whole(blocks, WHOLE_FILE_JSON)
    with gc_paused():
        try:
            told = (lambda done: progress(min(done, size), size)) if progress else None
            return _read(path, blocks, piece, jobs, told, held=text)
        except PieceError:
            pass
        # one pass, of at most ONE_PASS bytes (a text held whole and longer is let go, and read again for the error)
        if text is None or len(text) > ONE_PASS:
            text = blocks = None  # let go of before reading again
            text = read_json(path, ONE_PASS)
        return _one_pass(path, text, size)


def _one_pass(path: str, text: bytes, file_bytes: int) -> LoadedTrace:
    """The trace whose whole JSON is ``text``, decoded at once (``file_bytes``: its file's size read so far)."""
    doc = decode_json(path, text)
    check_events(path, len(doc.traceEvents), file_bytes, len(text))
    return LoadedTrace(columns(doc.traceEvents), doc.distributedInfo, doc.profkit)


def _read(path: str, blocks: Iterable[tuple[bytes, int]], piece: int, jobs: int,
          progress: Optional[Callable[[int], None]], held: Optional[bytes] = None) -> LoadedTrace:
    """The pieces of ``blocks`` decoded (by a pool of ``jobs`` processes from the first cut, where ``jobs`` > 1) and
    appended in order. Workers forked from this process inherit a text ``held`` whole and are handed places in it,
    all at once; others are sent the pieces, a few ahead of the rows appended."""
    read = [0, 0]  # bytes of the file and of its JSON read so far

    def text() -> Iterator[bytes]:
        for block, done in blocks:
            if progress:
                progress(done)
            read[0], read[1] = done, read[1] + len(block)
            yield block

    appender = Appender()

    def add(result: _Result) -> None:
        appender.add(*result)
        check_events(path, appender.events(), *read)

    pending: collections.deque[Future] = collections.deque()
    with contextlib.ExitStack() as stack:
        pool: Optional[ProcessPoolExecutor] = None
        inherited = False
        k = -1
        for k, (buf, start, end, first, last) in enumerate(pieces(text(), piece)):
            if first and last:  # no cut: the whole text, by the path that gives a bad file's error
                return _one_pass(path, buf[start:end], read[0])
            if pool is None and jobs > 1:
                pool, inherited = _pool(jobs, held)
                stack.callback(pool.shutdown, cancel_futures=True)  # on an error: the pieces not begun are dropped
            if pool is None:
                add(decode_piece(framed_piece(buf, start, end, first, last)))
            elif inherited:
                pending.append(pool.submit(_decode_sent, None, start, end, first, last))
            else:
                sent = buf if (start, end) == (0, len(buf)) else buf[start:end]  # one copy at most
                pending.append(pool.submit(_decode_sent, _Sent(sent), 0, len(sent), first, last))
                while len(pending) > IN_FLIGHT * jobs:
                    add(pending.popleft().result())
        while pending:
            add(pending.popleft().result())
    return LoadedTrace(appender.rows(), appender.info, appender.meta, k + 1)


def _pool(jobs: int, held: Optional[bytes]) -> tuple[ProcessPoolExecutor, bool]:
    """``jobs`` worker processes, and whether they inherit ``held``: forked while this process has no other thread
    (fork beside threads can deadlock the child), else by forkserver, else spawned (no forkserver, or one whose
    socket's path is too long)."""
    methods = multiprocessing.get_all_start_methods()
    if threading.active_count() == 1 and "fork" in methods:
        context = multiprocessing.get_context("fork")
        return ProcessPoolExecutor(jobs, mp_context=context, initializer=_inherit, initargs=(held,)), held is not None
    method = "spawn"
    if "forkserver" in methods:
        from multiprocessing import forkserver

        try:
            forkserver.ensure_running()
            method = "forkserver"
        except OSError:
            pass
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method)), False


_INHERITED: Optional[bytes] = None  # in a forked worker: the text its parent held


def _inherit(text: bytes) -> None:
    global _INHERITED
    _INHERITED = text


def _decode_sent(text: Optional[bytes], start: int, end: int, first: bool, last: bool) -> "_Result":
    """In a worker: :func:`decode_piece` of the piece ``text[start:end]`` (of the text it inherited: ``text`` None)."""
    return decode_piece(framed_piece(_INHERITED if text is None else text, start, end, first, last))


class _Sent:
    """A piece's text for a worker, let go of once pickled to it (the pool pickles a call once): the pool keeps a
    call's arguments until its result is back, and the pieces in flight were 8-12 MB of a 250 MB trace's peak."""

    def __init__(self, text: bytes) -> None:
        self.text: Optional[bytes] = text

    def __reduce__(self) -> tuple[type[bytes], tuple[bytes]]:
        text, self.text = self.text, None
        if text is None:
            raise RuntimeError("a piece of trace text is sent once")
        return bytes, (text,)  # unpickled as the text itself


def check_events(path: str, events: int, file_bytes: int, json_bytes: int) -> None:
    """A :class:`TraceError` where ``events`` are more than a file of ``file_bytes`` bytes read so far (``json_bytes``
    of JSON) may hold (see :data:`EVENTS_PER_FILE_BYTE`)."""
    most = max(FEWEST_EVENTS, int(min(EVENTS_PER_FILE_BYTE * file_bytes, EVENTS_PER_JSON_BYTE * json_bytes)))
    if events > most:
        raise TraceError(f"{path}: over {most:,} events in {file_bytes / 1e6:.1f} MB of file ({json_bytes / 1e6:.0f} "
                         "MB of JSON; a profiler trace holds at most about 0.075 events a byte of gzip, 0.005 of "
                         "JSON): refused as a flood of events")


def pieces(blocks: Iterable[bytes], piece: int) -> Iterator[tuple[Any, int, int, bool, bool]]:
    """The text of ``blocks`` cut between events of the ``traceEvents`` list into pieces of about ``piece``
    bytes: each ``(text, start, end, first, last)``, the piece being ``text[start:end]``. A text with no cut is one
    piece, first and last; a text given as one block is ``text`` in every piece. Each byte is searched once: linear
    in the text, whatever it holds."""
    buf: Any = b""
    start = 0  # where the next piece starts in buf
    events: Optional[int] = None  # where the list's first event starts in buf, once found
    searched = 0  # buf[:searched] was searched (for the list, then for a cut) and held none past where it looked
    first = True
    for block in blocks:
        if start == len(buf):
            buf, searched = block, 0
        else:  # the rest joins the block: appended in place, the pieces before dropped (both linear)
            if isinstance(buf, bytearray):
                del buf[:start]
            else:  # a block given whole: only its rest copied
                buf = bytearray(memoryview(buf)[start:])
            buf += block
            searched, events = max(searched - start, 0), None if events is None else max(events - start, 0)
        start = 0
        if events is None:
            found = EVENTS_KEY.search(buf, max(searched - _OVERLAP, 0))
            searched = len(buf)
            if found is None:
                if len(buf) > ONE_PASS:
                    raise PieceError(f"no traceEvents list in its first {ONE_PASS / 1e6:.0f} MB")
                continue
            events = searched = found.end()
        while len(buf) - start > piece:
            cut = _BOUNDARY.search(buf, max(start + piece, events, searched - _OVERLAP))
            if cut is None:
                searched = len(buf)
                if len(buf) - start > ONE_PASS:
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


def framed_piece(text: bytes, start: int, end: int, first: bool, last: bool) -> bytes:
    """The piece ``text[start:end]`` made a document: the first has the file's opening, the last its end."""
    # one copy (slicing and then adding would copy it twice)
    return b"".join((b"" if first else _OPEN, memoryview(text)[start:end], b"" if last else _CLOSE))


_Result = tuple[Columns, Optional[dict[str, Any]], Optional[dict[str, Any]]]


def decode_piece(text: Any) -> _Result:
    try:  # a cut outside the list of events: one pass instead
        doc = decode_cut(text)
    except ValueError as err:
        raise PieceError(str(err)) from None
    return columns(doc.traceEvents), doc.distributedInfo, doc.profkit


def decode_cut(text: Any) -> TraceDoc:
    """The trace document of the JSON ``text``: :func:`~lightning_profkit.trace.events.decode`, of smaller pieces
    where its events need the tolerant path (which takes at most
    :data:`~lightning_profkit.trace.events.LOOSE_BYTES` at a time)."""
    try:
        return decode(text)
    except TooLoose as err:
        too_loose = err
    try:
        parts = list(pieces([text], LOOSE_BYTES // 2))
    except PieceError:
        parts = []
    if len(parts) < 2:
        raise too_loose
    docs = [decode(framed_piece(*part)) for part in parts]
    found = lambda key: next((d for d in (getattr(doc, key) for doc in docs) if d is not None), None)  # noqa: E731
    return TraceDoc([e for doc in docs for e in doc.traceEvents], found("distributedInfo"), found("profkit"))


def decode_json(path: str, raw: bytes) -> TraceDoc:
    """The trace document in ``raw``, the JSON text of ``path``; a :class:`TraceError` if it is not one."""
    try:
        return decode_cut(raw)
    except RecursionError:
        raise TraceError(f"{path}: JSON nested deeper than {sys.getrecursionlimit()} levels (a profiler trace nests "
                         "a few): not a profiler trace") from None
    except UnicodeDecodeError as err:
        raise TraceError(f"{path}: not JSON ({err})") from None
    except TooLoose as err:
        raise TraceError(f"{path}: {err}: not read") from None
    except ValueError as err:
        text = str(err).splitlines()[0]
        if "traceEvents" in text:
            raise TraceError(f"{path}: JSON without a traceEvents list, not a profiler trace") from None
        at = re.search(r"\(byte (\d+)\)", text)
        if at and re.match(rb"-?(NaN|Infinity)", raw[int(at.group(1)):int(at.group(1)) + 9]):
            raise TraceError(f"{path}: a damaged trace: a number that is not one (NaN or Infinity) at byte "
                             f"{at.group(1)}, which JSON does not allow") from None
        raise TraceError(f"{path}: not JSON ({text})") from None


class Appender:
    """The columns of consecutive pieces appended into one :class:`Columns`, their codes turned into codes of tables
    that hold every piece's values (first seen first), and the labels of the first piece that has them."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Any, int]] = {column: {} for column in CODED}
        self.columns: dict[str, array] = {}
        self.fractional = False
        self.info: Optional[dict[str, Any]] = None
        self.meta: Optional[dict[str, Any]] = None

    def add(self, c: Columns, info: Optional[dict[str, Any]] = None, meta: Optional[dict[str, Any]] = None) -> None:
        for column in COLUMNS:
            values: np.ndarray = getattr(c, column)
            into = self.columns.setdefault(column, array(values.dtype.char))
            if column in CODED:
                table = self.tables[column]
                codes = [table.setdefault(v, len(table)) for v in getattr(c, CODED[column])]
                if codes != list(range(len(codes))):  # this piece's table does not start the one of all pieces
                    values = np.asarray(codes, dtype=values.dtype)[values]
            into.frombytes(values.view(np.uint8))  # its bytes, not a copy
        self.fractional |= c.fractional
        self.info = self.info if self.info is not None else info
        self.meta = self.meta if self.meta is not None else meta

    def events(self) -> int:
        """How many events were appended."""
        return len(self.columns["ts"]) + len(self.columns["memory_device"])

    def rows(self) -> Columns:
        tables = {table: list(self.tables[column]) for column, table in CODED.items()}
        return Columns(**tables, **{k: wrap(v) for k, v in self.columns.items()}, fractional=self.fractional)
