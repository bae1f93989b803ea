"""A trace's events as numpy columns, built in one pass, on which every figure is computed. Design notes:
docs/how-it-works.md."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Sequence

import numpy as np

from lightning_profkit.trace import intervals
from lightning_profkit.trace.events import AnyEvent, Event, Instant

LONGEST_NAME = 2**16  # characters of a name kept: its first and last halves (a real one has a few thousand at most)


@dataclass
class Columns:
    """A trace's complete events with a timestamp as columns, its ``[memory]`` events apart: strings are codes into
    tables, first seen first; numeric arguments absent or not whole numbers are -1, an absent duration NaN."""

    # tables: the distinct values, first seen first, that code columns point into
    raw_cats: list[Any]  # category per code, as written (None where absent)
    names: list[str]  # name per code ("" where absent)
    threads: list[tuple[Any, Any]]  # (pid, tid) per code
    memory_devices: list[str]  # "type:id" per code
    # columns, one value per complete event
    cat: np.ndarray
    name: np.ndarray
    thread: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    stream: np.ndarray
    corr: np.ndarray
    ext: np.ndarray
    # columns, one value per [memory] instant event
    memory_device: np.ndarray
    memory_allocated: np.ndarray
    memory_reserved: np.ndarray
    fractional: bool  # some timestamp is written as a float (HTA then rounds them all)
    _named: dict[Any, np.ndarray] = field(default_factory=dict, init=False, repr=False)  # name_mask's, by predicate
    _codes_of: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False)  # each name's codes

    @cached_property
    def end(self) -> np.ndarray:
        """ts + dur (dur 0 where absent)."""
        return self.ts + np.nan_to_num(self.dur)

    @cached_property
    def cats(self) -> list[str]:
        """The lower-cased category per code."""
        return [str(c or "").lower() for c in self.raw_cats]

    def cat_mask(self, *cats: str) -> np.ndarray:
        return code_mask(self.cat, [i for i, c in enumerate(self.cats) if c in cats], len(self.cats))

    def name_mask(self, predicate: Callable[[str], bool]) -> np.ndarray:
        """Where an event's name is one ``predicate`` takes: one pass over the names for each predicate, kept."""
        if predicate not in self._named:
            chosen = [i for i, n in enumerate(self.names) if predicate(n)]
            self._named[predicate] = code_mask(self.name, chosen, len(self.names))
        return self._named[predicate]

    def named(self, *names: str) -> np.ndarray:
        """Where an event's name is one of ``names``: a look-up each, whatever the names of the trace."""
        if not self._codes_of:
            for i, n in enumerate(self.names):
                self._codes_of.setdefault(n, []).append(i)
        return code_mask(self.name, [i for n in names for i in self._codes_of.get(n, ())], len(self.names))

    def spans(self, mask: np.ndarray) -> intervals.Union:
        """The union of the events where ``mask``."""
        return intervals.union_where(self.ts, self.end, mask)


def launcher(c: Columns, device: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """For each GPU event (indices ``device``), the host call among ``calls`` (indices, in the trace's order) that
    launched it, by correlation id, as an index into ``calls``; -1 where none did. Where several calls share an id,
    the last of them (as torch-tb-profiler's map from id to launch keeps it): each GPU event has one launcher at
    most, whatever the ids, and the cost is a sort."""
    corr = c.corr[calls]
    order = np.argsort(corr, kind="stable")
    ids = corr[order]
    last = np.append(ids[1:] != ids[:-1], True) & (ids >= 0)  # the last call of each id
    ids, order = ids[last], order[last]
    if not ids.size:
        return np.full(device.size, -1, dtype=np.int64)
    wanted = c.corr[device]
    at = np.minimum(np.searchsorted(ids, wanted), ids.size - 1)
    return np.where(ids[at] == wanted, order[at], -1)


def code_mask(codes: np.ndarray, chosen: list[int], size: int) -> np.ndarray:
    """Where ``codes`` (each in ``range(size)``) is one of ``chosen``: a table lookup."""
    table = np.zeros(size, dtype=bool)
    table[chosen] = True
    return table[codes]


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


def wrap(values: array) -> np.ndarray:
    """The ``array.array`` as a numpy array of its own type, without a copy (it keeps the buffer alive)."""
    return np.frombuffer(values, dtype=values.typecode)


def _ints(values: Sequence[Any]) -> np.ndarray:
    try:
        return wrap(array("q", values))
    except (TypeError, OverflowError):  # null, floats or strings among them: one by one
        return wrap(array("q", map(_as_int, values)))


def _floats(values: Sequence[Any]) -> np.ndarray:
    try:
        return wrap(array("d", values))
    except TypeError:  # null among them: NaN
        return np.array(values, dtype=np.float64)


def _name(name: Any) -> str:
    """The name as a string, of its first and last ``LONGEST_NAME`` / 2 characters where it is longer."""
    name, half = str(name or ""), LONGEST_NAME // 2
    return name if len(name) <= LONGEST_NAME else f"{name[:half]}…({len(name) - 2 * half} characters)…{name[-half:]}"


def columns(events: Sequence[AnyEvent]) -> Columns:
    # One pass that appends to lists, strings and threads as codes: several times faster than a pass per
    # field over these records.
    cats: dict[Any, int] = {}
    names: dict[Any, int] = {}
    threads: dict[Any, int] = {}
    devices: dict[str, int] = {}
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
    device = [devices.setdefault(f"{a.device_type}:{a.device_id}", len(devices)) for a in memory]
    return Columns(
        raw_cats=list(cats),
        names=list(map(_name, names)),
        threads=list(threads),
        cat=wrap(array("i", cat)),
        name=wrap(array("i", name)),
        thread=wrap(array("i", thread)),
        ts=_floats(ts),
        dur=_floats(dur),
        stream=_ints(stream),
        corr=_ints(corr),
        ext=_ints(ext),
        fractional=float in set(map(type, ts)),
        memory_devices=list(devices),
        memory_device=wrap(array("i", device)),
        memory_allocated=_ints([a.total_allocated for a in memory]),
        memory_reserved=_ints([a.total_reserved for a in memory]),
    )
