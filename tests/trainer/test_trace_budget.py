"""max_trace_mb: the first window of each kind records all its steps (nothing estimates it) and is said once if its
trace passed the budget; the next ones end at the step that would take them past it by the JSON a step of the latest
written window of their kind, the trace valid and marked so."""

import gzip
import math
import os
import warnings

import pytest
import torch
from torch.utils.data import DataLoader
from conftest import SleepDataset, TinyModel, WaitForTraces, make_trainer, read_trace

from lightning_profkit import PerformanceMonitor


class DeepModel(TinyModel):
    """50 layers: about 0.66 MB of trace JSON a training step, 0.14 MB a validation batch (forward only)."""

    def __init__(self):
        super().__init__(SleepDataset(60))  # 30 steps an epoch
        self.layer = torch.nn.Sequential(torch.nn.Linear(8, 64), *[torch.nn.Linear(64, 64) for _ in range(49)],
                                         torch.nn.Linear(64, 1))

    def val_dataloader(self):
        return DataLoader(SleepDataset(16), batch_size=2)


def fit(tmp_path, epochs=2, validate=False, **options):
    monitor = PerformanceMonitor(active=5, alert_threshold=None, **options)  # steps 11-15 of each epoch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # epoch 0's windows are written (and taken at the next step) before epoch 1's open
        trainer = make_trainer(tmp_path, [monitor, WaitForTraces(monitor, 1)], max_epochs=epochs,
                               limit_val_batches=1.0 if validate else 0)
        trainer.fit(DeepModel())
    assert trainer.global_step == 30 * epochs
    traces = sorted(monitor.traces)  # in step order, each validation window after the training step it followed
    said = [str(w.message) for w in caught if "max_trace_mb" in str(w.message)]
    return traces, said


def steps_in(trace):
    return sorted(int(e["name"].split("#")[1]) for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))


def json_bytes(path):
    with gzip.open(path, "rb") as f:
        return len(f.read())


def kept_by(limit_mb, per_step, planned):
    """Steps a window records under the budget: up to the one that would take its estimate past it, one at least."""
    return max(1, min(planned, math.floor(limit_mb * 1e6 / per_step)))


def check_estimated_and_cut(path, first, planned, per_step, limit_mb):
    """The trace at ``path``, steps ``first`` on (``planned`` of them planned): recorded as the budget allows, with
    the estimate and the cut in its ``profkit`` key; returns the last step recorded."""
    trace = read_trace(path)
    kept = kept_by(limit_mb, per_step, planned)
    assert steps_in(trace) == list(range(first, first + kept)), (steps_in(trace), per_step)
    note = trace["profkit"]
    assert note["estimated_mb"] == pytest.approx(per_step * kept / 1e6, abs=0.0011)  # rounded to 3 places
    cut = {"reason": "max_trace_mb", "max_trace_mb": limit_mb, "planned_steps": [first, first + planned - 1]}
    assert note.get("cut") == (cut if kept < planned else None)
    return first + kept - 1


def test_the_first_window_of_each_kind_records_all_its_steps_and_the_next_end_by_its_json_a_step(tmp_path):
    traces, said = fit(tmp_path, max_trace_mb=0.5, validation_batches="0-3", validate=True)
    train0, val0, train1, val1 = traces
    assert "val-batch" in val0 and "val-batch" in val1, traces
    for path, steps in ((train0, [11, 12, 13, 14, 15]), (val0, [0, 1, 2, 3])):  # none estimated, none cut
        trace = read_trace(path)
        assert steps_in(trace) == steps and "estimated_mb" not in trace["profkit"] and "cut" not in trace["profkit"]
    per_step, per_batch = json_bytes(train0) / 5, json_bytes(val0) / 4  # each kind from its own: 0.66 and 0.14 MB
    last = check_estimated_and_cut(train1, 41, 5, per_step, 0.5)
    named = "epoch=0001-batch=000011" + (f"-{last - 30:06d}" if last > 41 else "")  # 30 batches an epoch
    assert last < 45 and os.path.basename(os.path.dirname(train1)) == named
    check_estimated_and_cut(val1, 0, 4, per_batch, 0.5)
    over, cut = said  # once each: the first trace past the budget, the first window cut short
    assert (f": a window's trace passed max_trace_mb=0.5: {json_bytes(train0) / 1e6:.1f} MB of JSON for 5 steps\n"
            in over and f"estimated at {per_step / 1e6:.2f} MB a step (over max_trace_mb: one step each)" in over), over
    assert "record fewer steps (active=5" in over and "a window ended early" in cut, said


def test_the_estimate_is_the_json_a_step_of_the_latest_window_times_the_steps_recorded(tmp_path):
    traces, said = fit(tmp_path, max_trace_mb=None, record_shapes=True)
    assert said == [] and len(traces) == 2
    first, second = (read_trace(path)["profkit"] for path in traces)
    assert "estimated_mb" not in first and "cut" not in first and "cut" not in second
    assert second["estimated_mb"] == pytest.approx(json_bytes(traces[0]) / 5 * 5 / 1e6, abs=0.0011)
    assert 0.9 < json_bytes(traces[1]) / 1e6 / second["estimated_mb"] < 1.1  # the same steps: about as large


def test_a_cut_window_that_would_run_to_the_epochs_end_leaves_the_next_epoch_its_windows(tmp_path):
    # epoch 1's window opens at step 34 (its warm-up), after epoch 0's is taken at one of the steps before
    traces, said = fit(tmp_path, epochs=3, max_trace_mb=0.5, step_filter=lambda step: 25 <= step <= 26 or step >= 35)
    assert len(traces) == 3 and steps_in(read_trace(traces[0])) == [25, 26] and len(said) == 2, (traces, said)
    per_step = json_bytes(traces[0]) / 2  # 0.66 MB: the next windows keep one step each
    for path, first in zip(traces[1:], (35, 60)):  # the rest of epoch 1 opens no window; epoch 2 opens its own
        note = read_trace(path)["profkit"]
        assert steps_in(read_trace(path)) == [first] and note["cut"]["reason"] == "max_trace_mb"
    assert read_trace(traces[1])["profkit"]["estimated_mb"] == pytest.approx(per_step / 1e6, abs=0.0011)
