"""A trace's events as a table, one row per complete event (``ph == "X"``), written as Parquet beside the trace
(``NAME.parquet``) so that a run of many ranks is queried without parsing its JSON again (``profkit sql``), by
DuckDB here and by Dask, Spark or DuckDB elsewhere.

Every file of a run has the same columns (:data:`SCHEMA`), the run, window (``window_name``: ``window`` is a word
of SQL), rank and worker among them, so that
any set of them read together (``**/*.parquet``) is one table. Times are the trace's microseconds. Numbers a trace
does not give (a thread id that is not a number, an event outside every step, a kernel without a correlation id)
are -1. An event's ``step`` is the ``ProfilerStep#N`` whose host span holds its start; a GPU event's is that of the
runtime call that launched it (same correlation id), as HolisticTraceAnalysis assigns iterations. ``[memory]``
events and flow arrows are not in the table.

Parquet needs pyarrow (``pip install pyarrow``): :func:`available` says whether it is there.
"""

from __future__ import annotations

import functools
import importlib
import io
import os
from typing import Any, Optional

import numpy as np

from lightning_profkit.trace import vocabulary as v
from lightning_profkit.trace.columns import Columns

VERSION = 1  # of the columns below: kept in each file's metadata
# column -> its type, in DuckDB's words (what `profkit sql` shows)
SCHEMA = {
    "run": "VARCHAR", "window_name": "VARCHAR", "rank": "BIGINT", "worker": "VARCHAR",
    "name": "VARCHAR", "category": "VARCHAR", "start_us": "DOUBLE", "dur_us": "DOUBLE",
    "pid": "BIGINT", "tid": "BIGINT", "device": "BIGINT", "stream": "BIGINT", "correlation": "BIGINT",
    "external_id": "BIGINT", "step": "BIGINT",
}


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether pyarrow, which writes Parquet, can be imported here."""
    try:
        importlib.import_module("pyarrow.parquet")
    except ImportError:
        return False
    return True


def run_of(trace: str) -> str:
    """The run a trace (a path or a URL) belongs to, by the folders above its window's: the trace folder's name, or
    the name of the folder that holds ``profiler/`` (a logger's ``version_N``); ``run=`` taken off a run folder of
    its own."""
    parts = (trace if "://" in trace else os.path.abspath(trace)).replace(os.sep, "/").split("/")[:-2]
    name = parts[-1] if parts else ""
    if name == "profiler" and len(parts) > 1:
        name = parts[-2]
    return name[len("run="):] if name.startswith("run=") else name


def fresh(path: str, trace_bytes: int) -> bool:
    """Whether the Parquet file at ``path`` is this code's table of a trace of ``trace_bytes`` bytes."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, ValueError):  # pyarrow's errors are both
        return False
    return meta.get(b"profkit_events") == str(VERSION).encode() and meta.get(b"trace_bytes") == str(trace_bytes).encode()


def _integers(values: list[Any]) -> np.ndarray:
    return np.array([x if isinstance(x, int) and not isinstance(x, bool) and -2**63 <= x < 2**63 else -1
                     for x in values], dtype=np.int64)


def steps_of(c: Columns) -> np.ndarray:
    """Each event's step number (-1: in none)."""
    device = c.cat_mask(*v.DEVICE)
    marker = ~device & c.name_mask(v.is_step)
    order = np.argsort(c.ts[marker], kind="stable")
    starts, ends = c.ts[marker][order], c.end[marker][order]
    numbers = np.array([v.step_number(c.names[code]) or -1 for code in c.name[marker]], dtype=np.int64)[order]
    step = np.full(c.ts.size, -1, dtype=np.int64)
    if starts.size:
        at = np.searchsorted(starts, c.ts, side="right") - 1
        inside = (at >= 0) & (c.ts < ends[np.maximum(at, 0)])
        step[inside] = numbers[at[inside]]
    launch = c.cat_mask(*v.HOST_CUDA) & (c.corr >= 0)
    by_corr = np.argsort(c.corr[launch], kind="stable")
    corr, launched = c.corr[launch][by_corr], step[launch][by_corr]
    gpu = np.flatnonzero(device & (c.corr >= 0))
    if corr.size and gpu.size:
        at = np.minimum(np.searchsorted(corr, c.corr[gpu]), corr.size - 1)
        found = corr[at] == c.corr[gpu]
        step[gpu[found]] = launched[at[found]]
    return step


def table_of(path: str, summary: dict[str, Any], c: Columns) -> dict[str, Any]:
    """The table of the trace at ``path`` (its columns ``c``), labelled from its summary."""
    return event_table(c, run_of(path), summary["window"], summary["rank"], summary["worker"])


def event_table(c: Columns, run: str, window: str, rank: Optional[int], worker: str) -> dict[str, Any]:
    """The table's columns (numpy arrays; strings as codes plus their values, see :func:`to_parquet`)."""
    pids = _integers([pid for pid, _ in c.threads])
    tids = _integers([tid for _, tid in c.threads])
    device = c.cat_mask(*v.DEVICE)
    n = c.ts.size
    return {
        "run": run, "window_name": window, "rank": -1 if rank is None else rank, "worker": worker,
        "name": (c.name, [str(x) for x in c.names]), "category": (c.cat, [str(x or "") for x in c.raw_cats]),
        "start_us": c.ts.astype(np.float64), "dur_us": np.nan_to_num(c.dur.astype(np.float64)),
        "pid": pids[c.thread] if n else np.zeros(0, np.int64), "tid": tids[c.thread] if n else np.zeros(0, np.int64),
        "device": np.where(device, pids[c.thread], -1) if n else np.zeros(0, np.int64),
        "stream": c.stream.astype(np.int64), "correlation": c.corr.astype(np.int64),
        "external_id": c.ext.astype(np.int64), "step": steps_of(c),
    }


def to_parquet(table: dict[str, Any], trace_bytes: int) -> bytes:
    """The table of a trace of ``trace_bytes`` bytes as a Parquet file (zstd; names, categories and the labels
    dictionary-encoded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = table["start_us"].size
    arrays = {}
    for column in SCHEMA:
        value = table[column]
        if isinstance(value, tuple):  # codes and the strings they point to
            codes, strings = value
            arrays[column] = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(strings, pa.string()))
        elif isinstance(value, str):
            arrays[column] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))
        elif isinstance(value, int):
            arrays[column] = pa.array(np.full(n, value, np.int64))
        else:
            arrays[column] = pa.array(value)
    out = io.BytesIO()
    schema = pa.table(arrays).schema.with_metadata({"profkit_events": str(VERSION), "trace_bytes": str(trace_bytes)})
    pq.write_table(pa.table(arrays, schema=schema), out, compression="zstd")
    return out.getvalue()
