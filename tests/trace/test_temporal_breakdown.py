"""The temporal breakdown against HolisticTraceAnalysis's, from real GPU traces."""

import json

import pytest
from conftest import GPU_TRACES

from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.load import decode_json
from lightning_profkit.trace.file import read_json
from lightning_profkit.trace.temporal_breakdown import temporal_breakdown


TRACES = sorted(json.loads((GPU_TRACES / "reference.json").read_text()))


@pytest.mark.parametrize("name", TRACES)
def test_temporal_breakdown_matches_hta(name, gpu_traces, reference):
    """HolisticTraceAnalysis's temporal breakdown (hta_temporal), within 1 µs; absent without GPU activity."""
    path = str(gpu_traces / name)
    events = decode_json(path, read_json(path)).traceEvents  # typed decoding
    got, want = temporal_breakdown(columns(events)), reference[name]["hta_temporal"]
    if want is None:
        assert got is None
        return
    for key in ("span_us", "idle_us", "compute_us", "non_compute_us"):
        assert got[key] == pytest.approx(want[key], abs=1.0), key
