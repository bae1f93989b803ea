"""Reading a folder of traces as values: each summary parsed once and kept beside its trace, a damaged trace
named apart, events tables written on asking, and windows of several runs named apart."""

import os
import shutil

import pytest

from lightning_profkit.companions import SIDECAR
from lightning_profkit.trace.folder import has_table, name_windows, read_folder

SMALL = "hta/critical_path_alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
CPU = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


@pytest.fixture
def run(tmp_path, gpu_traces):
    """A run folder of two windows (real traces) and a damaged one."""
    for step, source in ((10, SMALL), (40, CPU)):
        (tmp_path / f"step={step}").mkdir()
        shutil.copy(gpu_traces / source, tmp_path / f"step={step}" / "w.pt.trace.json.gz")
    (tmp_path / "step=70").mkdir()
    (tmp_path / "step=70" / "w.pt.trace.json.gz").write_bytes(b"\x1f\x8b damaged")
    return tmp_path


def test_each_trace_is_parsed_once_and_its_summary_kept_beside_it(run):
    first = read_folder(str(run), jobs=1)
    assert [s["window"] for s in first.summaries] == ["step=10", "step=40"]
    assert len(first.left_out) == 1 and first.left_out[0].startswith(str(run / "step=70" / "w.pt.trace.json.gz"))
    assert first.kept == [s["path"] + SIDECAR for s in first.summaries] and first.unkept is None
    again = read_folder(str(run), jobs=1)
    assert again.kept == [] and again.summaries == first.summaries  # from the sidecars
    os.utime(first.summaries[0]["path"], ns=(1, 1))  # a trace changed since its sidecar: parsed again
    assert read_folder(str(run), jobs=1).kept == [first.kept[0]]


def test_summaries_known_elsewhere_join_those_found_here(run):
    gone = str(run / "step=20" / "w.pt.trace.json.gz")  # read before, its summary kept elsewhere
    read = read_folder(str(run), jobs=1, known={gone: {"host": {}}})
    assert [s["window"] for s in read.summaries] == ["step=10", "step=20", "step=40"]
    assert read.summaries[1] == {"path": gone, "window": "step=20", "host": {}}


def test_events_tables_are_written_on_asking_only(run):
    pytest.importorskip("pyarrow")
    assert read_folder(str(run), jobs=1).tables == []
    traces = [str(run / f"step={s}" / "w.pt.trace.json.gz") for s in (10, 40)]
    assert not any(map(has_table, traces))
    read = read_folder(str(run), jobs=1, tables=True)
    assert read.tables == [t + ".parquet" for t in traces] and all(map(has_table, traces))


def test_windows_of_several_runs_are_named_by_their_path_below_the_runs():
    found = [{"path": f"/out/profiler/run={r}/step={s}/w.json"} for r in (1, 2) for s in (10, 40)]
    name_windows(found)
    assert [s["window"] for s in found] == ["run=1/step=10", "run=1/step=40", "run=2/step=10", "run=2/step=40"]
    one = [{"path": "/out/step=10/w.json", "window": "step=10"}]
    name_windows(one)
    assert one[0]["window"] == "step=10"
