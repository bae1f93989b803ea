"""A trace's events as plain columns, built in one pass and without numpy: what a decoding worker sends back.
Complete events (``ph == "X"``) with a timestamp become rows; ``[memory]`` instant events are kept apart. Categories,
names, threads and memory devices are codes into tables, first seen first; numeric arguments that are absent or not
whole numbers are -1, an absent duration NaN. Design notes: docs/how-it-works.md."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from lightning_profkit.trace.events import AnyEvent, Event, Instant

LONGEST_NAME = 2**16  # characters of a name kept: its first and last halves (a real one has a few thousand at most)
_CODES = "i"  # C int; numpy reads these type codes as the same types
_INTS = "q"  # 64 bits
_FLOATS = "d"


@dataclass
class Rows:
    """The one schema of a trace's rows: here with ``array.array`` columns, in :class:`~lightning_profkit.trace.columns.Columns`
    (a subclass) with numpy arrays over the same buffers."""

    # tables: the distinct values, first seen first, that code columns point into
    raw_cats: list[Any]  # category per code, as written (None where absent)
    names: list[Any]  # name per code, as written
    threads: list[tuple[Any, Any]]  # (pid, tid) per code
    memory_devices: list[Any]  # (device type, device id) per code; "type:id" strings in Columns
    # columns, one value per complete event
    cat: Any
    name: Any
    thread: Any
    ts: Any
    dur: Any
    stream: Any
    corr: Any
    ext: Any
    # columns, one value per [memory] instant event
    memory_device: Any
    memory_allocated: Any
    memory_reserved: Any
    fractional: bool  # some timestamp is written as a float (HTA then rounds them all)


# each code column and its table
CODED = {"cat": "raw_cats", "name": "names", "thread": "threads", "memory_device": "memory_devices"}
COLUMNS = ("cat", "name", "thread", "ts", "dur", "stream", "corr", "ext", "memory_device", "memory_allocated",
           "memory_reserved")


def _as_int(value: Any) -> int:
    """A whole number of 64 bits, or -1."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return -1
    return number if -(2**63) <= number < 2**63 else -1


def _ints(values: Sequence[Any]) -> array:
    try:
        return array(_INTS, values)
    except (TypeError, OverflowError):  # null, floats or strings among them: one by one
        return array(_INTS, map(_as_int, values))


def _floats(values: Sequence[Any]) -> array:
    try:
        return array(_FLOATS, values)
    except TypeError:  # null among them
        return array(_FLOATS, (float("nan") if v is None else v for v in values))


def _codes(values: Iterable[Any]) -> tuple[array, list[Any]]:
    table: dict = {}
    return array(_CODES, [table.setdefault(v, len(table)) for v in values]), list(table)


def _clipped(name: str) -> str:
    half = LONGEST_NAME // 2
    return f"{name[:half]}…({len(name) - 2 * half} characters)…{name[-half:]}"


def rows(events: Sequence[AnyEvent]) -> Rows:
    # One pass that appends to lists, strings and threads as codes: several times faster than a pass per
    # field over these records.
    cats: dict[Any, int] = {}
    names: dict[Any, int] = {}
    threads: dict[Any, int] = {}
    cat, name, thread, ts, dur, stream, corr, ext, memory = ([] for _ in range(9))
    for e in events:
        kind = type(e)
        if kind is Event and e.ts is not None:
            a = e.args
            cat.append(cats.setdefault(e.cat, len(cats)))
            name.append(names.setdefault(e.name, len(names)))
            thread.append(threads.setdefault((e.pid, e.tid), len(threads)))
            ts.append(e.ts)
            dur.append(e.dur)
            stream.append(a.stream)
            corr.append(a.correlation)
            ext.append(a.external_id_lower if a.external_id_lower != -1 else a.external_id)
        elif kind is Instant and e.name == "[memory]":
            memory.append(e.args)
    device, devices = _codes((a.device_type, a.device_id) for a in memory)
    return Rows(
        raw_cats=list(cats),
        names=[n if not isinstance(n, str) or len(n) <= LONGEST_NAME else _clipped(n) for n in names],
        threads=list(threads),
        cat=array(_CODES, cat),
        name=array(_CODES, name),
        thread=array(_CODES, thread),
        ts=_floats(ts),
        dur=_floats(dur),
        stream=_ints(stream),
        corr=_ints(corr),
        ext=_ints(ext),
        fractional=float in set(map(type, ts)),
        memory_devices=devices,
        memory_device=device,
        memory_allocated=_ints([a.total_allocated for a in memory]),
        memory_reserved=_ints([a.total_reserved for a in memory]),
    )
