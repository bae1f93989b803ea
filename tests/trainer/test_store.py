"""Traces on object storage: a real fit logging to a real S3-protocol server (moto's, on 127.0.0.1), read back by
``profkit`` and TensorBoard; the store failing before and during training."""

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

import pytest
from conftest import S3Server, SleepDataset, TinyModel, WaitForTraces, make_trainer, profiler_steps
from lightning.pytorch import Callback
from lightning.pytorch.loggers import TensorBoardLogger

from lightning_profkit import PerformanceMonitor
from lightning_profkit.companions import EVENTS, SIDECAR, with_companions

pytest.importorskip("s3fs")


def fit(root, monitor, logger, epochs=2, callbacks=(), steps=20):
    trainer = make_trainer(root, [monitor, *callbacks], logger=logger, max_epochs=epochs, log_every_n_steps=5)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer.fit(TinyModel(SleepDataset(2 * steps)))
    # the messages about traces (not, say, a busy machine's after-window slowdown)
    return trainer, [str(w.message) for w in seen if "PerformanceMonitor" in str(w.message) and "trace" in str(w.message)]


def profkit(*args):
    exe = os.path.join(os.path.dirname(sys.executable), "profkit")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)


def staged_in(monkeypatch, tmp_path):
    """This process's temporary folder, where a run on a store stages its traces, made a fresh one."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_fit_logging_to_s3_puts_every_trace_there_whole(tmp_path, s3_server, monkeypatch):
    staging = staged_in(monkeypatch, tmp_path)
    monitor = PerformanceMonitor(alert_threshold=None)
    logger = TensorBoardLogger("s3://runs/exp", name="m")
    trainer, warned = fit(tmp_path, monitor, logger)
    assert not warned
    assert monitor.trace_dir == "s3://runs/exp/m/version_0/profiler"
    keys = s3_server.keys("exp/m/version_0/profiler")
    traces = [k for k in keys if k.endswith(".pt.trace.json.gz")]
    assert [k.split("/")[-2] for k in traces] == ["epoch=0000-batch=000011-000013", "epoch=0001-batch=000011-000013"]
    # each with its sidecar (its events table waits for a first query); no temporary keys, no probe, no marker
    assert sorted(k for t in traces for k in (t, t + SIDECAR)) == keys
    assert sorted(monitor.traces) == [f"s3://runs/{k}" for k in traces]
    for key in traces:
        trace = json.loads(gzip.decompress(s3_server.read(key)))
        assert trace["profkit"]["worker"].endswith("_rank0") and trace["traceEvents"]
    assert os.listdir(staging) == []  # the local copies and their private folder are gone
    done = profkit("summary", "--json", monitor.trace_dir)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert [t["window"] for t in summary["traces"]] == ["epoch=0000-batch=000011-000013", "epoch=0001-batch=000011-000013"]
    assert all(t["host"]["data_wait_share"] is not None for t in summary["traces"])


class StopStore(Callback):
    """Stops the S3 server when epoch ``epoch`` starts (after :class:`WaitForTraces` saw the earlier windows up),
    noting what was on it then; notes when training ends."""

    def __init__(self, server, epoch):
        self.server, self.epoch, self.uploaded, self.trained = server, epoch, [], None

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            self.uploaded = [k for k in self.server.keys("down") if k.endswith(".pt.trace.json.gz")]
            self.server.stop()

    def on_train_end(self, trainer, pl_module):
        self.trained = time.perf_counter()


def finalizing_processes():
    """Our finalizing processes still running under this process."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"lightning_profkit.monitor.writing.child" in cmd:
            found.append(int(pid))
    return found


def test_the_store_going_down_mid_run_keeps_every_trace_and_ends_on_time(tmp_path, s3_server, monkeypatch):
    """The store killed after epoch 0's windows, 11 windows in all: 8 were written nowhere, the one message was
    "9 profiler trace(s) were still being written after 60s", the fit's end blocked 60 s and the finalizing process
    outlived it. Now every window is on the store or kept here, two warnings (the first failure, and at the end
    every local copy with the command that uploads them), the end within `flush_timeout`, nothing left running;
    `profkit upload` puts them on the store once it is back."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # botocore retries a refused connection for about 15 s by default
    staging = staged_in(monkeypatch, tmp_path)
    url = "s3://runs/down/profiler"
    monitor = PerformanceMonitor(alert_threshold=None, dirpath=url, every_n_steps=5, warmup=1, active=2,
                                 flush_timeout=10)
    stop = StopStore(s3_server, 1)
    trainer, warned = fit(tmp_path, monitor, False, epochs=3, callbacks=[WaitForTraces(monitor, 1), stop])
    ended = time.perf_counter() - stop.trained
    assert trainer.global_step == 60  # every step trained
    assert ended < 10 + 5 and finalizing_processes() == [], ended  # flush_timeout, and nothing left running
    (staged,) = staging.iterdir()  # one private folder: mode 0700, a name no one could foresee
    assert staged.name.startswith("profkit-staging-") and staged.stat().st_mode & 0o777 == 0o700
    files = sorted(os.path.join(d, f) for d, _, files in os.walk(staged) for f in files)
    kept = [p for p in files if p.endswith(".pt.trace.json.gz")]
    assert files == sorted(k for p in kept for k in (p, p + SIDECAR))  # each kept with its sidecar
    windows = [f"epoch={s // 20:04d}-batch={s % 20:06d}-{s % 20 + 1:06d}" for s in range(5, 60, 5)]
    assert sorted([k.split("/")[-2] for k in stop.uploaded] + [p.split(os.sep)[-2] for p in kept]) == windows
    assert [k.split("/")[-2] for k in stop.uploaded] == windows[:3]
    for path in kept:  # whole traces, ready to upload
        assert json.loads(gzip.decompress(open(path, "rb").read()))["traceEvents"]
    first = [w for w in warned if "could not be uploaded" in w and "to: s3://runs/down/profiler/epoch=0001-batch=000000" in w]
    assert len(first) == 1 and f"kept at: {kept[0]}" in first[0], warned  # once, naming the local copy
    end = [w for w in warned if f"{len(kept)} profiler trace(s) could not be uploaded" in w]
    assert len(end) == 1 and all(p in end[0] for p in kept) and f"profkit upload {staged} {url}" in end[0], warned
    assert len(warned) == 2, warned

    back = S3Server(tmp_path / "moto2.log")  # the store is back (a new one: moto keeps nothing)
    try:
        back.fs.mkdir(back.bucket)
        env = {**os.environ, **back.env()}
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "profkit"), "upload", str(staged), url],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0 and f"uploaded {len(kept)} trace(s) to {url}" in done.stderr, done.stderr
        assert back.keys("down") == sorted(f"down/profiler/{os.path.relpath(p, staged)}" for p in files)
        assert not any(files for _, _, files in os.walk(staged))
    finally:
        back.stop()


def test_a_store_that_cannot_be_written_fails_at_setup(tmp_path, s3_server):
    monitor = PerformanceMonitor(dirpath="s3://no-such-bucket/run/profiler")
    trainer = make_trainer(tmp_path, [monitor])
    with pytest.raises(OSError, match=r"^s3://no-such-bucket/run/profiler: .*(NoSuchBucket|does not exist)"):
        trainer.fit(TinyModel())
    assert trainer.global_step == 0


def test_tensorboard_reads_the_run_from_the_store(tmp_path, s3_server, tensorboard_server):
    monitor = PerformanceMonitor(alert_threshold=None, steps="3-5")
    fit(tmp_path, monitor, TensorBoardLogger("s3://runs/tb", name="m"), epochs=1)
    server = tensorboard_server("s3://runs/tb/m")
    run = "version_0/profiler/epoch=0000-batch=000003-000005"
    server.wait_for(lambda: run in server.get("runs")["runs"])
    (worker,) = server.wait_for(lambda: server.get("workers", run=run, view="Overview"))
    (span,) = server.get("spans", run=run, worker=worker)
    overview = server.get("overview", run=run, worker=worker, span=span)
    assert [r[0] for r in overview["steps"]["rows"]] == ["3", "4", "5"]
    tags = server.wait_for(lambda: server.get("tags", plugin="scalars").get("version_0"))
    assert {"profkit/data_wait_ratio", "profkit/window/data_wait_share"} <= set(tags)


def test_retention_deletes_old_windows_from_the_store(tmp_path, s3_server):
    monitor = PerformanceMonitor(alert_threshold=None, dirpath="s3://runs/keep/profiler", keep_last_windows=1)
    _, warned = fit(tmp_path, monitor, False, epochs=3, callbacks=[WaitForTraces(monitor, 1), WaitForTraces(monitor, 2)])
    assert not warned
    keys = s3_server.keys("keep/profiler")
    assert keys == [keys[0], keys[0] + SIDECAR] and keys[0].split("/")[-2] == "epoch=0002-batch=000011-000013", keys
    assert monitor.traces == [f"s3://runs/{keys[0]}"]


def test_profkit_reads_a_single_object_and_says_what_is_missing(tmp_path, s3_server):
    monitor = PerformanceMonitor(alert_threshold=None, dirpath="s3://runs/one/profiler", steps="3-4")
    fit(tmp_path, monitor, False, epochs=1)
    (url,) = monitor.traces
    done = profkit("summary", "--json", url)
    assert done.returncode == 0, done.stderr
    (trace,) = json.loads(done.stdout)["traces"]
    assert trace["path"] == url and trace["window"] == "epoch=0000-batch=000003-000004" and trace["rank"] == 0

    # the summary came from the sidecar the fit put beside the trace: a figure changed there is what is shown
    key = url[len("s3://runs/"):] + SIDECAR
    sidecar = json.loads(s3_server.read(key))
    sidecar["summary"]["host"]["steps"] = 1234
    s3_server.fs.pipe(f"{s3_server.bucket}/{key}", json.dumps(sidecar).encode())
    assert json.loads(profkit("summary", "--json", url).stdout)["traces"][0]["host"]["steps"] == 1234
    # with none, the trace is parsed, its figures are the fit's, and the sidecar is put back for the next look
    s3_server.fs.rm_file(f"{s3_server.bucket}/{key}")
    parsed = profkit("summary", "--json", url)
    assert parsed.returncode == 0 and json.loads(parsed.stdout)["traces"] == [trace], parsed.stderr
    assert s3_server.keys("one") == [url[len("s3://runs/"):] + suffix for suffix in ("", SIDECAR)]
    assert json.loads(profkit("summary", "--json", url).stdout)["traces"] == [trace]
    # the first query writes the events table and puts it beside the trace: one row per complete event of the raw
    # trace; the next query reads it there
    raw = json.loads(gzip.decompress(s3_server.read(url[len("s3://runs/"):])))["traceEvents"]
    query = ("SELECT count(*), count(DISTINCT step) FILTER (step >= 0) FROM events", "--json")
    done = profkit("sql", "s3://runs/one", *query)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "profkit: wrote the events tables of 1 trace(s); the next query reads them\n"
    assert s3_server.keys("one") == sorted(with_companions(url[len("s3://runs/"):]))
    assert profkit("sql", "s3://runs/one", *query).stdout == done.stdout
    steps = {e["name"] for e in raw if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")}
    events = sum(1 for e in raw if e.get("ph") == "X" and "ts" in e)
    assert json.loads(done.stdout)["rows"] == [[events, len(steps)]] and len(steps) == 2
    # a damaged table is named by its object, not by the temporary copy that DuckDB read
    table = url[len("s3://runs/"):] + EVENTS
    s3_server.fs.pipe(f"{s3_server.bucket}/{table}", b"PAR1 not a table PAR1")
    bad = profkit("sql", "s3://runs/one", "SELECT count(*) FROM events")
    assert bad.returncode == 1 and f"s3://runs/{table}" in bad.stderr and "profkit-" not in bad.stderr, bad.stderr
    missing = profkit("summary", "s3://runs/nothing-here")
    assert missing.returncode == 1 and missing.stderr == "profkit: s3://runs/nothing-here: no trace files (*.pt.trace.json[.gz]) there\n"
    assert profkit("sql", "s3://runs/nothing-here", "SELECT 1").stderr == missing.stderr  # as summary says it
    capture = profkit("capture", "s3://runs/one")  # the fit has ended: its marker is gone
    assert (capture.returncode, capture.stderr) == (
        1, "profkit: s3://runs/one: no running PerformanceMonitor writes traces here (no .profkit-run)\n")


def test_a_key_that_would_leave_the_temporary_folder_is_not_copied(tmp_path, s3_server, gpu_traces):
    """A store's trace is copied to a temporary folder under its key: a key with a '..' part is named and left out,
    and nothing is written outside that folder."""
    data = (gpu_traces / "hta" / "trace_diff_control" / "control.json.gz").read_bytes()
    s3_server.fs.pipe({f"{s3_server.bucket}/hostile/w/ok.pt.trace.json.gz": data,
                       f"{s3_server.bucket}/hostile/w/../../../escape.pt.trace.json.gz": data})
    assert "hostile/w/../../../escape.pt.trace.json.gz" in s3_server.keys("hostile")  # kept as given
    temporary = tmp_path / "a" / "b"
    temporary.mkdir(parents=True)
    exe = os.path.join(os.path.dirname(sys.executable), "profkit")
    done = subprocess.run([exe, "summary", "s3://runs/hostile"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TMPDIR=str(temporary)))
    assert done.returncode == 3, done.stderr
    assert ("profkit: s3://runs/hostile/w/../../../escape.pt.trace.json.gz: not read: a key with an empty, '.' or "
            "'..' part, which would be copied outside the temporary folder; left out") in done.stderr
    assert done.stdout.startswith("Step time breakdown")  # the other trace is summarized
    assert not [p for p in tmp_path.rglob("escape*")]  # nowhere, inside the temporary folder or out


def test_sql_with_no_room_for_the_stores_tables_says_so_once_and_leaves_nothing(s3_server, small_disk):
    """``profkit sql`` copies a store's tables into a temporary folder first: where they do not fit (a 3 MB table, a
    2 MB disk), one line, and nothing left on that disk."""
    s3_server.fs.pipe({f"{s3_server.bucket}/full/w/r.pt.trace.json.gz": b"{}",
                       f"{s3_server.bucket}/full/w/r.pt.trace.json.gz.parquet": os.urandom(3 * 2**20)})
    exe = os.path.join(os.path.dirname(sys.executable), "profkit")
    done = subprocess.run([exe, "sql", "s3://runs/full", "SELECT 1"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TMPDIR=str(small_disk)))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("profkit: s3://runs/full: ") and "No space left on device" in done.stderr, done.stderr
    assert os.listdir(small_disk) == []


def test_capture_requested_through_the_store(tmp_path, s3_server):
    """A run on the store with no logger of its own writes under ``profiler/run=*``: ``profkit capture`` given the
    run's root folder finds it there."""
    here = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.Popen([sys.executable, os.path.join(here, "capture_script.py"), "s3://runs/cap", "100000"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    markers = lambda: [k for k in s3_server.keys("cap") if k.endswith("/.profkit-run")]  # noqa: E731
    try:
        deadline = time.time() + 120
        while not markers() and time.time() < deadline and run.poll() is None:
            time.sleep(0.2)
        (key,) = markers()
        folder = "s3://runs/" + key.rsplit("/", 1)[0]
        assert re.fullmatch(r"s3://runs/cap/profiler/run=\d{8}-\d{6}\.\d{6}-[0-9a-f]{6}", folder), folder
        marker = json.loads(s3_server.read(key))
        staged = marker["requests_at"]  # the run's private staging folder, where requests are brought in
        assert marker["pid"] == run.pid and os.path.basename(staged).startswith("profkit-staging-")
        assert os.stat(staged).st_mode & 0o777 == 0o700 and os.stat(staged).st_uid == os.getuid()
        asked = profkit("capture", "s3://runs/cap", "--steps", "4")
        assert asked.returncode == 0 and f"requested a window of 4 steps from the run in {folder}" in asked.stdout, asked.stderr
        while not [k for k in s3_server.keys("cap") if k.endswith(".pt.trace.json.gz")] and time.time() < deadline:
            assert run.poll() is None, run.communicate()[0][-2000:]
            time.sleep(0.1)
        out, _ = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 0, out[-2000:]
    keys = s3_server.keys("cap")  # written while training went on; the marker and the request are gone
    trace = keys[0]
    assert keys == [trace, trace + SIDECAR]
    assert not os.path.exists(staged)  # and so is the staging folder
    assert len(profiler_steps(json.loads(gzip.decompress(s3_server.read(trace))))) == 4
    assert "requested from outside" in out


def test_credentials_travel_in_storage_options_and_are_never_shown(tmp_path, s3_server, monkeypatch, capfd):
    """The store's key and secret only in `storage_options` (none in the environment): the traces arrive, and the
    secret is nowhere users look: not in a warning, a printed line, `traces`, `trace_dir`, the options' repr or a
    file on disk. URLs that carry credentials fail at setup with the credentials shown as `***` (they were echoed)."""
    secret = f"s3cr3t-{os.getpid()}-value"
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    options = {"key": "testing", "secret": secret, "client_kwargs": {"endpoint_url": s3_server.endpoint}}
    monitor = PerformanceMonitor(alert_threshold=None, steps="1-2", dirpath="s3://runs/creds/profiler",
                                 storage_options=options)
    trainer, warned = fit(tmp_path, monitor, False, epochs=1)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # the test's own client reads them
        monkeypatch.setenv(name, s3_server.env()[name])
    assert [k.split("/")[-2] for k in s3_server.keys("creds")] == ["epoch=0000-batch=000001-000002"] * 2  # and its sidecar
    out, err = capfd.readouterr()
    shown = [out, err, *warned, *monitor.traces, monitor.trace_dir, repr(monitor.options)]
    assert not any(secret in text for text in shown) and "storage_options" not in repr(monitor.options)
    assert not any(secret.encode() in (tmp_path / p).read_bytes() for p in os.listdir(tmp_path) if (tmp_path / p).is_file())

    for url in ("s3://AKIDEXAMPLE:wJalrXUtnFEMI@runs/x/profiler", "ftp://alice:pa55word-value@127.0.0.1:9/runs"):
        with pytest.raises(OSError) as failed:
            make_trainer(tmp_path, [PerformanceMonitor(dirpath=url)]).fit(TinyModel())
        assert "***@" in str(failed.value) and not any(
            part in str(failed.value) for part in ("wJalrXUtnFEMI", "AKIDEXAMPLE", "pa55word-value")), str(failed.value)


def test_many_sidecars_are_sent_in_one_call(tmp_path, s3_server):
    """What `profkit summary` puts back on a store after parsing a run of many ranks (1,024 ranks once failed with
    "Argument list too long"), with long names."""
    from lightning_profkit.store import put

    folder = tmp_path / ("w" * 200)
    folder.mkdir()
    pairs = []
    for n in range(400):
        (folder / f"r{n}.profkit").write_bytes(b"%d" % n)
        pairs.append([str(folder / f"r{n}.profkit"), f"s3://runs/many/{'w' * 200}/r{n}.profkit"])
    assert len(json.dumps(pairs)) > 128 * 1024
    put(pairs)
    assert len(s3_server.keys("many")) == 400 and s3_server.read(f"many/{'w' * 200}/r399.profkit") == b"399"


@pytest.mark.parametrize("root, says", [
    ("memory://runs/exp", r"memory://runs/exp/profiler/run=[^:]+: memory:// lives inside one process"),
    ("gs://bucket/exp", r"gs://bucket/exp/profiler/run=[^:]+: gs:// needs gcsfs: pip install gcsfs"),
    ("nosuch://bucket/exp", r"nosuch://bucket/exp/profiler/run=[^:]+: .*nosuch"),
])
def test_a_store_that_cannot_take_traces_fails_at_setup_naming_the_url(tmp_path, root, says):
    """Before, its traces went to a local folder literally named ``memory:`` (or ``s3:``), silently."""
    trainer = make_trainer(tmp_path, [PerformanceMonitor()], default_root_dir=root)
    with pytest.raises(OSError, match=says):
        trainer.fit(TinyModel())
    assert trainer.global_step == 0 and not os.path.exists(root.split("/")[0])  # relative to where the fit ran


def test_a_url_with_credentials_stays_in_the_process(tmp_path, s3_server):
    """A URL that carries a password: not in the callback's checkpoint key, not on the command line of any process
    profkit starts (which every local user can read in /proc), not in `profkit summary --json`'s output. A worker
    forked from the command shares the command line the user typed (the same memory, not a new copy): allowed."""
    secret = f"pa55-{os.getpid()}-word"
    url = f"s3://testing:{secret}@runs/creds/profiler"
    monitor = PerformanceMonitor(dirpath=url)
    assert secret not in monitor.state_key
    exe = os.path.join(os.path.dirname(sys.executable), "profkit")
    proc = subprocess.Popen([exe, "summary", "--json", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
        typed = f.read()  # Popen returns once the command is exec'd: this is the line the user typed
    looks = 0
    while proc.poll() is None:  # every command line on the machine, until the command ends
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:  # the parent first: a process gone before its command line is read is skipped whole
                with open(f"/proc/{pid}/stat", "rb") as f:
                    parent = int(f.read().rsplit(b")", 1)[1].split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            line = raw.replace(b"\0", b" ").decode(errors="replace")
            forked = parent == proc.pid and raw == typed  # a forked worker shares the typed line's memory
            assert secret not in line or int(pid) == proc.pid or forked, line
        looks += 1
    out, err = proc.communicate()
    assert looks >= 1  # every command line was read at least once while it ran
    assert secret not in out.decode() + err.decode()
