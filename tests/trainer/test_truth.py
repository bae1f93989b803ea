"""The truth of every figure users read, each against a measurement that is not ours: the test's own timing of every
fetch and step, a count over the raw trace, the reaped finalizing process's CPU.

One real fit (:func:`run`) is read through every surface: its logged metrics, its rolling checks, its alert, its
end-of-fit lines, and what ``profkit summary``, ``compare`` and ``report`` show of it. The data-wait ratio is also
checked over the kinds of loader and loop (workers, ``dataloader_iter``, iterable, validation, a slow logger). The
docs/guarantees.md's "Which test vouches for which figure" lists these tests; the same figures, exactly, against a fake clock
are in tests/monitor/test_fit.py.
"""

import html
import json
import logging
import os
import re
import resource
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
from conftest import (Recorder, SleepDataset, SleepIterable, TinyModel, WaitForTraces, make_trainer, read_trace,
                      trace_files)
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.combined_loader import CombinedLoader
from torch.utils.data import ConcatDataset, DataLoader

from lightning_profkit import PerformanceMonitor
from lightning_profkit.machine import thread_scheduled_seconds
from lightning_profkit.monitor.timing.fetch_timer import STEP_CHUNK
from lightning_profkit.monitor.writing import writer

PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")


class TruthLoader(DataLoader):
    """A DataLoader whose iterators record when each ``next()`` starts and the time spent inside it: the
    ground truth."""

    def __iter__(self):
        inner, spent, starts = super().__iter__(), self.spent, self.starts

        class Timed:
            def __iter__(self):
                return self

            def __next__(self):
                t0 = time.perf_counter()
                starts.append(t0)
                try:
                    return next(inner)
                finally:
                    spent.append(time.perf_counter() - t0)

            def __len__(self):
                return len(inner)

        return Timed()


class LightningFetch(CombinedLoader):
    """The CombinedLoader Lightning fetches every training batch from, recording the time inside each
    ``next()``: the DataLoader's ``next()`` and Lightning's wrapping of it (the second ground truth)."""

    def __init__(self, loader):
        super().__init__(loader)
        self.spent = []

    def __next__(self):
        t0 = time.perf_counter()
        try:
            return super().__next__()
        finally:
            self.spent.append(time.perf_counter() - t0)


@dataclass
class EpochTruth:
    """One epoch by the test's clock: each step's fetch start and end, Lightning's fetch time, the epoch's end, and
    the validation time inside it."""

    starts: list = field(default_factory=list)
    batch_ends: list = field(default_factory=list)
    fetch_s: list = field(default_factory=list)
    loader_s: list = field(default_factory=list)
    waited_s: list = field(default_factory=list)  # the thread's wait for a CPU so far, at the start and each batch end
    start: float = 0.0
    end: float = 0.0
    validation_s: float = 0.0
    steps: int = 0  # Lightning's count (an iterable's loader has one more fetch: the one that ends it)
    start_after: float = 0.0  # the same start, end and batch ends read after the monitor's hooks (Truth.after)
    end_after: float = 0.0
    batch_ends_after: list = field(default_factory=list)

    @property
    def train_s(self):
        return self.end - self.start - self.validation_s

    @property
    def ratio(self):
        """Lightning's fetch time over the training time."""
        return sum(self.fetch_s) / self.train_s

    def near_ratio(self, value, tolerance=0.005):
        """``value`` is the ratio to within ``tolerance``, its training time read anywhere between the truth's
        readings and those after the monitor's hooks (a busy machine may take the core away between two callbacks
        for a time slice, 10 ms and more: 0.02 of a 0.25 s epoch), its wait at most the truth's plus the time the
        thread waited for a CPU (:meth:`cpu_wait`)."""
        wait, start_after, end_after = sum(self.fetch_s), self.start_after or self.start, self.end_after or self.end
        low = wait / (end_after - self.start - self.validation_s)
        high = (wait + self.cpu_wait()) / (self.end - start_after - self.validation_s)
        return low - tolerance <= value <= high + tolerance

    def p90_bounds(self):
        """The p90 of the step times if each step's start were read where the monitor reads it: before the truth's,
        by at most the thread's wait for a CPU in the step it starts (a time slice lost between the two readings
        moves a boundary by that much: a 2.3 ms slice put a p90 of 22 ms 11% high on a busy machine)."""
        waits = list(np.diff(self.waited_s)) if len(self.waited_s) == self.steps + 1 else [0.0] * self.steps
        steps = self.step_s
        low = [s - (waits[i + 1] if i + 1 < len(waits) else 0.0) for i, s in enumerate(steps)]
        high = [s + waits[i] for i, s in enumerate(steps)]
        return np.percentile(low, 90), np.percentile(high, 90)

    def cpu_wait(self, first=0, last=None):
        """Seconds the training thread waited for a CPU (another task had it), from the end of batch ``first - 1``
        (the epoch's start, for 0) to the end of batch ``last`` (the epoch's last): the monitor's clock readings
        around a fetch lie outside Lightning's, so a fetch it times holds Lightning's and whatever of that wait fell
        between the two (none on a quiet machine); 0 where the OS does not say."""
        waited = self.waited_s
        return waited[-1 if last is None else last + 1] - waited[first] if len(waited) > 1 else 0.0

    @property
    def loader_ratio(self):
        """The DataLoader's ``next()`` time over the training time."""
        return sum(self.loader_s) / self.train_s

    @property
    def mean_step_s(self):
        """From the first fetch's start to the epoch's end, less validation, over the steps."""
        return (self.end - self.starts[0] - self.validation_s) / self.steps

    def near_mean_step(self, value_ms, rel=0.03):
        """``value_ms`` is the mean step time to within ``rel``, the epoch's end read anywhere between the truth's
        reading and the one after the monitor's hooks, its first step's start earlier than the truth's by at most the
        time the thread waited for a CPU (a time slice lost between two readings, 10 ms and more on a busy machine:
        3% of a 0.3 s epoch; see :meth:`near_ratio`)."""
        span = self.end - self.starts[0] - self.validation_s
        longest = (self.end_after or self.end) - self.starts[0] - self.validation_s + self.cpu_wait()
        return span * (1 - rel) <= value_ms / 1000 * self.steps <= longest * (1 + rel)

    @property
    def step_s(self):
        """Each step: from its fetch's start to the next step's (the last: to the epoch's end; no validation)."""
        return list(np.diff(self.starts[:self.steps] + [self.end]))

    def block_ratio(self, first, last, before=None, reading="truth", extra_wait=0.0):
        """The data-wait ratio of this epoch's steps ``first``-``last`` (no validation inside), from the end of
        step ``first - 1`` to the end of step ``last``. A block that opens the epoch starts at the epoch's start
        and holds the tail of the epoch ``before`` it (from its last step's end to its end, with the fetch that
        ended it), as a rolling check's block runs on across epochs. ``reading``: "truth" takes the truth's
        readings; "longest" and "shortest" read each end where that makes the block longest or shortest, the
        truth's reading or the one after the monitor's hooks; ``extra_wait`` seconds are added to the wait."""
        late, long = reading == "shortest", reading == "longest"  # starts read late; ends read late
        ends, after = self.batch_ends, self.batch_ends_after or self.batch_ends
        start = (after if late else ends)[first - 1] if first else (self.start_after or self.start) if late else self.start
        wait, time_s = sum(self.fetch_s[first:last + 1]) + extra_wait, (after if long else ends)[last] - start
        if not first and before is not None:
            wait += sum(before.fetch_s[before.steps:])
            tail_start = (before.batch_ends_after or before.batch_ends)[-1] if late else before.batch_ends[-1]
            time_s += ((before.end_after or before.end) if long else before.end) - tail_start
        return wait / time_s

    def near_block(self, value, first, last, before=None, tolerance=0.005):
        """``value`` is the block's ratio to within ``tolerance``, its ends read anywhere between the truth's
        readings and those after the monitor's hooks, its wait at most the truth's plus the time the thread waited
        for a CPU in the block (see :meth:`near_ratio`)."""
        low = self.block_ratio(first, last, before, "longest")
        high = self.block_ratio(first, last, before, "shortest", self.cpu_wait(first, last))
        return low - tolerance <= value <= high + tolerance

class Truth(Callback):
    """The test's own clock over each epoch (:class:`EpochTruth`), read before any other callback's epoch end."""

    def __init__(self, loader, combined):
        self.loader, self.combined, self.epochs = loader, combined, []

    def after(self):
        """A callback to put after the monitor: it reads the epoch's start and end again."""
        truth = self

        class After(Callback):
            def on_train_epoch_start(self, trainer, pl_module):
                truth.epochs[-1].start_after = time.perf_counter()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                truth.epochs[-1].batch_ends_after.append(time.perf_counter())

            def on_train_epoch_end(self, trainer, pl_module):
                truth.epochs[-1].end_after = time.perf_counter()

        return After()

    def on_train_epoch_start(self, trainer, pl_module):
        self.loader.spent.clear()
        self.loader.starts.clear()
        self.combined.spent.clear()
        self.batch_ends = []
        self.epochs.append(EpochTruth(start=time.perf_counter()))
        self.waited = [thread_scheduled_seconds()[1] or 0.0]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batch_ends.append(time.perf_counter())  # before the monitor's: the callbacks run in their order
        self.waited.append(thread_scheduled_seconds()[1] or 0.0)

    def on_validation_start(self, trainer, pl_module):
        self.v0 = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.epochs[-1].validation_s += time.perf_counter() - self.v0

    def on_train_epoch_end(self, trainer, pl_module):
        epoch = self.epochs[-1]
        epoch.end = time.perf_counter()
        epoch.steps = trainer.fit_loop.epoch_loop.batch_progress.current.completed
        epoch.starts, epoch.fetch_s, epoch.loader_s = list(self.loader.starts), list(self.combined.spent), list(self.loader.spent)
        epoch.waited_s = self.waited
        epoch.batch_ends = self.batch_ends


class ComputeModel(TinyModel):
    def training_step(self, batch, batch_idx):
        time.sleep(0.004)  # the model's own work
        return super().training_step(batch, batch_idx)


class IterModel(TinyModel):
    def training_step(self, dataloader_iter):
        batch, _, _ = next(dataloader_iter)
        time.sleep(0.002)
        return self.layer(batch).pow(2).mean()


def truth_loader(dataset, batch_size=2, **kwargs):
    loader = TruthLoader(dataset, batch_size=batch_size, **kwargs)
    loader.spent, loader.starts = [], []
    return loader


# ---------------------------------------------------------------------------------------------- one fit, every surface
EPOCHS, STEPS = 4, 30  # 60 samples in batches of 2


class Lines(logging.Handler):
    """What the callback prints (through Lightning's rank-zero logger)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def one(self, text):
        (line,) = [line for line in self.lines if text in line]
        return line


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """4 epochs of 30 steps, each waiting about 8 ms for its batch and computing about 5: the default windows
    (batches 11-13 of every epoch, each written before the next epoch starts), a data-wait alert in epoch 0 with the
    window it records; a CSV log for ``profkit report`` and a logger that keeps every row. The windows go to the
    finalizing process (the path of any trace over a MB), whose CPU the test reaps."""
    root = tmp_path_factory.mktemp("truth")
    dataset = SleepDataset(2 * STEPS, delay=0.004)
    loader = truth_loader(dataset)
    combined = LightningFetch(loader)
    truth, recorder, lines, alerts = Truth(loader, combined), Recorder(), Lines(), []
    monitor = PerformanceMonitor(alert_window=10, on_alert=alerts.append)
    waiting = [WaitForTraces(monitor, epoch) for epoch in range(1, EPOCHS)]
    csv = CSVLogger(str(root), name="csv")
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    logger.addHandler(lines)
    level, logger.level = logger.level, logging.INFO
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        with warnings.catch_warnings(), pytest.MonkeyPatch.context() as patch:
            patch.setattr(writer, "IN_THREAD_BYTES", -1)
            warnings.simplefilter("ignore")
            # the waits first: they are the test's, outside the epoch both clocks time
            make_trainer(root, [*waiting, truth, monitor, truth.after()], max_epochs=EPOCHS, logger=[csv, recorder],
                         log_every_n_steps=1).fit(ComputeModel(dataset), combined)
    finally:
        logger.removeHandler(lines)
        logger.level = level
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return dict(root=root, log_dir=csv.log_dir, truth=truth.epochs, rows=recorder.rows, lines=lines, alerts=alerts,
                child_cpu=child_cpu, traces=trace_files(root))


def epoch_rows(run):
    return [(step, m) for step, m in run["rows"] if "profkit/data_wait_ratio" in m]


def raw_figures(path):
    """Counted over the raw trace, as its format defines them: the ``ProfilerStep#N`` spans (their numbers and
    durations), the DataLoader spans inside them, and every host operator's calls and duration."""
    events = [e for e in read_trace(path)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    inside = [(s["ts"], s["ts"] + s["dur"]) for s in steps]
    loading = [e for e in events if e["name"].startswith("enumerate(DataLoader)#") and e["name"].endswith(".__next__")
               and any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b in inside)]
    operators = {}
    for e in events:
        if e.get("cat", "").lower() in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver") and \
                not e["name"].startswith("ProfilerStep#"):
            calls, total = operators.get(e["name"], (0, 0.0))
            operators[e["name"]] = (calls + 1, total + e["dur"])
    step_us = sum(s["dur"] for s in steps)
    return dict(steps=[int(s["name"].split("#")[1]) for s in steps], step_us=step_us,
                data_wait_us=sum(e["dur"] for e in loading), operators=operators)


def test_logged_epoch_figures_are_the_tests_own_timing(run):
    """``data_wait_ratio``, ``data_wait_s``, ``train_s``, ``step_time_ms_mean`` and ``_p90`` of every epoch, against
    the test's clock around Lightning's fetch and the DataLoader's ``next()``."""
    rows = epoch_rows(run)
    assert len(rows) == EPOCHS
    for (_, row), truth in zip(rows, run["truth"]):
        assert len(truth.starts) == truth.steps == STEPS
        assert truth.near_ratio(row["profkit/data_wait_ratio"]), (row["profkit/data_wait_ratio"], truth.ratio)
        assert row["profkit/data_wait_ratio"] == pytest.approx(truth.loader_ratio, abs=0.02)
        assert row["profkit/data_wait_s"] == pytest.approx(sum(truth.fetch_s), rel=0.02)
        assert row["profkit/train_s"] == pytest.approx(truth.train_s, rel=0.02)
        assert truth.near_mean_step(row["profkit/step_time_ms_mean"]), (row, truth.mean_step_s)
        low, high = truth.p90_bounds()
        assert 900 * low <= row["profkit/step_time_ms_p90"] <= 1100 * high, (row["profkit/step_time_ms_p90"], low, high)
        assert not any("gpu" in name or "peak_memory" in name for name in row)  # absent on CPU, not zero


def test_rolling_checks_and_the_alert_are_their_blocks_truth(run):
    """Each rolling check's ``rolling/data_wait_ratio`` (logged at the step of its block's last batch) and the alert
    against the test's clock over the same 10 steps; the alert's count and flag against the alerts delivered."""
    rolling = [(step, m["profkit/rolling/data_wait_ratio"]) for step, m in run["rows"] if "profkit/rolling/data_wait_ratio" in m]
    assert [step for step, _ in rolling] == list(range(9, EPOCHS * STEPS, 10))
    for step, ratio in rolling:
        epoch, last = divmod(step, STEPS)
        before = run["truth"][epoch - 1] if epoch else None
        assert run["truth"][epoch].near_block(ratio, last - 9, last, before), (step, ratio)
    (alert,) = run["alerts"]  # one episode through the fit: one alert (cooldown 1000 steps)
    assert (alert.epoch, alert.step, alert.checked) == (0, 19, "epoch 0, batches 10-19")
    assert run["truth"][0].near_block(alert.ratio, 10, 19), alert.ratio
    assert [m["profkit/data_wait_alerts"] for _, m in epoch_rows(run)] == [1.0] * EPOCHS
    assert [m["profkit/data_wait_alert"] for _, m in epoch_rows(run)] == [1.0] * EPOCHS  # every epoch above 20%
    assert all(truth.ratio > 0.2 for truth in run["truth"])


def test_the_end_of_fit_lines_are_the_raw_traces_the_tests_clock_and_the_reaped_child(run):
    """The windows' line against a count over the raw traces, its "every step" against the test's clock, and the
    CPU line (with the logged ``overhead/helper_cpu_s``) against the reaped finalizing process."""
    raws = [raw_figures(path) for path in run["traces"]]
    assert len(raws) == EPOCHS + 1  # a window per epoch, and the alert's
    line = run["lines"].one("windows of rank 0") + " " + run["lines"].one("every step of the last epoch")
    found = re.search(r"last (\d+) windows of rank 0: a profiled step took ([0-9.]+) ms, data wait ([0-9.]+)%.*"
                      r"every step of the last epoch: ([0-9.]+) ms on average", line)
    assert found, line
    assert int(found[1]) == len(raws)
    # each figure is the mean over the windows (summary's aggregate), shown to one decimal
    assert float(found[2]) == pytest.approx(np.mean([r["step_us"] / len(r["steps"]) for r in raws]) / 1000, abs=0.051)
    assert float(found[3]) / 100 == pytest.approx(np.mean([r["data_wait_us"] / r["step_us"] for r in raws]), abs=0.00051)
    assert run["truth"][-1].near_mean_step(float(found[4])), (found, run["truth"][-1].mean_step_s)

    cpu_line = run["lines"].one("writing traces took")
    found = re.search(r"took ([0-9.]+) s of CPU beside training on rank 0, ([0-9.]+) s of it after the last epoch", cpu_line)
    total, tail = float(found[1]), float(found[2])
    logged = [m.get("profkit/overhead/helper_cpu_s") for _, m in epoch_rows(run)]
    assert all(v is not None and v > 0 for v in logged[1:]), logged  # each window is written in the next epoch
    assert sum(v or 0.0 for v in logged) + tail == pytest.approx(total, abs=0.002), (logged, cpu_line)  # 3 decimals
    assert run["child_cpu"] - 0.05 < total < run["child_cpu"] + 0.1, (total, run["child_cpu"])  # + the writer thread


def summary_json(*args):
    done = subprocess.run([PROFKIT, *args, "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_summary_and_compare_are_counts_over_the_raw_trace(run):
    """Every trace's steps, step time, data wait and whole operator table in ``profkit summary``, and both sides of
    ``profkit compare``, against a count over the raw trace; the trace's data wait against the test's clock."""
    shown = summary_json("summary", os.path.join(run["log_dir"], "profiler"))
    assert len(shown["traces"]) == len(run["traces"])
    for trace in shown["traces"]:
        raw = raw_figures(os.path.join(run["log_dir"], trace["path"]))
        host = trace["host"]
        assert trace["step_breakdown"]["steps"] == raw["steps"] and host["steps"] == len(raw["steps"])
        assert host["step_time_us"] == pytest.approx(raw["step_us"], rel=1e-6)
        assert host["data_wait_us"] == pytest.approx(raw["data_wait_us"], rel=1e-6)
        table = {row["name"]: row for row in trace["operators"]["cpu"]}
        assert set(table) == set(raw["operators"])
        for name, (calls, total) in raw["operators"].items():
            # times are held as 32-bit floats from the trace's start: to within 0.01 µs a call
            assert table[name]["calls"] == calls and table[name]["total_us"] == pytest.approx(total, abs=0.01 * calls), name
            assert 0 <= table[name]["self_us"] <= table[name]["total_us"] + 1e-6, name
        # the trace's DataLoader spans lie inside the DataLoader's next() the test timed: at most its time, at least
        # that less the profiler's own work and the time the thread waited for a CPU in those steps (a busy machine's)
        epoch, first = divmod(raw["steps"][0], STEPS)
        last = first + len(raw["steps"])
        truth = run["truth"][epoch]
        timed, waited = sum(truth.loader_s[first:last]), truth.waited_s[last] - truth.waited_s[first]
        assert 0.9 * (timed - waited) <= raw["data_wait_us"] / 1e6 <= timed + 1e-4 * len(raw["steps"]), (timed, waited)

    a, b = sorted({os.path.dirname(p) for p in run["traces"]})[:2]
    compared = summary_json("compare", a, b)["figures"]
    for side, folder in (("a", a), ("b", b)):
        (raw,) = [raw_figures(p) for p in run["traces"] if os.path.dirname(p) == folder]
        assert compared["host_step_ms"][side] == pytest.approx(raw["step_us"] / len(raw["steps"]) / 1000, rel=1e-6)
        assert compared["data_wait_share"][side] == pytest.approx(raw["data_wait_us"] / raw["step_us"], rel=1e-6)
    assert compared["host_step_ms"]["diff"] == pytest.approx(compared["host_step_ms"]["b"] - compared["host_step_ms"]["a"])


def test_the_report_shows_the_tests_own_timing_and_the_raw_traces(run, tmp_path):
    """``profkit report``'s epoch table against the test's clock, its window lines against the raw traces."""
    page = tmp_path / "report.html"
    done = subprocess.run([PROFKIT, "report", "-o", str(page), run["log_dir"]], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    text = html.unescape(page.read_text())
    assert f"{EPOCHS} epoch(s), {len(run['traces'])} trace(s), {len(run['alerts'])} alert(s)" in done.stderr
    cells = re.findall(r"<tr><td>(\d+)</td><td>([0-9.]+)%</td><td>(-)</td><td>([0-9.]+) ms</td><td>([0-9.]+) ms</td>"
                       r"<td>(yes|no)</td></tr>", text)
    assert [int(c[0]) for c in cells] == list(range(EPOCHS)), text[:3000]
    for (_, wait, idle, mean, _, alert), truth in zip(cells, run["truth"]):
        assert truth.near_ratio(float(wait) / 100, 0.0055), (wait, truth.ratio)  # shown to 0.1%
        assert truth.near_mean_step(float(mean)), (mean, truth.mean_step_s)
        assert alert == ("yes" if truth.ratio > 0.2 else "no")
    windows = re.findall(r"(epoch=\d+-batch=\d+-\d+), rank 0.*?profiled step time ([0-9.]+) ms; data wait ([0-9.]+)%",
                         text)
    assert len(windows) == len(run["traces"])
    for folder, step_ms, wait in windows:
        (raw,) = [raw_figures(p) for p in run["traces"] if f"/{folder}/" in p]
        assert float(step_ms) == pytest.approx(raw["step_us"] / len(raw["steps"]) / 1000, abs=0.0051)
        assert float(wait) / 100 == pytest.approx(raw["data_wait_us"] / raw["step_us"], abs=0.00051)


# ---------------------------------------------------------------------------------------------- every kind of loader
CASES = {
    "0-workers": dict(),
    "validation-checkpoint-slow-logger": dict(validation=True, slow_logger=True),
    "2-workers": dict(num_workers=2),
    "dataloader_iter": dict(model=IterModel),
    "iterable": dict(iterable=True),
    "metrics-only": dict(profile=False),
}


@pytest.mark.parametrize("case", CASES)
def test_data_wait_ratio_matches_the_truth(tmp_path, case):
    opts = CASES[case]
    dataset = SleepIterable(60, delay=0.002) if opts.get("iterable") else SleepDataset(60, delay=0.002)
    loader = truth_loader(dataset, num_workers=opts.get("num_workers", 0),
                          persistent_workers=bool(opts.get("num_workers")))
    model = opts.get("model", ComputeModel)(dataset)
    recorder = Recorder(delay=0.005 if opts.get("slow_logger") else 0.0)
    combined = LightningFetch(loader)
    truth = Truth(loader, combined)
    monitor = PerformanceMonitor(profile=False) if opts.get("profile") is False else PerformanceMonitor(steps="5-6")
    callbacks = [truth, monitor, truth.after()]  # the truth ends its epoch before our epoch-end work and logging
    kwargs = dict(max_epochs=2, logger=[recorder], log_every_n_steps=1)
    val = None
    if opts.get("validation"):
        val = DataLoader(SleepDataset(10, delay=0.003), batch_size=2)
        callbacks.append(ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=10))
        kwargs.update(limit_val_batches=5, val_check_interval=10, enable_checkpointing=True)
    make_trainer(tmp_path, callbacks, **kwargs).fit(model, combined, val)
    logged = [m for _, m in recorder.rows if "profkit/data_wait_ratio" in m]
    assert len(logged) == 2
    for row, epoch in zip(logged, truth.epochs):
        ratio = row["profkit/data_wait_ratio"]
        # the definition (docs/metrics.md): Lightning's fetch of each batch, nothing of ours in it ...
        assert epoch.near_ratio(ratio), (case, ratio, epoch.ratio)
        # ... which is the DataLoader's next() and Lightning's wrapping of it (CombinedLoader), tens of µs a
        # batch (the median: a busy machine may take the core away between two readings now and then)
        wrapping = sorted(a - b for a, b in zip(epoch.fetch_s, epoch.loader_s))
        assert wrapping[0] >= 0 and wrapping[len(wrapping) // 2] < 200e-6, (case, wrapping)
        assert ratio == pytest.approx(epoch.loader_ratio, abs=0.02), case
        assert epoch.near_mean_step(row["profkit/step_time_ms_mean"]), (case, row, epoch.mean_step_s)
    # the epoch's figures come along; GPU figures are absent on CPU
    assert {"profkit/step_time_ms_mean", "profkit/step_time_ms_p90", "profkit/train_s"} <= set(logged[0])
    assert not any("peak_memory" in k or "gpu" in k for k in logged[0])
    if opts.get("validation"):
        assert 0 < logged[0]["profkit/val_data_wait_ratio"] <= 1


def test_step_times_of_a_long_epoch_are_all_kept(tmp_path):
    # more steps than the fetch timer keeps in its list before moving them to an array; the slow steps are
    # at the end, so a lost or doubled chunk moves the mean
    dataset = ConcatDataset([SleepDataset(1500), SleepDataset(600, delay=0.002)])
    loader = truth_loader(dataset, batch_size=1)
    truth, recorder = Truth(loader, LightningFetch(loader)), Recorder()
    make_trainer(tmp_path, [truth, PerformanceMonitor(profile=False)], max_epochs=1, logger=[recorder]).fit(
        TinyModel(dataset), loader
    )
    assert len(loader.starts) > 2 * STEP_CHUNK
    (row,) = [m for _, m in recorder.rows if "profkit/step_time_ms_mean" in m]
    assert truth.epochs[0].near_mean_step(row["profkit/step_time_ms_mean"]), (row, truth.epochs[0].mean_step_s)
