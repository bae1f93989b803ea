"""Window figures from real GPU traces equal the reference numbers (host_step in reference.json)."""

import gzip
import json

import numpy as np
import pytest

from conftest import SHARED_TRACES
from lightning_profkit import intervals
from lightning_profkit.operator_times import operator_times
from lightning_profkit.step_breakdown import COLUMNS, step_breakdown
from lightning_profkit.temporal_breakdown import temporal_breakdown
from lightning_profkit.trace_columns import columns
from lightning_profkit.trace_events import from_dicts
from lightning_profkit.trace_events import read_trace
from lightning_profkit.trace_metrics import window_figures

TRACES = sorted(json.loads((SHARED_TRACES / "reference.json").read_text())) if SHARED_TRACES.is_dir() else []
FIELDS = (
    "n_host_steps", "host_step_time_us", "dataloader_us_in_steps", "dataloader_frac", "gpu_busy_frac_window",
    "gpu_idle_frac_window", "blocking_sync_calls_us_in_steps", "blocking_sync_frac",
)


def as_pairs(u):
    return [(float(s), float(e)) for s, e in zip(*u)]


def test_interval_math():
    u = intervals.union([5, 0, 1, 7], [7, 2, 3, 8])
    assert as_pairs(u) == [(0, 3), (5, 8)]
    assert intervals.length(u) == 6
    assert intervals.overlap(u, intervals.union([2], [6])) == 2
    bounds = np.array([-1, 0, 2.5, 3, 5, 7.9, 8])  # u's ends among them
    assert intervals.covered(u, bounds).tolist() == [False, True, True, False, True, True]
    assert intervals.covered(intervals.EMPTY, bounds).tolist() == [False] * 6
    assert as_pairs(intervals.union([], [])) == [] and intervals.overlap(intervals.EMPTY, u) == 0


@pytest.mark.parametrize("name", TRACES)
def test_host_step_figures_match_reference(name, shared_traces, reference):
    with gzip.open(shared_traces / name, "rt") as f:
        events = from_dicts(json.load(f)["traceEvents"])  # the writer's path: parsed dicts
    got, want = window_figures(columns(events)), reference[name]["host_step"]
    for field in FIELDS:
        if field in want:
            assert got[field] == pytest.approx(want[field], rel=1e-6, abs=1e-9), field
        else:
            assert field not in got, field  # absent, not zero
    if "blocking_sync_us_by_name" in want:
        assert got["blocking_sync_us_by_name"] == pytest.approx(want["blocking_sync_us_by_name"], rel=1e-6)
    assert got["peak_memory_bytes"] == want["peak_memory_bytes"]


@pytest.mark.parametrize("name", TRACES)
def test_step_breakdown_matches_patched_plugin(name, shared_traces, reference):
    """torch-tb-profiler's Overview with kineto's later fixes (tb_patched), per step, within 1 µs."""
    events = read_trace(str(shared_traces / name)).traceEvents  # the command's path: typed decoding
    got, want = step_breakdown(columns(events)), reference[name]["tb_patched"]
    assert len(got["per_step"]) == want["n_steps"] == len(want["per_step"])
    for mine, theirs in zip(got["per_step"], want["per_step"]):
        for column in COLUMNS:
            assert mine[column] == pytest.approx(theirs[column], abs=1.0), column
    assert got["dataloader_frac"] == pytest.approx(want["dataloader_frac"], rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("name", TRACES)
def test_temporal_breakdown_matches_hta(name, shared_traces, reference):
    """HolisticTraceAnalysis's temporal breakdown (hta_temporal), within 1 µs; absent without GPU activity."""
    events = read_trace(str(shared_traces / name)).traceEvents
    got, want = temporal_breakdown(columns(events)), reference[name]["hta_temporal"]
    if want is None:
        assert got is None
        return
    for key in ("span_us", "idle_us", "compute_us", "non_compute_us"):
        assert got[key] == pytest.approx(want[key], abs=1.0), key


def test_operator_self_and_total_time():
    ev = lambda name, ts, dur, tid=1, cat="cpu_op": {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid}  # noqa: E731
    events = [
        ev("outer", 0, 100), ev("inner", 10, 30), ev("leaf", 15, 10), ev("inner", 50, 20),
        ev("cudaLaunchKernel", 55, 5, cat="cuda_runtime"), ev("outer", 0, 40, tid=2),
        ev("k", 60, 7, cat="kernel"), ev("k", 70, 3, cat="kernel"),
    ]
    got = operator_times(columns(from_dicts(events)))
    assert got["cpu"]["outer"] == {"calls": 2, "total_us": 140, "self_us": 50 + 40}
    assert got["cpu"]["inner"] == {"calls": 2, "total_us": 50, "self_us": 20 + 15}
    assert got["cpu"]["leaf"]["self_us"] == 10 and got["cpu"]["cudaLaunchKernel"]["self_us"] == 5
    assert got["device"]["k"] == {"calls": 2, "total_us": 10}
