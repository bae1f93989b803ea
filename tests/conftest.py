"""Shared test helpers: a tiny model, a Dataset that sleeps, trace readers and the real GPU traces in tests/data."""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader, Dataset, IterableDataset

GPU_TRACES = Path(__file__).resolve().parent / "data" / "traces"  # real GPU traces, with provenance in its README
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


class SleepDataset(Dataset):
    """``size`` samples of 8 features; each costs ``delay`` seconds to fetch."""

    def __init__(self, size: int = 64, delay: float = 0.0) -> None:
        self.size, self.delay = size, delay

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.delay:
            time.sleep(self.delay)
        return torch.full((8,), float(i))


class BurnDataset(SleepDataset):
    """Each sample costs ``burn`` seconds of CPU (where SleepDataset's wait, as on slow storage, costs none): a loader
    that decodes and augments."""

    def __init__(self, size, burn):
        super().__init__(size)
        self.burn = burn

    def __getitem__(self, i):
        start = time.process_time()
        while time.process_time() - start < self.burn:
            pass
        return super().__getitem__(i)


class SleepIterable(IterableDataset):
    def __init__(self, size: int = 64, delay: float = 0.0) -> None:
        self.size, self.delay = size, delay

    def __iter__(self):
        for i in range(self.size):
            if self.delay:
                time.sleep(self.delay)
            yield torch.full((8,), float(i))


class TinyModel(LightningModule):
    def __init__(self, dataset: Optional[Dataset] = None, batch_size: int = 2, num_workers: int = 0) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.dataset = dataset if dataset is not None else SleepDataset()
        self.batch_size, self.num_workers = batch_size, num_workers

    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.layer(batch).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, num_workers=self.num_workers)


class WaitForTraces(Callback):
    """At the start of epoch ``epoch``, wait until the windows before it are written: the finalizing process runs
    below training, so on a busy machine it may not be done before the next epoch."""

    def __init__(self, monitor, epoch):
        self.monitor, self.epoch = monitor, epoch

    def on_train_epoch_start(self, trainer, pl_module):
        output = self.monitor._fit.output
        while trainer.current_epoch == self.epoch and output._writer.pending:
            time.sleep(0.01)


class Recorder(Logger):
    """A logger that keeps what it gets; ``delay`` makes it slow."""

    def __init__(self, delay=0.0):
        super().__init__()
        self.rows, self.delay = [], delay

    name, version = "recorder", 0

    @property
    def experiment(self):
        return None

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        time.sleep(self.delay)
        self.rows.append((step, dict(metrics)))


def make_trainer(root: Any, callbacks: list, trainer_class: type = Trainer, **kwargs: Any) -> Trainer:
    defaults = dict(
        default_root_dir=str(root),
        max_epochs=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        accelerator="cpu",
        devices=1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    defaults.update(kwargs)
    return trainer_class(callbacks=callbacks, **defaults)


def recorded(steps: int) -> Any:
    """The kineto results of a real CPU session recording ``steps`` steps (``ProfilerStep#0`` on)."""
    got = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=0, warmup=0, active=steps, repeat=1),
                                on_trace_ready=lambda prof: got.append(prof.profiler.kineto_results)) as prof:
        for _ in range(steps):
            torch.ones(64, 64).matmul(torch.ones(64, 64))
            prof.step()
    return got[0]


def options(**arguments: Any) -> Any:
    """The checked options of ``PerformanceMonitor(**arguments)`` (its signature holds the defaults)."""
    from lightning_profkit import PerformanceMonitor

    return PerformanceMonitor(**arguments).options


def make_selection(skip_first, warmup, active, steps, every_n_steps, step_filter, profile=True):
    """The selection of a PerformanceMonitor built with these arguments (checked as at construction)."""
    return options(profile=profile, skip_first=skip_first, warmup=warmup, active=active, steps=steps,
                   every_n_steps=every_n_steps, step_filter=step_filter).selection()


def selections() -> dict[str, Any]:
    """Selections of every kind, by name, for the tests that run the same check over each."""
    from lightning_profkit.monitor.profiling.selection import WithCaptures

    return {
        "epoch window": make_selection(10, 1, 3, None, None, None).for_epoch(40),
        "short epoch": make_selection(10, 2, 3, None, None, None).for_epoch(6),
        "step ranges": make_selection(0, 1, 1, "3-4,9,30-33", None, None),
        "every n": make_selection(0, 1, 2, None, 7, None),
        "filter": make_selection(0, 2, 1, None, None, lambda s: s % 11 == 5),
        "captures": WithCaptures(make_selection(0, 1, 1, "20", None, None)).add(4, 6, 0).add(25, 25, 0),
        "none": make_selection(10, 1, 3, None, None, None, profile=False),
    }


def trace_files(root: Any) -> list[str]:
    return sorted(glob.glob(os.path.join(str(root), "**", "*.pt.trace.json.gz"), recursive=True))


def leftovers(root: Any) -> list[str]:
    """Temporary files of ours that must not survive a run."""
    found = []
    for dirpath, _, files in os.walk(str(root)):
        found += [os.path.join(dirpath, f) for f in files if f.endswith((".tmp", ".raw")) or f.startswith(".profkit")]
    return found


def fetch_timing_removed(trainer: Trainer) -> bool:
    """The fit loops have their own fetch callbacks back (ours are instance attributes while fitting)."""
    loops = (trainer.fit_loop.epoch_loop, trainer.fit_loop.epoch_loop.val_loop)
    return not any(name in vars(loop) for loop in loops for name in ("_on_before_fetch", "_on_after_fetch"))


def read_terminal(main: int) -> bytes:
    """Everything written to a pseudo-terminal whose other end is closed (one read may return only part of
    it); closes ``main``."""
    shown = b""
    try:
        while chunk := os.read(main, 65536):
            shown += chunk
    except OSError:  # EIO: the other end is closed and nothing is left
        pass
    os.close(main)
    return shown


def records(events: list) -> list:
    """The trace records of parsed event dicts, decoded as the text of a trace file is."""
    from lightning_profkit.trace.load import decode_json

    return decode_json("events", json.dumps({"traceEvents": events}).encode()).traceEvents


def read_trace(path: str) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def profiler_steps(trace: dict) -> list[int]:
    """The N of every ``ProfilerStep#N`` span in a trace, sorted."""
    return sorted(
        int(m.group(1))
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and (m := _STEP.match(e.get("name", "")))
    )


@pytest.fixture
def two_cpus():
    """This process (and what it starts: loader workers, busy processes) pinned to two of its CPUs for the test, so
    that figures made for 2 CPUs hold on any machine with at least 2."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs os.sched_setaffinity (Linux)")
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs at least 2 CPUs")
    os.sched_setaffinity(0, sorted(allowed)[:2])
    yield
    os.sched_setaffinity(0, allowed)


@pytest.fixture
def busy_cores():
    """``busy_cores(n)`` starts ``n`` processes that burn CPU until the test ends (stopped by their pid): another job
    on the node."""
    started = []

    def start(n: int) -> None:
        started.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n))

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.fixture
def finalizing_process(monkeypatch):
    """Every window of the fits in this process finalized by the finalizing process, however small its trace."""
    from lightning_profkit.monitor.writing import writer

    monkeypatch.setattr(writer, "IN_THREAD_BYTES", -1)


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem of 2 MB (tmpfs, mounted as root as on this project's machines and CI), unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.getuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                                          capture_output=True).returncode:
        pytest.skip("mounting a small filesystem needs root")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.fixture
def gpu_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the real GPU traces, for each test: `profkit` writes a sidecar beside each trace it parses."""
    copy = tmp_path_factory.mktemp("gpu") / "traces"
    shutil.copytree(GPU_TRACES, copy)
    return copy


@pytest.fixture
def reference(gpu_traces: Path) -> dict:
    return json.loads((gpu_traces / "reference.json").read_text())


def chrome(offline=False):
    """Headless Chromium; ``offline``: every name but 127.0.0.1 resolves to nothing and every request that is
    not to the machine itself goes through a proxy that is not there; the performance log records the page's
    requests."""
    webdriver = pytest.importorskip("selenium.webdriver")
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        pytest.skip("Debian's chromium and chromium-driver are not installed (dev.sh test installs them as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    if offline:
        for arg in ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--proxy-server=127.0.0.1:9"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))


def stop_session(proc: subprocess.Popen) -> None:
    """Stop a server started with ``start_new_session=True`` and every process it started, by its pid."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class TensorBoardServer:
    """A real `tensorboard` process on 127.0.0.1, stopped by its pid.

    It binds a port the system picks (``--port 0``) and says which in its "TensorBoard ... at http://..."
    line, so no other process can take the port between choosing and binding it. Its output goes to a log
    file in the test's folder, quoted when it exits or stays silent.
    """

    _URL = re.compile(rb"TensorBoard \S+ at (http://127\.0\.0\.1:(\d+))/")

    def __init__(self, logdir, log_path, timeout=120):
        tb = os.path.join(os.path.dirname(sys.executable), "tensorboard")
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [tb, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0", "--reload_interval", "1"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while (m := self._URL.search(Path(log_path).read_bytes())) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited with {self.proc.returncode}" if self.proc.poll() is not None else f"gave no URL in {timeout}s"
                self.stop()
                raise AssertionError(f"tensorboard {why}; its output:\n{self.log()}")
            time.sleep(0.2)
        self.base, self.port = m.group(1).decode(), int(m.group(2))

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")[-4000:]

    def get(self, path, plugin="pytorch_profiler", **params):
        url = f"{self.base}/data/plugin/{plugin}/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.loads(r.read())

    def wait_for(self, fn, timeout=120):
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                value = fn()
                if value:
                    return value
            except Exception as err:  # server still starting or loading
                last = err
            time.sleep(1)
        alive = "running" if self.proc.poll() is None else f"exited with {self.proc.returncode}"
        raise AssertionError(f"TensorBoard ({alive}) did not answer in {timeout}s: {last!r}; its output:\n{self.log()}")

    def stop(self):
        stop_session(self.proc)  # the whole session: the plugin loads runs in child processes


@pytest.fixture
def tensorboard_server(tmp_path):
    servers = []

    def start(logdir):
        servers.append(TensorBoardServer(logdir, tmp_path / f"tensorboard-{len(servers)}.log"))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
        assert server.proc.poll() is not None


class S3Server:
    """moto's standalone S3-protocol server (the one s3fs's own tests use) on 127.0.0.1, started on a free port
    and stopped by its pid. :meth:`env` is what points s3fs and boto3 (``AWS_ENDPOINT_URL``) and TensorBoard and
    torch-tb-profiler (``S3_ENDPOINT``) at it."""

    def __init__(self, log_path, bucket="runs", timeout=60):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint, self.bucket, self.log_path = f"http://127.0.0.1:{self.port}", bucket, log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=5).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"moto server did not start: {Path(log_path).read_text()[-2000:]}")
                time.sleep(0.1)
        self.fs = self.filesystem()

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "S3_ENDPOINT": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", "S3_USE_HTTPS": "0",
                "S3_VERIFY_SSL": "0"}

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(client_kwargs={"endpoint_url": self.endpoint}, skip_instance_cache=True,
                                 use_listings_cache=False)

    def keys(self, prefix="") -> list[str]:
        """Every object under ``s3://<bucket>/<prefix>``, as paths below the bucket."""
        root = f"{self.bucket}/{prefix}".rstrip("/")
        return sorted(p[len(self.bucket) + 1:] for p in self.filesystem().find(root))

    def read(self, key: str) -> bytes:
        return self.filesystem().cat_file(f"{self.bucket}/{key}")

    def stop(self):
        stop_session(self.proc)


@pytest.fixture
def s3_server(tmp_path, monkeypatch):
    """A running S3 server with bucket ``runs``; the environment points every client at it for the test."""
    import s3fs

    server = S3Server(tmp_path / "moto.log")
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    # clients made for an earlier server of this test process: fsspec's (Lightning's hparams) and TensorBoard's writer's
    s3fs.S3FileSystem.clear_instance_cache()
    gfile = pytest.importorskip("tensorboard.compat.tensorflow_stub.io.gfile")
    gfile.register_filesystem("s3", gfile.S3FileSystem())
    server.fs.mkdir(server.bucket)
    yield server
    server.stop()
    stop_fsspec_io()


def stop_fsspec_io():
    """End the I/O thread (and its executor's) that fsspec starts in this process for S3 and keeps for the life of
    the process, as a user's process would; left running, later tests would see a process with threads (where
    profkit does not fork its decoding workers)."""
    import fsspec.asyn
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    loop, thread = fsspec.asyn.loop[0], fsspec.asyn.iothread[0]
    if loop is None:
        return
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()
    fsspec.asyn.loop[0] = fsspec.asyn.iothread[0] = None


PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")
# `profkit` run in a process of its own that prints, last on stderr, its peak memory in MiB: the command's own (VmHWM:
# this process after exec, which a child's ru_maxrss is not) or that of its largest worker
_MEASURED = ("import resource, sys\nfrom lightning_profkit.cli import main\ncode = main(sys.argv[1:])\n"
             "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
             "kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
             "print(max(hwm, kids) / 1024, file=sys.stderr)\nsys.exit(code)")


def measured_profkit(*args: str, env: Optional[dict] = None, timeout: float = 120):
    """``profkit ARGS`` as a process of its own: its exit code, stdout, stderr's lines, CPU seconds (its own and its
    workers', from os.wait4) and peak memory in MiB. A command that hangs is killed after ``timeout`` s (code -9)."""
    import threading

    proc = subprocess.Popen([sys.executable, "-c", _MEASURED, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()))
    reader.start()
    try:
        out = proc.stdout.read()
        reader.join()
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    err = errors[0]
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = err.decode(errors="replace").strip().splitlines()
    peak = float(lines.pop()) if lines and lines[-1].replace(".", "", 1).isdigit() else float("nan")
    return proc.returncode, out, lines, usage.ru_utime + usage.ru_stime, peak
