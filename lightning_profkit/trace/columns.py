"""A trace as columns: numpy arrays over :mod:`~lightning_profkit.trace.rows`' rows, on which every figure is computed.
Complete events (``ph == "X"``) with a timestamp are rows; ``[memory]`` instant events are kept apart. Strings
(category, name) are codes into ``raw_cats`` / ``names``; numeric arguments absent or not integers are -1."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

import numpy as np

from lightning_profkit.trace import intervals
from lightning_profkit.trace.events import AnyEvent
from lightning_profkit.trace.rows import COLUMNS, Rows, rows


@dataclass
class Columns(Rows):
    """:class:`Rows` with numpy columns, names as strings and memory devices as ``"type:id"``, plus what is
    derived from them."""

    end: np.ndarray = field(init=False)  # ts + dur (dur 0 where absent)
    cats: list[str] = field(init=False)  # lower-cased category per code
    _named: dict[Any, np.ndarray] = field(init=False, repr=False)  # name_mask's answers, by predicate
    _codes_of: dict[str, list[int]] = field(init=False, repr=False)  # each name's codes (a name cut short: several)

    def __post_init__(self) -> None:
        self.end = self.ts + np.nan_to_num(self.dur)
        self.cats = [str(c or "").lower() for c in self.raw_cats]
        self._named = {}
        self._codes_of = {}

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


def _wrap(values: array) -> np.ndarray:
    """The ``array.array`` as a numpy array of its own type, without a copy (it keeps the buffer alive)."""
    return np.frombuffer(values, dtype=values.typecode)


def from_rows(r: Rows) -> Columns:
    parts: dict[str, Any] = {f.name: getattr(r, f.name) for f in fields(Rows)}
    parts.update({name: _wrap(parts[name]) for name in COLUMNS})
    parts["names"] = [str(n or "") for n in r.names]
    parts["memory_devices"] = [f"{t}:{i}" for t, i in r.memory_devices]
    return Columns(**parts)


def columns(events: Sequence[AnyEvent]) -> Columns:
    return from_rows(rows(events))
