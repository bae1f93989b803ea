"""Window figures from real GPU traces equal the reference numbers (host_step in reference.json)."""

import gzip
import json

import pytest

from conftest import SHARED_TRACES
from lightning_profkit.trace_metrics import intersect, union, window_figures

TRACES = sorted(json.loads((SHARED_TRACES / "reference.json").read_text())) if SHARED_TRACES.is_dir() else []
FIELDS = (
    "n_host_steps", "host_step_time_us", "dataloader_us_in_steps", "dataloader_frac", "gpu_busy_frac_window",
    "gpu_idle_frac_window", "blocking_sync_calls_us_in_steps", "blocking_sync_frac",
)


def test_interval_math():
    assert union([(5, 7), (0, 2), (1, 3), (7, 8)]) == [(0, 3), (5, 8)]
    assert intersect([(0, 3), (5, 8)], [(2, 6)]) == [(2, 3), (5, 6)]


@pytest.mark.parametrize("name", TRACES)
def test_host_step_figures_match_reference(name, shared_traces, reference):
    with gzip.open(shared_traces / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    got, want = window_figures(events), reference[name]["host_step"]
    for field in FIELDS:
        if field in want:
            assert got[field] == pytest.approx(want[field], rel=1e-6, abs=1e-9), field
        else:
            assert field not in got, field  # absent, not zero
    if "blocking_sync_us_by_name" in want:
        assert got["blocking_sync_us_by_name"] == pytest.approx(want["blocking_sync_us_by_name"], rel=1e-6)
    assert got["peak_memory_bytes"] == want["peak_memory_bytes"]
