"""A trace's complete events as a Parquet table beside it (``NAME.parquet``), and the views over a run's tables in
which ``profkit sql`` queries it without parsing its JSON again (its columns: docs/many-ranks.md). Design notes:
docs/how-it-works.md."""

from __future__ import annotations

import functools
import glob
import importlib
import io
import os
from typing import Any, BinaryIO, Optional, Sequence

import numpy as np

from lightning_profkit.opener import FileRefused, open_regular
from lightning_profkit.printable import name_text
from lightning_profkit.trace import vocabulary as v
from lightning_profkit.trace.columns import Columns, launcher
from lightning_profkit.trace.operator_times import CPU_CATEGORIES

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
    return name_text(name[len("run="):] if name.startswith("run=") else name)


MAX_BYTES = 4 * 10**9  # an events table read at most (a 1 GB trace's is about 60 MB)
MAX_FOOTER = 10**6  # bytes of a table's footer (its schema and the places of its pages) at most: ours hold a few kB
_MAGIC = b"PAR1"


def open_table(path: str) -> BinaryIO:
    """The events table at ``path`` opened for reading (see :func:`~lightning_profkit.opener.open_regular`), if it
    ends as a Parquet file does with a footer of at most :data:`MAX_FOOTER` bytes: else a
    :class:`~lightning_profkit.opener.FileRefused`, before any reader parses it."""
    f = open_regular(path, MAX_BYTES)
    size = os.fstat(f.fileno()).st_size
    if size >= 12:
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] == _MAGIC and int.from_bytes(tail[:4], "little") <= min(MAX_FOOTER, size - 12):
            f.seek(0)
            return f
    f.close()
    raise FileRefused(f"{path}: not a Parquet file, or one whose footer is over {MAX_FOOTER // 10**6} MB: not read")


_ARROW = {"VARCHAR": ("string", "dictionary<values=string, indices=int32, ordered=0>"), "BIGINT": ("int64",),
          "DOUBLE": ("double",)}  # the types pyarrow reads each of SCHEMA's as, in the tables to_parquet writes


def labels(f: BinaryIO) -> dict[bytes, bytes]:
    """The labels of the events table ``f`` (opened by :func:`open_table`): empty where it is none of ours (or
    not a Parquet file pyarrow can read, or one whose columns are not :data:`SCHEMA`'s, which would fail every
    query over the run's tables)."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(f)
    except (OSError, ValueError):  # pyarrow's errors are both
        return {}
    finally:
        f.seek(0)
    meta = schema.metadata or {}
    types = {field.name: str(field.type) for field in schema}
    if any(types.get(column) not in _ARROW[kind] for column, kind in SCHEMA.items()):
        return {}
    return meta if meta.get(b"profkit_events") == str(VERSION).encode() else {}


def fresh(path: str, trace_bytes: int) -> bool:
    """Whether the Parquet file at ``path`` is this code's table of a trace of ``trace_bytes`` bytes."""
    try:
        with open_table(path) as f:
            return labels(f).get(b"trace_bytes") == str(trace_bytes).encode()
    except (OSError, FileRefused):
        return False


def _integers(values: list[Any]) -> np.ndarray:
    return np.array([x if isinstance(x, int) and not isinstance(x, bool) and -2**63 <= x < 2**63 else -1
                     for x in values], dtype=np.int64)


def steps_of(c: Columns) -> np.ndarray:
    """Each event's step number (-1: in none)."""
    device = c.cat_mask(*v.DEVICE)
    marker = np.flatnonzero(~device & c.name_mask(v.is_step))
    marker = marker[np.argsort(c.ts[marker], kind="stable")]
    numbers = np.array([-1 if (n := v.step_number(c.names[code])) is None else n for code in c.name[marker]],
                       dtype=np.int64)
    step = np.full(c.ts.size, -1, dtype=np.int64)
    if marker.size:
        at = np.searchsorted(c.ts[marker], c.ts, side="right") - 1
        inside = (at >= 0) & (c.ts < c.end[marker][np.maximum(at, 0)])
        step[inside] = numbers[at[inside]]
    gpu = np.flatnonzero(device)
    launches = np.flatnonzero(c.cat_mask(*v.HOST_CUDA))
    by = launcher(c, gpu, launches)
    step[gpu[by >= 0]] = step[launches[by[by >= 0]]]
    return step


def event_table(c: Columns, run: str, window: str, rank: Optional[int], worker: str) -> dict[str, Any]:
    """The table's columns: numpy arrays, strings as codes plus their values (see :func:`to_parquet`)."""
    pids = _integers([pid for pid, _ in c.threads])
    tids = _integers([tid for _, tid in c.threads])
    device = c.cat_mask(*v.DEVICE)
    labelled = np.zeros(c.ts.size, np.int32)  # the one label of every row of a string column
    return {
        "run": (labelled, [run]), "window_name": (labelled, [window]),
        "rank": np.full(c.ts.size, -1 if rank is None else rank, np.int64), "worker": (labelled, [worker]),
        "name": (c.name, c.names), "category": (c.cat, [str(x or "") for x in c.raw_cats]),
        "start_us": c.ts, "dur_us": np.nan_to_num(c.dur), "pid": pids[c.thread], "tid": tids[c.thread],
        "device": np.where(device, pids[c.thread], -1), "stream": c.stream, "correlation": c.corr, "external_id": c.ext,
        "step": steps_of(c),
    }


def to_parquet(table: dict[str, Any], trace_bytes: int) -> bytes:
    """The table of a trace of ``trace_bytes`` bytes as a Parquet file (zstd; the strings dictionary-encoded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = []
    for column in SCHEMA:
        value = table[column]
        if isinstance(value, tuple):  # codes and the strings they point to
            arrays.append(pa.DictionaryArray.from_arrays(_arrow(np.asarray(value[0], np.int32)), _strings(value[1])))
        else:
            arrays.append(_arrow(value))
    schema = pa.schema([(column, a.type) for column, a in zip(SCHEMA, arrays)],
                       metadata={"profkit_events": str(VERSION), "trace_bytes": str(trace_bytes)})
    out = io.BytesIO()
    # dictionaries for the strings only: one built for a column of distinct numbers (a time, a hostile file's
    # thread ids) held about 7 bytes a row for nothing, and the files are smaller without
    strings = [column for column, kind in SCHEMA.items() if kind == "VARCHAR"]
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), out, compression="zstd", use_dictionary=strings)
    return out.getvalue()


# Arrow arrays made from buffers: pyarrow.array() imports pandas where it is installed (0.4 s and 45 MB a process)


def _arrow(values: np.ndarray) -> Any:
    """The numbers ``values`` as an Arrow array (no copy)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.size, [None, pa.py_buffer(values)])


def _strings(values: list[str]) -> Any:
    """The strings ``values`` as an Arrow array."""
    import pyarrow as pa

    data = "".join(values).encode()  # one copy: a bytes object a string held about 100 bytes a name more
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    if lengths.sum() != len(data):  # not all ASCII: each one's length in bytes
        lengths = np.fromiter((len(s.encode()) for s in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(values),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)]).cast(pa.string())


def _among(words: Sequence[str]) -> str:
    return "(" + ", ".join(f"'{w}'" for w in words) + ")"


# name -> (what it holds, its SQL)
VIEWS = {
    "events": ("every complete event of every trace, one row each (see the columns below)", None),
    "steps": ("the host's ProfilerStep spans: one row per step of each trace",
              f"SELECT run, window_name, rank, worker, step, start_us, dur_us FROM events "
              f"WHERE device = -1 AND starts_with(name, '{v.STEP_PREFIX}')"),
    "operators": ("host operators, annotations and CUDA calls: what summary's CPU table counts (steps left out)",
                  f"SELECT * FROM events WHERE lower(category) IN {_among(CPU_CATEGORIES)} "
                  f"AND NOT starts_with(name, '{v.STEP_PREFIX}')"),
    "kernels": ("GPU kernels, memcpy and memset: summary's device table",
                f"SELECT * FROM events WHERE lower(category) IN {_among(v.DEVICE)}"),
    "ranks": ("per run and rank: traces, steps, mean step time (ms) and GPU activity (ms per step, all streams "
              "summed)",
              "WITH s AS (SELECT run, rank, count(DISTINCT worker || window_name) AS traces, count(*) AS steps, "
              "sum(dur_us) AS step_us FROM steps GROUP BY ALL), "
              "k AS (SELECT run, rank, sum(dur_us) AS kernel_us FROM kernels GROUP BY ALL) "
              "SELECT s.run, s.rank, s.traces, s.steps, s.step_us / s.steps / 1000 AS step_ms, "
              "k.kernel_us / s.steps / 1000 AS kernel_ms_per_step FROM s LEFT JOIN k USING (run, rank) "
              "ORDER BY s.run, s.rank"),
}


def connect(files: Sequence[str]) -> Any:
    """A DuckDB connection with :data:`VIEWS` over the local Parquet ``files``."""
    import duckdb

    db = duckdb.connect()
    # each file by its name alone: DuckDB reads `*`, `?` and `[` as a pattern unless escaped as glob.escape does
    listed = "[" + ", ".join("'" + glob.escape(f).replace("'", "''") + "'" for f in files) + "]"
    db.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet({listed}, union_by_name = true, "
               "hive_partitioning = false)")
    for name, (_, sql) in VIEWS.items():
        if sql is not None:
            db.execute(f"CREATE VIEW {name} AS {sql}")
    return db
