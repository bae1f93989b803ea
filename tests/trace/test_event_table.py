"""A trace's events table: one row per complete event, each labelled with its run, window and step (a kernel with
the step of the call that launched it), written as Parquet that says which trace size it was made from; the views of
``profkit sql`` over real tables in DuckDB select what the summary's figures read."""

import os
import subprocess
import sys

import pytest

from conftest import records
from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.event_table import SCHEMA, VIEWS, connect, event_table, fresh, run_of, steps_of, to_parquet

EVENTS = [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 100, "dur": 50, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 120, "dur": 5, "pid": 1, "tid": 1,
     "args": {"correlation": 42}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 400, "dur": 30, "pid": 0, "tid": 7,
     "args": {"correlation": 42, "stream": 7}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 160, "dur": 2, "pid": 1, "tid": "main"},
]


def test_each_event_has_its_step_and_a_kernel_that_of_its_launch():
    c = columns(records(EVENTS))
    assert steps_of(c).tolist() == [7, 7, 7, -1]  # the kernel ran after the step's host span; aten::add after it too
    table = event_table(c, "run1", "step=7", 0, "w")
    assert table["tid"].tolist() == [1, 1, 7, -1]  # "main": not a number
    assert table["device"].tolist() == [-1, -1, 0, -1]


def test_the_parquet_file_has_the_schema_and_says_what_it_was_made_from(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "w.pt.trace.json.gz.parquet"
    path.write_bytes(to_parquet(event_table(columns(records(EVENTS)), "run1", "step=7", None, "w"), 1234))
    got = pq.read_table(path).to_pydict()
    assert list(got) == list(SCHEMA) and got["name"] == ["ProfilerStep#7", "cudaLaunchKernel", "gemm", "aten::add"]
    assert set(got["run"]) == {"run1"} and set(got["rank"]) == {-1}
    assert fresh(str(path), 1234) and not fresh(str(path), 1235) and not fresh(str(tmp_path / "none.parquet"), 1234)


def test_the_run_is_the_folder_above_the_windows():
    assert run_of("/out/version_3/profiler/step=1-3/w.pt.trace.json.gz") == "version_3"
    assert run_of("s3://bucket/runs/run=a/step=1-3/w.pt.trace.json.gz") == "a"
    assert run_of("traces/step=1-3/w.pt.trace.json.gz") == "traces"


def test_writing_a_table_leaves_pandas_unimported():
    """pyarrow.array() imports pandas where it is installed (0.4 s of CPU and 45 MB for each `profkit sql`)."""
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    code = ("import sys\nfrom conftest import records\nfrom lightning_profkit.trace.columns import columns\n"
            "from lightning_profkit.trace.event_table import event_table, to_parquet\n"
            f"to_parquet(event_table(columns(records({EVENTS!r})), 'r', 'w', 0, 'w'), 1)\n"
            "print('pandas' in sys.modules)")
    here = os.path.dirname(os.path.dirname(__file__))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])})
    assert done.stdout.split() == ["False"], done.stderr


def test_the_views_select_steps_operators_kernels_and_ranks(tmp_path):
    pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    files = []
    for rank in (0, 1):
        path = tmp_path / f"w{rank}.parquet"
        path.write_bytes(to_parquet(event_table(columns(records(EVENTS)), "run1", "step=7", rank, f"w{rank}"), 1))
        files.append(str(path))
    db = connect(files)
    assert db.execute("SELECT rank, step, dur_us FROM steps ORDER BY rank").fetchall() == [(0, 7, 50.0), (1, 7, 50.0)]
    assert sorted(r[0] for r in db.execute("SELECT DISTINCT name FROM operators").fetchall()) == [
        "aten::add", "cudaLaunchKernel"]
    assert db.execute("SELECT DISTINCT name FROM kernels").fetchall() == [("gemm",)]
    assert db.execute("SELECT rank, traces, steps, step_ms, kernel_ms_per_step FROM ranks").fetchall() == [
        (0, 1, 1, 0.05, 0.03), (1, 1, 1, 0.05, 0.03)]
    views = db.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    assert set(VIEWS) == {r[0] for r in views}


def test_a_file_name_is_never_a_pattern(tmp_path):
    """A window folder named `a[1]` beside one named `a1`: DuckDB would read `a[1]/w.parquet` as a pattern that
    matches `a1/w.parquet`; each table is read by its own name."""
    pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    for folder, rank in (("a1", 1), ("a[1]", 2), ("b*", 3)):
        (tmp_path / folder).mkdir()
        table = event_table(columns(records(EVENTS)), "run1", "step=7", rank, "w")
        (tmp_path / folder / "w.parquet").write_bytes(to_parquet(table, 1))
    for folder, rank in (("a[1]", 2), ("b*", 3)):
        db = connect([str(tmp_path / folder / "w.parquet")])
        assert db.execute("SELECT DISTINCT rank FROM events").fetchall() == [(rank,)]
