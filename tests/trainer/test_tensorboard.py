"""What torch-tb-profiler, a real TensorBoard server and HolisticTraceAnalysis make of our traces."""

import gzip
import json
import logging
import os

import pytest
from conftest import SleepDataset, TinyModel, make_trainer, read_trace, trace_files
from torch_tb_profiler import io as tb_io
from torch_tb_profiler.profiler.data import RunProfileData
from torch_tb_profiler.profiler.event_parser import ProfileRole
from torch_tb_profiler.profiler.loader import RunLoader

from lightning_profkit import PerformanceMonitor
from lightning_profkit.monitor.writing.child import finalize_trace

CONTROL = "hta/trace_diff_control/control.json.gz"


def data_bound_run(root, epochs=1, **kwargs):
    """A run that waits on a sleeping Dataset (0 workers): the DataLoader dominates every step."""
    monitor = PerformanceMonitor(**kwargs)
    make_trainer(root, [monitor], max_epochs=epochs).fit(TinyModel(SleepDataset(48, delay=0.002), batch_size=2))
    return monitor


def loader_in_steps(path):
    """Per ProfilerStep of the trace at ``path``, in order: the time (µs) inside it covered by DataLoader spans,
    counted here over the raw events (a CPU trace: nothing ranks above DataLoader in the plugin's breakdown)."""
    events = [e for e in read_trace(path)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
    loader = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                    if e.get("name", "").startswith("enumerate(DataLoader)#") and e["name"].endswith(".__next__"))
    merged = []
    for a, b in loader:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [sum(max(0, min(b, e) - max(a, s)) for a, b in merged) for s, e in steps]


def tb_dataloader_per_step(path, cache_dir):
    profile = RunProfileData.parse("worker0", None, str(path), str(cache_dir))
    return [step.costs[ProfileRole.DataLoader] for step in profile.steps_costs]


def test_plugin_loader_finds_each_window_as_a_run(tmp_path):
    monitor = data_bound_run(tmp_path, steps="3-4,10-12")
    folders = sorted(os.listdir(monitor.trace_dir))
    assert folders == ["epoch=0000-batch=000003-000004", "epoch=0000-batch=000010-000012"]
    for folder in folders:
        run = RunLoader(folder, os.path.join(monitor.trace_dir, folder), tb_io.Cache(str(tmp_path / "cache"))).load()
        (worker,) = run.get_workers("Overview")
        (profile,) = run.get_profiles(worker=worker)
        steps = [row[0] for row in profile.overview["steps"]["rows"]]
        assert steps == (["3", "4"] if folder.startswith("epoch=0000-batch=000003-") else ["10", "11", "12"])


def test_plugin_overview_counts_dataloader_time(tmp_path):
    data_bound_run(tmp_path, steps="5-7")
    (path,) = trace_files(tmp_path)
    per_step, counted = tb_dataloader_per_step(path, tmp_path), loader_in_steps(path)
    assert len(per_step) == len(counted) == 3 and min(counted) > 1000  # a 2 ms sleep a sample, 2 a batch
    assert per_step == pytest.approx(counted, abs=1)
    raw = tmp_path / "raw.json"
    # the same trace without our re-labelling shows the plugin's bug: DataLoader = 0
    trace = read_trace(path)
    for e in trace["traceEvents"]:
        if e.get("name", "").startswith("enumerate(DataLoader)#"):
            e["cat"] = "user_annotation"
    raw.write_text(json.dumps(trace))
    assert sum(tb_dataloader_per_step(raw, tmp_path)) == 0


def test_rewrite_of_a_real_gpu_trace_matches_patched_plugin_and_keeps_hta(tmp_path, gpu_traces, reference):
    raw = tmp_path / "control.raw.json"
    with gzip.open(gpu_traces / CONTROL, "rb") as f:
        raw.write_bytes(f.read())
    final = tmp_path / "run" / "worker0.1.pt.trace.json.gz"
    final.parent.mkdir()
    finalize_trace(str(raw), str(final), {"test": True})
    expected = [step["DataLoader"] for step in reference[CONTROL]["tb_patched"]["per_step"]]
    assert tb_dataloader_per_step(final, tmp_path) == expected
    assert sum(tb_dataloader_per_step(gpu_traces / CONTROL, tmp_path)) == 0  # the released plugin

    from hta.trace_analysis import TraceAnalysis

    # HTA reads the rewrite as it read the original: its breakdown of the original is the reference's
    (after,) = TraceAnalysis(trace_dir=str(final.parent)).get_temporal_breakdown(visualize=False).to_dict("records")
    ref = reference[CONTROL]["hta_temporal"]
    assert [after[f"{kind}_time(us)"] for kind in ("idle", "compute", "non_compute")] == \
        [ref["idle_us"], ref["compute_us"], ref["non_compute_us"]]


def test_hta_reads_the_rank_of_a_single_process_trace(tmp_path, caplog):
    monitor = data_bound_run(tmp_path, steps="3-4")
    (path,) = monitor.traces
    assert read_trace(path)["distributedInfo"] == {"rank": 0, "world_size": 1}  # kineto writes none here
    from hta.trace_analysis import TraceAnalysis

    def rank_warnings(folder):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hta"):
            assert list(TraceAnalysis(trace_dir=str(folder)).t.traces) == [0]
        return [r.getMessage() for r in caplog.records if "distributedInfo" in r.getMessage()]  # kineto#974

    assert rank_warnings(os.path.dirname(path)) == []
    without = read_trace(path)
    del without["distributedInfo"], without["profkit"]["rank"]  # as we wrote traces before
    (tmp_path / "without").mkdir()
    with gzip.open(tmp_path / "without" / os.path.basename(path), "wt") as f:
        json.dump(without, f)
    assert len(rank_warnings(tmp_path / "without")) == 1  # what HTA said of our traces before


def test_tensorboard_server_lists_runs_and_serves_overview(tmp_path, tensorboard_server):
    monitor = data_bound_run(tmp_path, steps="3-5,12-14")
    server = tensorboard_server(os.path.dirname(monitor.trace_dir))
    top = os.path.basename(monitor.trace_dir)  # no logger: the run's own folder, profiler/run=...
    expected = {f"{top}/epoch=0000-batch=000003-000005", f"{top}/epoch=0000-batch=000012-000014"}
    runs = server.wait_for(lambda: expected <= set(server.get("runs")["runs"]) and server.get("runs"))
    assert expected <= set(runs["runs"])
    run = f"{top}/epoch=0000-batch=000003-000005"
    views = server.wait_for(lambda: server.get("views", run=run))
    assert "Overview" in views
    (worker,) = server.get("workers", run=run, view="Overview")
    (span,) = server.get("spans", run=run, worker=worker)
    overview = server.get("overview", run=run, worker=worker, span=span)
    rows = overview["steps"]["rows"]
    assert [r[0] for r in rows] == ["3", "4", "5"]
    columns = [c.get("name") for c in overview["steps"]["columns"]]
    dataloader = [r[columns.index("DataLoader")] for r in rows]
    (path,) = [p for p in trace_files(tmp_path) if "epoch=0000-batch=000003-000005" in p]
    assert dataloader == pytest.approx(loader_in_steps(path), abs=1)  # what the Overview shows: the trace's
    assert server.proc.poll() is None
