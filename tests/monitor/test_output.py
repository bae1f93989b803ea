"""TraceOutput, its writer thread and retention, without a Trainer: real profiler results of a few CPU steps go in;
whole traces under their final names, their figures, and only the newest windows come out."""

import gzip
import json
import os
import socket
import time

import pytest
from conftest import leftovers, recorded

from lightning_profkit.monitor.writing.output import (WINDOW_FOLDER, TraceOutput, check_trace_dir, validation_window_name,
                                                      window_name, worker_name)


def cpu_of_this_process_and_its_children():
    import resource

    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


def test_windows_are_written_whole_with_their_figures_and_retention_keeps_the_newest(tmp_path):
    errors = []
    before = cpu_of_this_process_and_its_children()
    output = TraceOutput(str(tmp_path), 0, 1, keep_last=1, on_error=lambda message, key: errors.append(message))
    first = output.submit(recorded(3), 0, 0, 2, 0)
    second = output.submit(recorded(3), 1, 0, 2, 0, notes={"estimated_mb": 0.1})
    assert os.path.basename(os.path.dirname(first)) == window_name(0, 0, 2) == "epoch=0000-batch=000000-000002"
    assert os.path.basename(first).startswith(worker_name(0) + ".") and first.endswith(".pt.trace.json.gz")
    traces, written, deadline = [], [], time.monotonic() + 120
    while len(written) < 2 and time.monotonic() < deadline:  # written off this thread: looked for as the fit does
        done, removed = output.take_written()
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


def test_window_folders_are_told_from_lightnings_checkpoints():
    assert WINDOW_FOLDER.match(window_name(1, 11, 13)) and WINDOW_FOLDER.match(validation_window_name(0, 39, 2, 4))
    assert WINDOW_FOLDER.match("step=000051-000053") and not WINDOW_FOLDER.match("epoch=3-step=400.ckpt")


def test_a_window_that_cannot_be_written_is_reported_and_nothing_is_left(tmp_path):
    (tmp_path / "traces").write_text("a file where the folder should be")
    errors = []
    output = TraceOutput(str(tmp_path / "traces"), 0, 1, None, lambda message, key: errors.append(message))
    output.submit(recorded(2), 0, 0, 1, 0)
    assert output.close(timeout=120) == ([], [])
    assert output.take_written() == ([], set()) and len(errors) == 1 and str(tmp_path / "traces") in errors[0]
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
