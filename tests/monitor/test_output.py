"""TraceOutput, its writer thread and retention, without a Trainer: real profiler results of a few CPU steps go in;
whole traces under their final names, their figures, and only the newest windows come out, each logged on rank zero
at its step, its JSON a step kept for the size estimate of the next windows of its kind; what to say of a window cut
short or past the budget."""

import gzip
import json
import os
import socket
import time

import pytest
import torch
from conftest import leftovers, options, read_trace, recorded

from lightning_profkit.monitor.writing.output import (WINDOW_FOLDER, TraceOutput, check_trace_dir, cut_message,
                                                      over_message, validation_window_name, window_name, worker_name)


def cpu_of_this_process_and_its_children():
    import resource

    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


def test_windows_are_written_whole_with_their_figures_and_retention_keeps_the_newest(tmp_path):
    errors = []
    before = cpu_of_this_process_and_its_children()
    output = TraceOutput(str(tmp_path), 0, 1, options(keep_last_windows=1), lambda message, key: errors.append(message))
    first = output.submit(recorded(3), 0, 0, 2, 0)
    second = output.submit(recorded(3), 1, 0, 2, 0, notes={"estimated_mb": 0.1})
    assert os.path.basename(os.path.dirname(first)) == window_name(0, 0, 2) == "epoch=0000-batch=000000-000002"
    assert os.path.basename(first).startswith(worker_name(0) + ".") and first.endswith(".pt.trace.json.gz")
    traces, written, deadline = [], [], time.monotonic() + 120
    while len(written) < 2 and time.monotonic() < deadline:  # written off this thread: looked for as the fit does
        done, removed, _ = output.take()
        written += done
        traces = [p for p in traces + [w.path for w in done] if p not in removed]  # as the fit lists them
        time.sleep(0.01)
    assert output.helper_cpu_s > 0  # the finalizing process's CPU and the writer thread's, while the fit runs
    assert output.close(timeout=120) == ([], []) and errors == []
    # at most what the OS counted for this process's threads and its reaped children (the finalizing process)
    assert output.helper_cpu_s <= cpu_of_this_process_and_its_children() - before
    assert [w.path for w in written] == [first, second] and traces == [second]  # the older window was let go
    assert all(w.figures.steps == 3 and w.json_bytes for w in written)
    assert not os.path.exists(os.path.dirname(first)) and os.path.isfile(second)
    with gzip.open(second) as f:
        trace = json.load(f)
    assert trace["profkit"]["epoch"] == 1 and trace["profkit"]["estimated_mb"] == 0.1
    assert trace["distributedInfo"] == {"rank": 0, "world_size": 1}
    assert leftovers(tmp_path) == []


def test_retention_deletes_only_our_files(tmp_path):
    keep = TraceOutput(str(tmp_path), 0, 1, options(keep_last_windows=2), lambda message, key: None)
    paths = []
    for i in range(4):
        folder = tmp_path / f"step={i:06d}-epoch=0"
        folder.mkdir()
        (folder / "other_rank1.pt.trace.json.gz").write_text("x") if i == 0 else None
        path = folder / "host_rank0.1.pt.trace.json.gz"
        path.write_text("x")
        paths.append(str(path))
        keep._on_written({"path": str(path)})  # as the writer thread tells it
    assert sorted(os.listdir(tmp_path)) == ["step=000000-epoch=0", "step=000002-epoch=0", "step=000003-epoch=0"]
    assert os.listdir(tmp_path / "step=000000-epoch=0") == ["other_rank1.pt.trace.json.gz"]  # not ours: kept


def test_window_folders_are_told_from_lightnings_checkpoints():
    assert WINDOW_FOLDER.match(window_name(1, 11, 13)) and WINDOW_FOLDER.match(validation_window_name(0, 39, 2, 4))
    assert WINDOW_FOLDER.match("step=000051-000053") and not WINDOW_FOLDER.match("epoch=3-step=400.ckpt")


def test_a_window_that_cannot_be_written_is_reported_and_nothing_is_left(tmp_path):
    (tmp_path / "traces").write_text("a file where the folder should be")
    errors = []
    output = TraceOutput(str(tmp_path / "traces"), 0, 1, options(), lambda message, key: errors.append(message))
    output.submit(recorded(2), 0, 0, 1, 0)
    assert output.close(timeout=120) == ([], [])
    assert output.take() == ([], set(), []) and len(errors) == 1 and str(tmp_path / "traces") in errors[0]
    assert leftovers(tmp_path) == []


def test_the_setup_probe_never_writes_through_a_link(tmp_path):
    """A link pre-made where the setup probe file of this process used to be written (``.profkit-probe-<pid>``, a
    name known in advance) pointed at a file of the victim's, which the probe truncated to 0 bytes."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / f".profkit-probe-{os.getpid()}").symlink_to(victim)
    check_trace_dir(str(shared / "run" / "profiler"))
    assert victim.read_text() == "keep me" and sorted(os.listdir(shared)) == [f".profkit-probe-{os.getpid()}"]


def test_a_store_that_never_answers_fails_the_setup_probe_in_its_time(tmp_path, monkeypatch):
    """A real socket on 127.0.0.1 that takes the store's connection and never answers: the setup's probe gives up
    after its time, naming the URL, and its finalizing process is gone."""
    from lightning_profkit.monitor.writing import output
    from lightning_profkit.store import StoreError

    pytest.importorskip("s3fs")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    monkeypatch.setattr(output, "PROBE_TIMEOUT_S", 3.0)
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{silent.getsockname()[1]}"}}
    start = time.monotonic()
    try:
        with pytest.raises(StoreError, match=r"^s3://quiet/run: no answer from the store within 3 s$"):
            output.check_trace_dir("s3://quiet/run", options)
    finally:
        silent.close()
    assert time.monotonic() - start < 30
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _finalizer_of_ours(int(p))]


def _finalizer_of_ours(pid):
    """A finalizing process this process started (other children, a pool's forkserver, are not asked about)."""
    from lightning_profkit.monitor.writing.process import CHILD

    try:
        with open(f"/proc/{pid}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return parent == os.getpid() and CHILD.encode() in f.read()
    except (OSError, ValueError):
        return False


def traces(tmp_path, rank=0, **arguments):
    told = []
    return TraceOutput(str(tmp_path), rank, rank + 1, options(**arguments), lambda message, key: told.append(key)), told


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


def taken(output, windows):
    written, logged, deadline = [], [], time.monotonic() + 120
    while len(written) < windows and time.monotonic() < deadline:  # written off this thread
        done, _, metrics = output.take()
        written += done
        logged += metrics
        time.sleep(0.01)
    return written, logged


def test_written_windows_are_handed_back_and_logged_at_their_step(tmp_path):
    output, told = traces(tmp_path)
    output.submit(recorded_from(5, 3), 0, 5, 7, 0, {"log_step": 9})
    (window,), logged = taken(output, 1)
    assert output.close(60.0) == ([], []) and told == []
    assert (window.first, window.last, window.log_step) == (5, 7, 9)
    steps = [e["dur"] for e in read_trace(window.path)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert [step for step, _ in logged] == [9] and len(steps) == 3  # the mean of the trace's own steps, in ms
    assert logged[0][1]["profkit/window/host_step_ms"] == pytest.approx(sum(steps) / 3 / 1000, rel=1e-5)  # µs to 3 places


def test_other_ranks_list_their_windows_and_log_nothing(tmp_path):
    output, told = traces(tmp_path, rank=1)
    output.submit(recorded(3), 0, 0, 2, 0, {"log_step": 2})
    written, logged = taken(output, 1)
    assert logged == [] and len(written) == 1
    assert output.close(60.0) == ([], [])


def json_bytes(path):
    with gzip.open(path, "rb") as f:
        return len(f.read())


def test_each_kind_of_window_keeps_the_json_a_step_of_its_latest_written_window(tmp_path):
    output, said = traces(tmp_path)
    output.submit(recorded_from(5, 3), 0, 5, 7, 0, {"log_step": 7})
    (training,), _ = taken(output, 1)
    output.submit(recorded_from(1, 2), 0, 1, 2, 0, {"log_step": 7}, validation_after=7)  # batches 1-2
    (validation,), _ = taken(output, 1)
    assert output.close(60.0) == ([], []) and said == []  # under the default max_trace_mb
    assert (training.steps, validation.steps, validation.validation) == (3, 2, True)
    for window in (training, validation):  # the profiler's JSON: the file's less the few hundred bytes of our keys
        assert 0 < json_bytes(window.path) - window.json_bytes < 500
    assert output.bytes_per_step == {False: training.json_bytes / 3, True: validation.json_bytes / 2}


def test_a_written_window_past_the_budget_is_said(tmp_path):
    said = []
    output = TraceOutput(str(tmp_path), 0, 1, options(max_trace_mb=0.001, record_shapes=True),
                         lambda message, key: said.append((key, message)))
    output.submit(recorded_from(5, 3), 0, 5, 7, 0, {"log_step": 7})
    (window,), _ = taken(output, 1)
    assert output.close(60.0) == ([], [])
    assert said == [("max_trace_mb_over", over_message(output.options, window))]
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
