"""The views of ``profkit sql`` over real events tables in DuckDB: steps, operators, kernels and the ranks' figures
select what the summary's figures read."""

import pytest

from conftest import records
from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.event_table import event_table, to_parquet
from test_event_table import EVENTS

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")


def test_the_views_select_steps_operators_kernels_and_ranks(tmp_path):
    from lightning_profkit.trace.sql_views import VIEWS, connect

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
    assert set(VIEWS) == {r[0] for r in db.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}


def test_a_file_name_is_never_a_pattern(tmp_path):
    """A window folder named `a[1]` beside one named `a1`: DuckDB would read `a[1]/w.parquet` as a pattern that
    matches `a1/w.parquet`; each table is read by its own name."""
    from lightning_profkit.trace.sql_views import connect

    for folder, rank in (("a1", 1), ("a[1]", 2), ("b*", 3)):
        (tmp_path / folder).mkdir()
        table = event_table(columns(records(EVENTS)), "run1", "step=7", rank, "w")
        (tmp_path / folder / "w.parquet").write_bytes(to_parquet(table, 1))
    for folder, rank in (("a[1]", 2), ("b*", 3)):
        db = connect([str(tmp_path / folder / "w.parquet")])
        assert db.execute("SELECT DISTINCT rank FROM events").fetchall() == [(rank,)]
