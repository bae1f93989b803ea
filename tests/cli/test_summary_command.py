"""The `profkit` command on real traces: summary, compare, JSON, terminal output and bad input; `--scheduler` on a
real Dask cluster (a LocalCluster of two worker processes, in a process the test starts and stops by its pid) reading
from a real S3-protocol server: the figures of parsing here, the sidecars put back."""

import contextlib
import gzip
import json
import os
import pty
import re
import shutil
import subprocess
import sys

import pytest
from conftest import SleepDataset, TinyModel, make_trainer, read_terminal, stop_session

from lightning_profkit import PerformanceMonitor

PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")
CONTROL = "hta/trace_diff_control/control.json.gz"
WORKERS_0 = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
WORKERS_4 = "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"


def profkit(*args, cwd=None):
    return subprocess.run([PROFKIT, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_summary_json_equals_the_reference(gpu_traces, reference):
    done = profkit("summary", "--json", gpu_traces / CONTROL)
    assert done.returncode == 0, done.stderr
    (trace,) = json.loads(done.stdout)["traces"]
    want = reference[CONTROL]
    assert [s["Kernel"] for s in trace["step_breakdown"]["per_step"]] == [s["Kernel"] for s in want["tb_patched"]["per_step"]]
    assert trace["temporal"]["idle_us"] == pytest.approx(want["hta_temporal"]["idle_us"], abs=1)
    assert trace["host"]["data_wait_share"] == pytest.approx(want["host_step"]["dataloader_frac"], rel=1e-6)
    assert trace["rank"] == 3 and trace["operators"]["cpu"][0]["self_us"] > 0


def test_summary_text_is_aligned_and_plain_off_a_tty(gpu_traces):
    done = profkit("summary", gpu_traces / WORKERS_0)
    assert done.returncode == 0 and "\033[" not in done.stdout
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("trace "))
    assert len(lines[header]) == len(lines[header + 1])  # columns line up
    assert "DataLoader" in lines[header] and "Top CPU operators by self" in done.stdout


def test_colour_only_on_a_terminal(gpu_traces):
    main, child = pty.openpty()
    proc = subprocess.Popen([PROFKIT, "summary", str(gpu_traces / WORKERS_4)], stdout=child, stderr=child)
    os.close(child)
    out = read_terminal(main)
    assert proc.wait(timeout=120) == 0
    assert b"\033[1m" in out


def test_cpu_only_and_stepless_traces_say_what_is_absent(gpu_traces):
    done = profkit("summary", gpu_traces / "hta/cpu_only")
    assert done.returncode == 0 and "no GPU activity: GPU figures absent" in done.stdout
    done = profkit("summary", "--json", gpu_traces / "hta/critical_path_alexnet")
    (trace,) = json.loads(done.stdout)["traces"]
    assert trace["host"]["steps"] == 0 and any("no ProfilerStep" in n for n in trace["notes"])
    assert trace["temporal"] is not None


def test_compare_before_and_after_a_dataloader_fix(gpu_traces):
    done = profkit("compare", "--json", gpu_traces / WORKERS_0, gpu_traces / WORKERS_4)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["figures"]
    share = rows["share/DataLoader"]
    assert share["a"] > 0.2 > share["b"] and share["diff"] == pytest.approx(share["b"] - share["a"])
    text = profkit("compare", gpu_traces / WORKERS_0, gpu_traces / WORKERS_4).stdout
    assert "B - A" in text and "share/DataLoader" in text and "-32.5 pp" in text


def test_summary_of_a_run_folder_lists_every_window(tmp_path):
    monitor = PerformanceMonitor(steps="2-3,8-9", alert_threshold=None)
    make_trainer(tmp_path, [monitor]).fit(TinyModel(SleepDataset(40, delay=0.001)))
    done = profkit("summary", "--json", tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert sorted(t["window"] for t in got["traces"]) == ["epoch=0000-batch=000002-000003", "epoch=0000-batch=000008-000009"]
    assert all(t["step_breakdown"]["steps"] == [int(s) for s in t["window"].split("batch=")[1].split("-")[:2]] for t in got["traces"])
    assert got["aggregate"]["traces"] == 2 and got["aggregate"]["figures"]["share/DataLoader"] > 0
    assert got["aggregate"]["figures"]["gpu_idle_share"] is None  # CPU run: absent
    text = profkit("summary", tmp_path).stdout
    assert "epoch=0000-batch=000002-000003/" in text and "mean" in text


def bad_inputs(tmp_path, gpu_traces):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes((gpu_traces / CONTROL).read_bytes()[:5000])
    not_json = tmp_path / "text.json"
    not_json.write_text("hello")
    not_trace = tmp_path / "other.json.gz"
    with gzip.open(not_trace, "wt") as f:
        json.dump({"name": "not a trace"}, f)
    folder = tmp_path / "nothing"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    broken = tmp_path / "broken.json"
    broken.symlink_to(tmp_path / "gone.json")
    return {
        "missing": (tmp_path / "missing.json", "no such file or folder"),
        "empty": (empty, "empty file"),
        "truncated gzip": (truncated, "not a complete gzip file"),
        "not JSON": (not_json, "not JSON"),
        "not a trace": (not_trace, "not a profiler trace"),
        "no traces": (folder, "no trace files"),
        "a pipe": (pipe, f"{pipe}: not a file or folder (a pipe or a device)"),  # was "no such file"
        "a broken link": (broken, f"{broken}: a symbolic link to nothing ({tmp_path / 'gone.json'})"),
    }


def test_bad_input_gets_one_line_and_a_non_zero_exit(tmp_path, gpu_traces):
    for case, (path, message) in bad_inputs(tmp_path, gpu_traces).items():
        for args in (("summary", path), ("compare", path, gpu_traces / WORKERS_0)):
            done = profkit(*args)
            assert done.returncode == 1, case
            assert done.stderr.count("\n") == 1 and message in done.stderr and "Traceback" not in done.stderr, (case, done.stderr)
            assert done.stdout == ""


def test_missing_arguments_use_argparse_usage():
    done = profkit("summary")
    assert done.returncode == 2 and "usage: profkit summary" in done.stderr
    assert shutil.which(PROFKIT)


def test_windows_are_listed_in_step_order(tmp_path, gpu_traces):
    for window in ("step=000101-000103-epoch=1", "step=000075-000077-epoch=1", "epoch=0000-batch=000009-000011"):
        (tmp_path / window).mkdir()
        shutil.copy(gpu_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", tmp_path / window)
    done = profkit("summary", "--json", tmp_path)
    assert done.returncode == 0, done.stderr
    windows = [t["window"] for t in json.loads(done.stdout)["traces"]]
    assert windows == ["epoch=0000-batch=000009-000011", "step=000075-000077-epoch=1", "step=000101-000103-epoch=1"]


def test_a_reader_that_stops_early_gets_no_traceback(gpu_traces):
    # `profkit summary ... | head -1`: the rest of the output has nowhere to go
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as users run it
    proc = subprocess.Popen([PROFKIT, "summary", str(gpu_traces / CONTROL)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=buffered)
    first = proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert first.startswith(b"Step time breakdown") and proc.returncode == 0 and err == b""


def test_a_damaged_trace_never_hides_the_intact_ones(tmp_path, gpu_traces):
    """One intact and two damaged traces: summary and report show the intact one, name each damaged one once
    with why, and exit with 3 (some left out); a folder of damaged traces only, or nothing to report, exits 1."""
    intact = gpu_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    for window in ("epoch=0000-batch=000001-000003", "epoch=0000-batch=000011-000013"):
        (tmp_path / "run" / "profiler" / window).mkdir(parents=True)
    windows = sorted((tmp_path / "run" / "profiler").iterdir())
    shutil.copy(intact, windows[0] / "a.pt.trace.json.gz")
    (windows[1] / "b.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X"'))
    (windows[1] / "c.pt.trace.json").write_text("not json")
    damaged = [str(windows[1] / "b.pt.trace.json.gz"), str(windows[1] / "c.pt.trace.json")]
    for args in (("summary", tmp_path / "run"), ("report", tmp_path / "run", "-o", tmp_path / "r.html")):
        done = profkit(*args)
        assert done.returncode == 3, done.stderr
        for path in damaged:
            assert done.stderr.count(path) == 1 and f"profkit: {path}: not JSON" in done.stderr, done.stderr
    assert "epoch=0000-batch=000001-000003/a" in profkit("summary", tmp_path / "run").stdout
    assert "1 trace(s)" in profkit("report", tmp_path / "run", "-o", tmp_path / "r.html").stderr
    only_damaged = profkit("summary", windows[1])
    assert only_damaged.returncode == 1 and "none of its 2 trace(s) could be read" in only_damaged.stderr
    (tmp_path / "empty").mkdir()
    nothing = profkit("report", tmp_path / "empty", "-o", tmp_path / "e.html")
    assert nothing.returncode == 1 and "nothing to report" in nothing.stderr and not (tmp_path / "e.html").exists()


def test_a_bad_count_names_its_subcommand_and_argument(tmp_path):
    done = profkit("summary", "--jobs", "0", tmp_path)
    assert done.returncode == 2 and "usage: profkit summary" in done.stderr
    assert "argument --jobs: must be at least 1, got 0" in done.stderr


def test_traces_that_share_a_worker_name_get_labels_of_their_own(tmp_path, gpu_traces):
    """Lightning's PyTorchProfiler writes ``fit-<name>-<action>.<ns>.pt.trace.json`` files side by side."""
    for ns in ("1700000000001", "1700000000002"):
        shutil.copy(gpu_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                    tmp_path / f"fit-profile-training_step.{ns}.pt.trace.json.gz")
    rows = [line.split()[0] for line in profkit("summary", tmp_path).stdout.splitlines()[2:4]]
    assert len(set(rows)) == 2, rows


def test_a_folder_of_runs_names_each_runs_windows_apart(tmp_path, gpu_traces):
    """Two runs without a versioned logger (``profiler/run=…``) with windows of the same steps: their traces are
    labelled by run, and neither the table nor the rank verdict merges them."""
    trace = gpu_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    for run in ("run=20261204-100000.000001-aaaaaa", "run=20261204-110000.000001-bbbbbb"):
        (tmp_path / "profiler" / run / "epoch=0000-batch=000011-000013").mkdir(parents=True)
        shutil.copy(trace, tmp_path / "profiler" / run / "epoch=0000-batch=000011-000013" / "h_rank0.1.pt.trace.json.gz")
    done = profkit("summary", "--json", tmp_path)
    assert done.returncode == 0, done.stderr
    assert [t["window"] for t in json.loads(done.stdout)["traces"]] == [
        "run=20261204-100000.000001-aaaaaa/epoch=0000-batch=000011-000013",
        "run=20261204-110000.000001-bbbbbb/epoch=0000-batch=000011-000013"]


def test_names_from_a_trace_cannot_drive_the_terminal(tmp_path, gpu_traces):
    """Operator and file names holding escape sequences (a window title, a line erase, a bell, a bidi override):
    on a terminal, summary shows them escaped; only its own bold and colour sequences reach it."""
    with gzip.open(gpu_traces / "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "rt") as f:
        trace = json.load(f)
    hostile = "\x1b]0;pwned\x07aten::\x1b[2Kevil\u202e"
    ops = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    for e in ops:
        e["name"] = hostile
    folder = tmp_path / "run\x1b[31m"
    folder.mkdir()
    with gzip.open(folder / "w\x1b]0;t\x07.pt.trace.json.gz", "wt") as f:
        json.dump(trace, f)
    (folder / "bad\x1b[2J.pt.trace.json.gz").write_bytes(b"not gzip")
    main, child = pty.openpty()
    proc = subprocess.Popen([PROFKIT, "summary", str(folder)], stdout=child, stderr=child)
    os.close(child)
    out = read_terminal(main).decode()
    assert proc.wait(timeout=120) == 3, out  # one trace left out
    assert ops and "\\x1b]0;pwned\\x07aten::\\x1b[2Kevil\\u202e" in out and "\\x1b[2J" in out, out
    ours = re.sub(r"\x1b\[[0-9;]*m", "", out)  # what summary itself writes: SGR (bold, colour)
    assert "\x1b" not in ours and "\x07" not in ours and "\u202e" not in ours, ours


def gzip_stream(path, parts):
    """Write the byte strings ``parts`` gzipped (level 1, so that a bomb is quick to make)."""
    with gzip.open(path, "wb", compresslevel=1) as f:
        for part in parts:
            f.write(part)


# a process forked from this one starts with this process's peak (the kernel keeps it through exec): profkit is
# started from a small process, which reports the peak of its own child
_PEAK = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
         "_, s, u = os.wait4(p.pid, 0); print(os.waitstatus_to_exitcode(s), u.ru_maxrss)")


def peak_rss_mb(*args, env=None):
    """Run profkit; its exit status, stderr and peak resident memory (MB), from the kernel's account of it."""
    done = subprocess.run([sys.executable, "-c", _PEAK, PROFKIT, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)
    status, peak_kb = map(int, done.stdout.split())
    return status, done.stderr, peak_kb / 1024


def test_trace_bombs_are_refused_unread_and_named(tmp_path):
    """Gzip that inflates 1000x (600 MB of whitespace; one string of 600 MB) took memory in proportion (6.2 GB for
    a 6.3 MB file); JSON nested 100,000 deep gave a RecursionError; negative durations gave negative figures and
    exit 0; NaN was "not JSON"; a loop of links was "no such file". Each is now one line naming the file."""
    mb = b" " * 2**20
    gzip_stream(tmp_path / "space.pt.trace.json.gz", [b'{"traceEvents": [', *[mb] * 600, b"]}"])
    gzip_stream(tmp_path / "string.pt.trace.json.gz", [b'{"traceEvents": [{"ph": "X", "name": "', *[b"a" * 2**20] * 600,
                                                        b'", "ts": 1, "dur": 1}]}'])
    events = b'{"ph": "M"}, ' * (2**20 // 13)  # events no figure reads: cut between them, nothing held
    gzip_stream(tmp_path / "events.pt.trace.json.gz", [b'{"traceEvents": [', *[events] * 600, b'{"ph": "M"}]}'])
    for name in ("space", "string", "events"):
        path = tmp_path / f"{name}.pt.trace.json.gz"
        status, err, peak = peak_rss_mb("summary", "--jobs", "1", path)  # one process: its own peak
        limit = re.search(re.escape(f"{path}: inflates past ") + r"(\d+) MB of JSON from [0-9.]+ MB of gzip", err)
        if name == "events":  # read in pieces until it inflates past the limit
            assert status == 1 and limit and "gzip bomb" in err and "PROFKIT_MAX_INFLATION" in err, err
            assert int(limit[1]) < 600 and peak < int(limit[1]) + 150, (name, peak)  # never the whole 600 MB
        else:  # no boundary between events in 16 MB: refused before the limit
            assert status == 1 and "cannot be read in pieces" in err and peak < 16 + 150, (err, peak)
    env = {**os.environ, "PROFKIT_MAX_INFLATION": "100000"}
    status, err, _ = peak_rss_mb("summary", tmp_path / "space.pt.trace.json.gz", env=env)
    # the limit raised: inflated, no longer a bomb, but 600 MB without a boundary between events is not read either
    assert status == 1 and "gzip bomb" not in err and "cannot be read in pieces" in err, err

    (tmp_path / "nested.json").write_text('{"traceEvents": ' + "[" * 100_000 + "]" * 100_000 + "}")
    event = '{{"ph": "X", "name": "{}", "cat": "cpu_op", "ts": {}, "dur": {}, "pid": 1, "tid": 1}}'
    (tmp_path / "negative.json").write_text('{"traceEvents": [%s, %s]}' % (event.format("ProfilerStep#1", 0, -100),
                                                                          event.format("aten::mm", 10, 5)))
    (tmp_path / "nan.json").write_text('{"traceEvents": [%s]}' % event.format("aten::mm", 0, "NaN"))
    os.symlink(tmp_path / "loop2.json", tmp_path / "loop.json")
    os.symlink(tmp_path / "loop.json", tmp_path / "loop2.json")
    for name, says in [("nested", "JSON nested deeper than"), ("loop", "a loop of symbolic links"),
                       ("negative", "a damaged trace: 1 event(s) with a negative or infinite duration or time (the "
                                    "first: 'ProfilerStep#1' at 0.0 µs, duration -100.0 µs)"),
                       ("nan", "a damaged trace: a number that is not one (NaN or Infinity) at byte 82")]:
        done = profkit("summary", tmp_path / f"{name}.json")
        assert done.returncode == 1 and f"{tmp_path / name}.json: {says}" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_the_second_look_reads_the_sidecars_and_a_changed_trace_is_parsed_again(tmp_path, gpu_traces):
    window = tmp_path / "epoch=0000-batch=000001-000003"
    window.mkdir()
    trace = window / "w_rank0.1.pt.trace.json.gz"
    shutil.copy(gpu_traces / WORKERS_0, trace)
    first = profkit("summary", "--json", tmp_path)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    kept = window / (trace.name + ".profkit")
    assert sorted(os.listdir(window)) == [trace.name, kept.name]
    second = profkit("summary", "--json", tmp_path)
    assert json.loads(second.stdout) == json.loads(first.stdout)

    # read from the sidecar: a figure changed there is what is shown
    doc = json.loads(kept.read_bytes())
    doc["summary"]["worker"] = "from-the-sidecar"
    kept.write_text(json.dumps(doc))
    assert json.loads(profkit("summary", "--json", tmp_path).stdout)["traces"][0]["worker"] == "from-the-sidecar"
    os.utime(trace)  # the trace changed since: parsed again, and its sidecar made anew
    assert json.loads(profkit("summary", "--json", tmp_path).stdout) == json.loads(first.stdout)
    assert json.loads(kept.read_bytes())["summary"]["worker"] != "from-the-sidecar"

    # where no sidecar can be written, the figures are shown all the same, and why is said once
    os.remove(kept)
    kept.mkdir()
    other = window / "w_rank1.1.pt.trace.json.gz"
    shutil.copy(trace, other)
    (window / (other.name + ".profkit")).mkdir()
    done = profkit("summary", "--json", tmp_path)
    assert done.returncode == 0 and len(json.loads(done.stdout)["traces"]) == 2
    assert done.stderr == (f"profkit: could not keep the summaries beside the traces ({kept}: Is a directory); "
                           "the next look parses them again\n")


# a scheduler and two worker processes of one thread, in a process of their own (the cluster's threads would stay
# in the test's process); it prints the scheduler's address and ends when its input does
CLUSTER = ("import sys; from distributed import LocalCluster; "
           "cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None); "
           "print(cluster.scheduler_address, flush=True); sys.stdin.read(); cluster.close()")


@contextlib.contextmanager
def local_cluster(cwd=None):
    pytest.importorskip("distributed")
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=cwd)
    try:
        address = proc.stdout.readline().strip()
        assert address.startswith("tcp://"), proc.communicate(timeout=60)
        yield address
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        finally:
            stop_session(proc)


def a_run(folder, gpu_traces):
    """A window of two real traces and a damaged one under ``folder``; returns the window's folder."""
    window = folder / "step=000001-000003-epoch=0"
    window.mkdir(parents=True)
    for rank, trace in enumerate((WORKERS_0, WORKERS_4)):
        shutil.copy(gpu_traces / trace, window / f"w_rank{rank}.1.pt.trace.json.gz")
    (window / "w_rank2.1.pt.trace.json.gz").write_bytes(b"not a trace")
    return window


def test_a_cluster_parses_the_traces_the_store_holds_and_leaves_their_sidecars(tmp_path, s3_server, gpu_traces):
    window = tmp_path / "run" / "step=000001-000003-epoch=0"
    window.mkdir(parents=True)
    for rank, trace in enumerate((WORKERS_0, WORKERS_4)):
        shutil.copy(gpu_traces / trace, window / f"w_rank{rank}.1.pt.trace.json.gz")
    (window / "w_rank2.1.pt.trace.json.gz").write_bytes(b"not a trace")
    here = profkit("summary", "--json", tmp_path / "run")  # parsed here: the figures to compare with
    for name in os.listdir(window):
        if name.endswith(".gz"):  # the traces only: the sidecars written here stay here
            s3_server.fs.put_file(str(window / name), f"runs/run/{window.name}/{name}")
    url = "s3://runs/run"
    with local_cluster() as address:
        done = profkit("summary", "--json", url, "--scheduler", address)
    assert done.returncode == 3, done.stderr  # the broken trace is left out, named
    assert f"{url}/{window.name}/w_rank2.1.pt.trace.json.gz: " in done.stderr
    got, want = json.loads(done.stdout), json.loads(here.stdout)
    assert len(got["traces"]) == len(want["traces"]) == 2
    for a, b in zip(got["traces"], want["traces"]):
        assert a["path"] == b["path"].replace(str(tmp_path), "s3://runs")
        assert {**a, "path": None} == {**b, "path": None}
    assert got["aggregate"] == want["aggregate"]
    # each sidecar is on the store: the next look needs no cluster
    assert sorted(k for k in s3_server.keys("run") if k.endswith(".profkit")) == [
        f"run/{window.name}/w_rank{r}.1.pt.trace.json.gz.profkit" for r in (0, 1)]
    again = profkit("summary", "--json", url)
    assert json.loads(again.stdout)["traces"] == got["traces"]


def test_a_cluster_parses_a_folder_its_workers_share_and_leaves_the_sidecars_there(tmp_path, gpu_traces):
    """A cluster's shared filesystem (NFS, Lustre, GPFS) is a local path every worker sees: read there, in place."""
    window = a_run(tmp_path / "run", gpu_traces)
    here = profkit("summary", "--json", tmp_path / "run")  # parsed here: the figures to compare with
    for sidecar in window.glob("*.profkit"):
        sidecar.unlink()
    with local_cluster() as address:
        done = profkit("summary", "--json", tmp_path / "run", "--scheduler", address)
    assert done.returncode == 3 and f"{window}/w_rank2.1.pt.trace.json.gz: " in done.stderr, done.stderr
    got, want = json.loads(done.stdout), json.loads(here.stdout)
    assert len(got["traces"]) == 2 and got == want
    assert sorted(p.name for p in window.glob("*.profkit")) == [f"w_rank{r}.1.pt.trace.json.gz.profkit" for r in (0, 1)]


def test_a_folder_the_workers_see_otherwise_is_refused_naming_it(tmp_path, gpu_traces):
    """/proc/self/cwd is each process's own folder: the workers, started elsewhere, find nothing there, or another
    file of the same name."""
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    a_run(tmp_path / "here" / "run", gpu_traces)
    with local_cluster(cwd=tmp_path / "there") as address:
        missing = profkit("summary", "/proc/self/cwd/run", "--scheduler", address, cwd=tmp_path / "here")
        other = a_run(tmp_path / "there" / "run", gpu_traces)
        (other / "w_rank0.1.pt.trace.json.gz").write_bytes(b"another file")
        differs = profkit("summary", "/proc/self/cwd/run", "--scheduler", address, cwd=tmp_path / "here")
    for done in (missing, differs):
        assert done.returncode == 1 and done.stdout == "", done.stderr
        assert done.stderr.startswith("profkit: /proc/self/cwd/run: 2 of the cluster's 2 workers do not see this "
                                      "folder as this machine does"), done.stderr
    assert not list((tmp_path / "here").rglob("*.profkit"))


def test_the_scheduler_must_answer(tmp_path, s3_server):
    pytest.importorskip("distributed")
    s3_server.fs.pipe_file("runs/x/a.pt.trace.json.gz", b"x")
    nobody = profkit("summary", "s3://runs/x", "--scheduler", "tcp://127.0.0.1:1")
    assert nobody.returncode == 1, nobody.stderr
    assert nobody.stderr.startswith("profkit: tcp://127.0.0.1:1: no Dask scheduler answers"), nobody.stderr


def test_without_distributed_the_command_says_what_to_install(tmp_path, monkeypatch, capsys):
    from lightning_profkit.cli import main

    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    assert main(["summary", str(tmp_path), "--scheduler", "tcp://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == "profkit: --scheduler needs Dask's distributed: pip install distributed\n"
