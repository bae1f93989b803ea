"""The step breakdown against torch-tb-profiler's Overview with kineto's fixes, from real GPU traces."""

import json

import pytest
from conftest import GPU_TRACES

from lightning_profkit.trace.columns import columns
from lightning_profkit.trace.load import decode_json
from lightning_profkit.trace.file import read_json
from lightning_profkit.trace.step_breakdown import step_breakdown
from lightning_profkit.trace.vocabulary import STEP_COLUMNS


TRACES = sorted(json.loads((GPU_TRACES / "reference.json").read_text()))


@pytest.mark.parametrize("name", TRACES)
def test_step_breakdown_matches_patched_plugin(name, gpu_traces, reference):
    """torch-tb-profiler's Overview with kineto's later fixes (tb_patched), per step, within 1 µs."""
    path = str(gpu_traces / name)
    events = decode_json(path, read_json(path)).traceEvents  # the command's path: typed decoding
    got, want = step_breakdown(columns(events)), reference[name]["tb_patched"]
    assert len(got["per_step"]) == want["n_steps"] == len(want["per_step"])
    for mine, theirs in zip(got["per_step"], want["per_step"]):
        for column in STEP_COLUMNS:
            assert mine[column] == pytest.approx(theirs[column], abs=1.0), column
    assert got["dataloader_frac"] == pytest.approx(want["dataloader_frac"], rel=1e-6, abs=1e-9)
