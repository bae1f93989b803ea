"""The views ``profkit sql`` gives over a run's event tables in DuckDB, their categories from the one vocabulary of
trace words."""

from __future__ import annotations

import glob
from typing import Any, Sequence

from lightning_profkit.trace import vocabulary as v
from lightning_profkit.trace.operator_times import CPU_CATEGORIES


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
