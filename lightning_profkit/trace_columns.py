"""A trace as columns: one pass over the events, then every figure is computed with numpy on arrays.

Complete events (``ph == "X"``) with a timestamp become rows; ``[memory]`` instant events are kept apart.
Strings (category, name) are stored as codes into ``cats`` / ``names``; numeric arguments (stream,
correlation id, external id) that are absent or not integers are -1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from lightning_profkit.trace_events import Event


def _as_int(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


@dataclass
class Columns:
    cats: list[str]  # lower-cased category per code
    raw_cats: list[Any]  # as written (None where absent)
    names: list[str]
    cat: np.ndarray
    name: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    thread: np.ndarray  # a number per (pid, tid)
    stream: np.ndarray
    corr: np.ndarray
    ext: np.ndarray
    fractional: bool  # some timestamp is written as a float (HTA then rounds them all)
    memory: list  # [memory] instant events

    def cat_mask(self, *cats: str) -> np.ndarray:
        codes = [i for i, c in enumerate(self.cats) if c in cats]
        return np.isin(self.cat, codes)

    def name_mask(self, predicate: Any) -> np.ndarray:
        codes = [i for i, n in enumerate(self.names) if predicate(n)]
        return np.isin(self.name, codes)


def _ints(values: list) -> np.ndarray:
    """Integer ids, -1 where absent or not a whole number."""
    return np.array([-1 if v is None else v if type(v) is int else _as_int(v) for v in values], dtype=np.int64)


def _codes(values: list) -> tuple[np.ndarray, list]:
    """Integer codes for hashable values, and the distinct values in code order."""
    distinct = list(dict.fromkeys(values))
    table = {v: i for i, v in enumerate(distinct)}
    return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values)), distinct


def columns(events: Sequence[Event]) -> Columns:
    rows = [e for e in events if e.ph == "X" and e.ts is not None]
    memory = [e for e in events if e.ph == "i" and e.name == "[memory]"]
    cat, raw_cats = _codes([e.cat for e in rows])
    name, raw_names = _codes([e.name for e in rows])
    pid, _ = _codes([e.pid for e in rows])
    tid, tids = _codes([e.tid for e in rows])
    thread = pid.astype(np.int64) * max(len(tids), 1) + tid
    args = [e.args for e in rows]
    ts_list = [e.ts for e in rows]
    ts = np.array(ts_list, dtype=np.float64)
    dur = np.array([np.nan if e.dur is None else e.dur for e in rows], dtype=np.float64)
    return Columns(
        cats=[str(c or "").lower() for c in raw_cats],
        raw_cats=raw_cats,
        names=[str(n or "") for n in raw_names],
        cat=cat,
        name=name,
        ts=ts,
        dur=dur,
        end=ts + np.nan_to_num(dur),
        thread=thread,
        stream=_ints([a.stream for a in args]),
        corr=_ints([a.correlation for a in args]),
        ext=_ints([a.external_id_lower if a.external_id_lower is not None else a.external_id for a in args]),
        fractional=float in set(map(type, ts_list)),  # HTA then rounds all timestamps
        memory=memory,
    )
