"""TraceOutput, its writer thread, finalizing process and retention, without a Trainer: real profiler results of
a few CPU steps go in; whole traces under their final names, their figures, and only the newest windows come out."""

import gzip
import json
import os
import subprocess
import sys
import time

import torch
from conftest import leftovers

from lightning_profkit.monitor.writing.output import TraceOutput, check_trace_dir, window_name, worker_name
from lightning_profkit.machine import cpu_seconds_of
from lightning_profkit.monitor.writing.process import child_env


def recorded(steps):
    """The kineto results of a real CPU session recording ``steps`` steps (``ProfilerStep#0`` on)."""
    got = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=0, warmup=0, active=steps, repeat=1),
                                on_trace_ready=lambda prof: got.append(prof.profiler.kineto_results)) as prof:
        for _ in range(steps):
            torch.ones(64, 64).matmul(torch.ones(64, 64))
            prof.step()
    return got[0]


def test_windows_are_written_whole_with_their_figures_and_retention_keeps_the_newest(tmp_path):
    errors = []
    output = TraceOutput(str(tmp_path), 0, 1, keep_last=1, on_error=lambda message, key: errors.append(message))
    first = output.submit(recorded(3), 0, 0, 2, 0)
    second = output.submit(recorded(3), 1, 0, 2, 0, notes={"estimated_mb": 0.1})
    assert os.path.basename(os.path.dirname(first)) == window_name(0, 0, 2) == "step=000000-000002-epoch=0"
    assert os.path.basename(first).startswith(worker_name(0) + ".") and first.endswith(".pt.trace.json.gz")
    traces, written, deadline = [], [], time.monotonic() + 120
    while len(written) < 2 and time.monotonic() < deadline:  # written off this thread: looked for as the fit does
        written += output.take_written(traces)
        time.sleep(0.01)
    assert output.helper_cpu_s > 0  # the finalizing process's CPU and the writer thread's, while the fit runs
    assert output.close(timeout=120) == ([], []) and errors == []
    assert [w.path for w in written] == [first, second] and traces == [second]  # the older window was let go
    assert all(w.figures.steps == 3 and w.json_bytes for w in written)
    assert not os.path.exists(os.path.dirname(first)) and os.path.isfile(second)
    with gzip.open(second) as f:
        trace = json.load(f)
    assert trace["profkit"]["epoch"] == 1 and trace["profkit"]["estimated_mb"] == 0.1
    assert trace["distributedInfo"] == {"rank": 0, "world_size": 1}
    assert leftovers(tmp_path) == []


def test_a_window_that_cannot_be_written_is_reported_and_nothing_is_left(tmp_path):
    (tmp_path / "traces").write_text("a file where the folder should be")
    errors = []
    output = TraceOutput(str(tmp_path / "traces"), 0, 1, None, lambda message, key: errors.append(message))
    output.submit(recorded(2), 0, 0, 1, 0)
    assert output.close(timeout=120) == ([], [])
    assert output.take_written([]) == [] and len(errors) == 1 and str(tmp_path / "traces") in errors[0]
    assert leftovers(tmp_path) == []


def test_the_finalizing_process_finds_this_package_wherever_it_is(tmp_path):
    """Its PYTHONPATH leads to this checkout's package, also where the package is not installed."""
    first = child_env()["PYTHONPATH"].split(os.pathsep)[0]
    assert os.path.isfile(os.path.join(first, "lightning_profkit", "monitor", "writing", "child.py"))
    done = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path[:0] = sys.argv[1:]; import lightning_profkit.monitor.writing.child as c; print(c.__file__)", first],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(first), done.stderr


def test_a_running_processs_cpu_is_read_from_the_os_and_matches_its_own_and_the_reaped_figure():
    """What ``helper_cpu_s`` reads of the finalizing process between its replies: a child that burns 0.3 s of
    CPU is read while it still runs, between what it says it used and what the kernel reports once it is reaped."""
    burn = ("import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
            "print(time.process_time(), flush=True)\nsys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    said = float(proc.stdout.readline())
    live = cpu_seconds_of(proc.pid)
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    reaped = usage.ru_utime + usage.ru_stime
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert said >= 0.3 and said - 2 * tick <= live <= reaped + tick, (said, live, reaped)  # user and system: a tick each
    assert cpu_seconds_of(proc.pid) is None  # gone


def test_a_trace_that_lacks_what_its_window_recorded_is_marked_and_shown(tmp_path):
    """A raw dump whose window recorded steps 10-12 but holds ProfilerStep#10 and #12 only, with an event left
    open, from a CUDA window without GPU activity: the finalizing child marks the trace with each problem (the
    steps counted over its raw events), and ``profkit summary`` shows them."""
    from lightning_profkit.monitor.writing.child import finalize_trace

    events = [{"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": 100 * n, "dur": 90}
              for n in (10, 12)] + [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1005}]
    raw = tmp_path / "w" / ".t.raw"
    raw.parent.mkdir()
    raw.write_text(json.dumps({"traceEvents": events}))
    missing = [n for n in range(10, 13) if not any(e["name"] == f"ProfilerStep#{n}" for e in events)]
    final = tmp_path / "w" / "h_rank0.1.pt.trace.json.gz"
    meta = {"epoch": 0, "steps": [10, 12], "batch_idx": [10, 12], "rank": 0, "world_size": 1, "gpu": True}
    done = finalize_trace(str(raw), str(final), meta)
    with gzip.open(final, "rt") as f:
        marked = json.load(f)["profkit"]["problems"]
    assert marked == done["meta"]["problems"] == [
        f"{len(missing)} of the 3 recorded steps have no ProfilerStep span in the trace (11)",
        "1 complete event(s) have no duration",
        "no GPU activity although CUDA was profiled on a CUDA model (CUPTI may have failed to attach; "
        "see pytorch/pytorch#192021)"]
    shown = subprocess.run([os.path.join(os.path.dirname(sys.executable), "profkit"), "summary", str(final)],
                           capture_output=True, text=True, timeout=120).stdout
    assert all(f"incomplete trace: {p}" in shown for p in marked), shown
    whole = dict(meta, gpu=False, steps=[10, 10], batch_idx=[10, 10])
    raw.write_text(json.dumps({"traceEvents": events[:1]}))
    assert "problems" not in finalize_trace(str(raw), str(final), whole)["meta"]


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


def test_a_companion_that_cannot_be_written_never_costs_the_trace(tmp_path):
    """The finalizing process writes the sidecar beside the trace (the events table waits for a first query); where it
    cannot be written (here its name is taken by a folder) the trace stays and why is returned, for one warning."""
    from lightning_profkit.monitor.writing.child import companions
    from lightning_profkit.trace.load import load
    from lightning_profkit.trace.summary import summarize_trace

    done = []
    output = TraceOutput(str(tmp_path), 0, 1, keep_last=0, on_error=lambda message, key: done.append(message))
    path = output.submit(recorded(2), 0, 0, 1, 0)
    written, deadline = [], time.monotonic() + 120
    while not written and time.monotonic() < deadline:
        written += output.take_written([])
        time.sleep(0.01)
    output.close(timeout=120)
    assert sorted(os.listdir(os.path.dirname(path))) == sorted(os.path.basename(p) for p in [
        path, path + ".profkit"])
    os.remove(path + ".profkit")
    os.mkdir(path + ".profkit")
    why = companions(path, summarize_trace(path, load(path)))
    assert why.startswith("IsADirectoryError") and os.path.isfile(path)
    assert done == []
