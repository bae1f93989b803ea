"""A trace as columns: numpy arrays over :mod:`trace_rows`' rows, on which every figure is computed.

Complete events (``ph == "X"``) with a timestamp are rows; ``[memory]`` instant events are kept apart.
Strings (category, name) are stored as codes into ``cats`` / ``names``; numeric arguments (stream,
correlation id, external id) that are absent or not integers are -1.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from lightning_profkit.trace_events import AnyEvent
from lightning_profkit.trace_rows import Rows, rows


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


def _wrap(values: array) -> np.ndarray:
    """The ``array.array`` as a numpy array of its own type, without a copy (it keeps the buffer alive)."""
    return np.frombuffer(values, dtype=values.typecode)


def from_rows(r: Rows) -> Columns:
    ts, dur = _wrap(r.ts), _wrap(r.dur)
    return Columns(
        raw_cats=r.cats,
        names=[str(n or "") for n in r.names],
        cat=_wrap(r.cat),
        name=_wrap(r.name),
        ts=ts,
        dur=dur,
        end=ts + np.nan_to_num(dur),
        thread=_wrap(r.thread),
        threads=r.threads,
        stream=_wrap(r.stream),
        corr=_wrap(r.corr),
        ext=_wrap(r.ext),
        fractional=r.fractional,
        memory_devices=[f"{t}:{i}" for t, i in r.memory_devices],
        memory_device=_wrap(r.memory_device),
        memory_allocated=_wrap(r.memory_allocated),
        memory_reserved=_wrap(r.memory_reserved),
    )


def columns(events: Sequence[AnyEvent]) -> Columns:
    return from_rows(rows(events))


def _merge(tables: list[list], codes: list[np.ndarray]) -> tuple[np.ndarray, list]:
    """Codes into each part's table, as codes into one table of all their values (first seen first)."""
    merged = list(dict.fromkeys(v for table in tables for v in table))
    index = {v: i for i, v in enumerate(merged)}
    remapped = [np.array([index[v] for v in table], dtype=np.int64)[c] for table, c in zip(tables, codes)]
    return np.concatenate(remapped).astype(np.intc), merged


def join(pieces: Sequence[Rows]) -> Columns:
    """The columns of consecutive pieces of one trace, as if built from all its events at once."""
    parts = [from_rows(p) for p in pieces]
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
        thread=thread, threads=threads, fractional=any(p.fractional for p in parts),
        memory_devices=devices, memory_device=device, **joined,
    )
