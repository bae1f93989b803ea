"""A real fit's events tables (Parquet, written beside each trace by `profkit export` or a first `profkit sql`) are one
dataset to DuckDB and to Dask, read as docs/many-ranks.md shows: every complete event of the raw traces is a row, with
its run, window and rank."""

import os
import subprocess
import sys

from conftest import SleepDataset, TinyModel, WaitForTraces, make_trainer, read_trace, trace_files
from lightning.pytorch.loggers import CSVLogger

from lightning_profkit import PerformanceMonitor


def complete_events(path):
    """Counted over the raw trace: its complete events (``ph: "X"`` with a time)."""
    return sum(1 for e in read_trace(path)["traceEvents"] if e.get("ph") == "X" and "ts" in e)


def test_a_real_fits_tables_are_one_dataset_to_duckdb_and_dask(tmp_path):
    import dask.dataframe as dd
    import duckdb

    monitor = PerformanceMonitor(steps="2-3,7-8", alert_threshold=None)
    logger = CSVLogger(str(tmp_path), name="run")
    make_trainer(tmp_path, [WaitForTraces(monitor, 1), monitor], max_epochs=2, logger=logger,
                 log_every_n_steps=1).fit(TinyModel(SleepDataset(12, delay=0.001)))
    traces = trace_files(tmp_path)
    assert len(traces) == 2 and not any(os.path.exists(t + ".parquet") for t in traces)  # none until asked for
    profkit = os.path.join(os.path.dirname(sys.executable), "profkit")
    subprocess.run([profkit, "export", logger.log_dir], check=True, timeout=300)
    assert all(os.path.isfile(t + ".parquet") for t in traces)
    want = {(os.path.basename(os.path.dirname(t)), 0): complete_events(t) for t in traces}

    run = logger.log_dir  # the docs' `run/**/*.parquet`, read as they read it
    found = duckdb.sql(f"SELECT window_name, rank, count(*) FROM read_parquet('{run}/**/*.parquet', hive_partitioning = false) GROUP BY ALL "
                       "ORDER BY window_name").fetchall()
    assert {(w, r): n for w, r, n in found} == want
    steps = duckdb.sql(f"SELECT DISTINCT step FROM read_parquet('{run}/**/*.parquet', hive_partitioning = false) WHERE starts_with(name, "
                       "'ProfilerStep#') ORDER BY step").fetchall()
    assert [s for (s,) in steps] == [2, 3, 7, 8]

    # window folders are named epoch=…: a hive-style reader takes that for a column of its own, unless told not to
    frame = dd.read_parquet(f"{run}/**/*.parquet", dataset={"partitioning": None}).compute()
    assert frame.groupby(["window_name", "rank"]).size().to_dict() == want
    assert set(frame["run"]) == {os.path.basename(run)}
