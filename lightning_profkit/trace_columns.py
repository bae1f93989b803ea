"""A trace as columns: one pass over the events, then every figure is computed with numpy on arrays.

Complete events (``ph == "X"``) with a timestamp become rows; ``[memory]`` instant events are kept apart.
Strings (category, name) are stored as codes into ``cats`` / ``names``; numeric arguments (stream,
correlation id, external id) that are absent or not integers are -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from lightning_profkit.trace_events import AnyEvent, Event, Instant


def _as_int(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return -1
    return number if -(2**63) <= number < 2**63 else -1


@dataclass
class Columns:
    raw_cats: list[Any]  # category per code, as written (None where absent)
    names: list[str]
    cat: np.ndarray
    name: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    thread: np.ndarray  # a code per (pid, tid)
    threads: list[tuple[Any, Any]]  # (pid, tid) per code
    stream: np.ndarray
    corr: np.ndarray
    ext: np.ndarray
    fractional: bool  # some timestamp is written as a float (HTA then rounds them all)
    # [memory] instant events, a row each: device code, bytes allocated and reserved (-1 where absent)
    memory_devices: list[str]  # "type:id" per code
    memory_device: np.ndarray
    memory_allocated: np.ndarray
    memory_reserved: np.ndarray
    cats: list[str] = field(init=False)  # lower-cased category per code

    def __post_init__(self) -> None:
        self.cats = [str(c or "").lower() for c in self.raw_cats]

    def cat_mask(self, *cats: str) -> np.ndarray:
        return code_mask(self.cat, [i for i, c in enumerate(self.cats) if c in cats], len(self.cats))

    def name_mask(self, predicate: Any) -> np.ndarray:
        return code_mask(self.name, [i for i, n in enumerate(self.names) if predicate(n)], len(self.names))


def code_mask(codes: np.ndarray, chosen: list[int], size: int) -> np.ndarray:
    """Where ``codes`` (each in ``range(size)``) is one of ``chosen``: a table lookup."""
    table = np.zeros(size, dtype=bool)
    table[chosen] = True
    return table[codes]


def _ints(values: list) -> np.ndarray:
    """Integer ids, -1 where absent or not a whole number."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):  # null, or strings that are not numbers: one by one
        return np.array([_as_int(v) for v in values], dtype=np.int64)


def _codes(values: list) -> tuple[np.ndarray, list]:
    """Integer codes for hashable values, and the distinct values in code order."""
    distinct = list(dict.fromkeys(values))
    table = {v: i for i, v in enumerate(distinct)}
    return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values)), distinct


def _array(codes: list, dtype: type) -> np.ndarray:
    return np.fromiter(codes, dtype=dtype, count=len(codes))


def columns(events: Sequence[AnyEvent]) -> Columns:
    # One pass that appends to lists, strings and threads as codes in first-seen order: several times
    # faster than a pass per field over these records.
    cats: dict = {}
    names: dict = {}
    threads: dict = {}
    cat: list = []
    name: list = []
    thread: list = []
    ts_list: list = []
    dur_list: list = []
    stream: list = []
    corr: list = []
    ext: list = []
    memory = []
    for e in events:
        kind = type(e)
        if kind is Event and e.ts is not None:
            a = e.args
            cat.append(cats.setdefault(e.cat, len(cats)))
            name.append(names.setdefault(e.name, len(names)))
            thread.append(threads.setdefault((e.pid, e.tid), len(threads)))
            ts_list.append(e.ts)
            dur_list.append(e.dur)
            stream.append(a.stream)
            corr.append(a.correlation)
            ext.append(a.external_id_lower if a.external_id_lower != -1 else a.external_id)
        elif kind is Instant and e.name == "[memory]":
            memory.append(e.args)
    device_codes, devices = _codes([(a.device_type, a.device_id) for a in memory])
    ts = _array(ts_list, np.float64)
    dur = np.array(dur_list, dtype=np.float64)  # None becomes NaN
    return Columns(
        raw_cats=list(cats),
        names=[str(n or "") for n in names],
        cat=_array(cat, np.int32),
        name=_array(name, np.int32),
        ts=ts,
        dur=dur,
        end=ts + np.nan_to_num(dur),
        thread=_array(thread, np.int64),
        threads=list(threads),
        stream=_ints(stream),
        corr=_ints(corr),
        ext=_ints(ext),
        fractional=float in set(map(type, ts_list)),  # HTA then rounds all timestamps
        memory_devices=[f"{t}:{i}" for t, i in devices],
        memory_device=device_codes,
        memory_allocated=_ints([a.total_allocated for a in memory]),
        memory_reserved=_ints([a.total_reserved for a in memory]),
    )


def _merge(tables: list[list], codes: list[np.ndarray]) -> tuple[np.ndarray, list]:
    """Codes into each part's table, as codes into one table of all their values (first seen first)."""
    merged = list(dict.fromkeys(v for table in tables for v in table))
    index = {v: i for i, v in enumerate(merged)}
    remapped = [np.array([index[v] for v in table], dtype=np.int64)[c] for table, c in zip(tables, codes)]
    return np.concatenate(remapped).astype(np.int32), merged


def concat(parts: Sequence[Columns]) -> Columns:
    """The columns of consecutive pieces of one trace, as if built from all its events at once."""
    if len(parts) == 1:
        return parts[0]
    cat, raw_cats = _merge([p.raw_cats for p in parts], [p.cat for p in parts])
    name, names = _merge([p.names for p in parts], [p.name for p in parts])
    thread, threads = _merge([p.threads for p in parts], [p.thread for p in parts])
    device, devices = _merge([p.memory_devices for p in parts], [p.memory_device for p in parts])
    joined = {f: np.concatenate([getattr(p, f) for p in parts])
              for f in ("ts", "dur", "end", "stream", "corr", "ext", "memory_allocated", "memory_reserved")}
    return Columns(
        raw_cats=raw_cats, names=names, cat=cat, name=name,
        thread=thread.astype(np.int64), threads=threads, fractional=any(p.fractional for p in parts),
        memory_devices=devices, memory_device=device, **joined,
    )
