"""The windows' traces taken back in a fit: each handed back with its figures, logged on rank zero at its step, its
JSON a step kept for the size estimate of the next windows of its kind; what to say of a window cut short or past the
budget; the slowest-rank line of one process."""

import gzip
import time

import pytest
import torch

from conftest import options, read_trace, recorded
from lightning_profkit.monitor.writing.intake import TraceIntake, cut_message, over_message, slowest_rank
from lightning_profkit.monitor.writing.output import TraceOutput


def intake(tmp_path, to_user=True, **arguments):
    told = []
    output = TraceOutput(str(tmp_path), 0, 1, None, lambda message, key: told.append(key))
    return TraceIntake(output, options(**arguments), to_user, lambda message, key: told.append(key)), told


def recorded_from(first, steps):
    """The kineto results of a real CPU session recording steps ``first`` on (as a window of a fit numbers them)."""
    got, act = [], torch.profiler.ProfilerAction
    last = first + steps - 1
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], on_trace_ready=lambda p: got.append(p.profiler.kineto_results),
        schedule=lambda step: act.WARMUP if step < first else act.RECORD if step < last else act.RECORD_AND_SAVE)
    prof.step_num = first - 1
    with prof:
        for _ in range(steps + 1):
            torch.ones(64, 64).matmul(torch.ones(64, 64))
            prof.step()
    return got[0]


def taken(it, windows):
    written, logged, deadline = [], [], time.monotonic() + 120
    while len(written) < windows and time.monotonic() < deadline:  # written off this thread
        done, _, metrics = it.take()
        written += done
        logged += metrics
        time.sleep(0.01)
    return written, logged


def test_written_windows_are_handed_back_and_logged_at_their_step(tmp_path):
    it, told = intake(tmp_path)
    it.output.submit(recorded_from(5, 3), 0, 5, 7, 0, {"log_step": 9})
    (window,), logged = taken(it, 1)
    assert it.output.close(60.0) == ([], []) and told == []
    assert (window.first, window.last, window.log_step) == (5, 7, 9)
    steps = [e["dur"] for e in read_trace(window.path)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert [step for step, _ in logged] == [9] and len(steps) == 3  # the mean of the trace's own steps, in ms
    assert logged[0][1]["profkit/window/host_step_ms"] == pytest.approx(sum(steps) / 3 / 1000, rel=1e-5)  # µs to 3 places


def test_other_ranks_list_their_windows_and_log_nothing(tmp_path):
    it, told = intake(tmp_path, to_user=False)
    it.output.submit(recorded(3), 0, 0, 2, 0, {"log_step": 2})
    written, logged = taken(it, 1)
    assert logged == [] and len(written) == 1
    assert it.output.close(60.0) == ([], [])


def json_bytes(path):
    with gzip.open(path, "rb") as f:
        return len(f.read())


def test_each_kind_of_window_keeps_the_json_a_step_of_its_latest_written_window(tmp_path):
    said = []
    it = TraceIntake(TraceOutput(str(tmp_path), 0, 1, None, lambda message, key: said.append(key)), options(), True,
                     lambda message, key: said.append(key))
    it.output.submit(recorded_from(5, 3), 0, 5, 7, 0, {"log_step": 7})
    (training,), _ = taken(it, 1)
    it.output.submit(recorded_from(1, 2), 0, 1, 2, 0, {"log_step": 7}, validation_after=7)  # batches 1-2
    (validation,), _ = taken(it, 1)
    assert it.output.close(60.0) == ([], []) and said == []  # under the default max_trace_mb
    assert (training.steps, validation.steps, validation.validation) == (3, 2, True)
    for window in (training, validation):  # the profiler's JSON: the file's less the few hundred bytes of our keys
        assert 0 < json_bytes(window.path) - window.json_bytes < 500
    assert it.bytes_per_step == {False: training.json_bytes / 3, True: validation.json_bytes / 2}


def test_a_written_window_past_the_budget_is_said(tmp_path):
    said = []
    it = TraceIntake(TraceOutput(str(tmp_path), 0, 1, None, lambda message, key: said.append((key, message))),
                     options(max_trace_mb=0.001, record_shapes=True), True, lambda message, key: said.append((key, message)))
    it.output.submit(recorded_from(5, 3), 0, 5, 7, 0, {"log_step": 7})
    (window,), _ = taken(it, 1)
    assert it.output.close(60.0) == ([], [])
    assert said == [("max_trace_mb_over", over_message(it.options, window))]
    size = window.json_bytes
    assert said[0][1].split("\n  - ") == [
        f"a window's trace passed max_trace_mb=0.001: {size / 1e6:.1f} MB of JSON for 3 steps", window.path,
        "nothing estimates a fit's first window of each kind (training, validation), and a window keeps one of its "
        f"steps at least; the next windows of its kind are estimated at {size / 3e6:.2f} MB a step (over max_trace_mb: "
        "one step each)",
        "to record whole windows: raise max_trace_mb or record fewer steps (active=3, steps=)",
        "or turn off record_shapes"]


def test_a_window_cut_short_says_what_to_change():
    said = cut_message(options(max_trace_mb=50, active=20, record_shapes=True), 10, 14, 29, 61e6)
    assert said.split("\n  - ") == [
        "a window ended early: its trace would pass max_trace_mb=50",
        "batches 10-29 planned, 10-14 recorded, about 61 MB of JSON (estimated from the JSON a step of the latest "
        "written window of its kind)",
        "to record whole windows: raise max_trace_mb or record fewer steps (active=20, steps=)",
        "or turn off record_shapes"]
    assert "turn off" not in cut_message(options(max_trace_mb=50), 10, 14, 29, None)
    validation = cut_message(options(max_trace_mb=50, validation_batches="0-9"), 0, 3, 9, 61e6, validation=True)
    assert "batches 0-9 planned, 0-3 recorded" in validation and "record fewer batches (validation_batches=" in validation


def test_one_process_has_no_slowest_rank():
    assert slowest_rank(None, []) is None
