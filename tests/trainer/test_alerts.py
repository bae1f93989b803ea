"""Data-wait alerts with a real Trainer: episodes, advice, the hook, stop/raise, captures."""

import glob
import os
import pathlib
import re
import subprocess
import sys
import time
import warnings
from dataclasses import replace

import pytest
from conftest import (BurnDataset, SleepDataset, TinyModel, fetch_timing_removed, leftovers, make_trainer, profiler_steps,
                      read_trace, trace_files)
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from lightning_profkit import PerformanceMonitor
from lightning_profkit import DataWaitAlertError, DataWaitWarning  # as users import them
from lightning_profkit.machine import thread_scheduled_seconds, usable_cpus
from lightning_profkit.monitor.timing.loader_busy import LoaderWatch

HERE = os.path.dirname(os.path.abspath(__file__))


class Busy(TinyModel):
    """A model whose step takes ``work`` seconds, so a fed loop waits for nothing."""

    def __init__(self, dataset, work=0.002, **kwargs):
        super().__init__(dataset, **kwargs)
        self.work = work

    def training_step(self, batch, batch_idx):
        time.sleep(self.work)
        return super().training_step(batch, batch_idx)

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)


def fit(tmp_path, monitor, model, **kwargs):
    trainer = make_trainer(tmp_path, [monitor], **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model)
    return trainer, [w for w in caught if issubclass(w.category, DataWaitWarning)]


def test_data_bound_run_alerts_once_with_advice_and_fed_run_not_at_all(tmp_path):
    got = []
    monitor = PerformanceMonitor(profile=False, alert_window=10, on_alert=got.append)
    _, warned = fit(tmp_path / "a", monitor, Busy(SleepDataset(120, delay=0.004), work=0.006))
    assert len(got) == 1 and len(warned) == 2  # the alert, then the line that names the trace recorded for it
    assert got[0].trace_dir is None  # handed over when it fires; the callback's copy names the trace once written
    (alert,) = monitor.alerts
    assert alert.ratio > alert.threshold == 0.2 and alert.epoch == 0 and alert.worst_rank is None
    assert alert.advice[0].startswith("num_workers=0") and "num_workers=" in alert.message
    assert str(alert.step) in str(warned[0].message) and alert.trace_dir in str(warned[1].message)

    fed = PerformanceMonitor(profile=False, alert_window=10)
    # samples already in memory and a step of 30 ms: fed with room to spare even when other processes take the
    # CPUs (workers that slept 1 ms a sample read 0.34 beside four busy processes: waking them waited for a CPU)
    _, warned = fit(tmp_path / "b", fed, Busy(SleepDataset(120), work=0.03))
    assert fed.alerts == [] and warned == []


def test_alert_points_to_a_trace_of_the_steps_after_it(tmp_path):
    got = []
    monitor = PerformanceMonitor(profile=False, alert_window=10, on_alert=got.append)
    fit(tmp_path, monitor, Busy(SleepDataset(120, delay=0.004), work=0.006))
    (alert,) = monitor.alerts
    assert got == [replace(alert, trace_dir=None)]
    assert alert.trace_dir and os.path.isdir(alert.trace_dir) and alert.trace_dir.startswith(str(tmp_path))
    (trace,) = glob.glob(os.path.join(alert.trace_dir, "*.pt.trace.json.gz"))
    steps = profiler_steps(read_trace(trace))
    assert steps and min(steps) > alert.step and len(steps) == 3
    assert trace_files(tmp_path) == [trace] and leftovers(tmp_path) == []


def test_stop_ends_training_at_the_next_step_with_metrics_and_traces(tmp_path):
    got = []
    monitor = PerformanceMonitor(steps="2-3", alert_window=10, alert_action="stop", on_alert=got.append)
    logger = CSVLogger(str(tmp_path), name="csv")
    trainer, _ = fit(tmp_path, monitor, Busy(SleepDataset(120, delay=0.004), work=0.006), logger=logger,
                     max_epochs=3)
    (alert,) = got
    assert trainer.global_step == alert.step + 1 < 60  # the step that fired was the last
    assert alert.trace_dir is None
    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
        text = f.read()
    assert "profkit/data_wait_ratio" in text and "profkit/data_wait_alert" in text
    assert [os.path.basename(os.path.dirname(p)) for p in trace_files(tmp_path)] == ["epoch=0000-batch=000002-000003"]
    assert leftovers(tmp_path) == []


def test_raise_gives_a_catchable_error_and_cleans_up(tmp_path):
    monitor = PerformanceMonitor(every_n_steps=7, active=2, alert_window=10, alert_action="raise")
    trainer = make_trainer(tmp_path, [monitor])
    with pytest.raises(DataWaitAlertError) as err:
        trainer.fit(Busy(SleepDataset(120, delay=0.004), work=0.006))
    assert err.value.alert.ratio > 0.2 and "num_workers" in str(err.value)
    assert fetch_timing_removed(trainer) and leftovers(tmp_path) == []
    assert all(profiler_steps(read_trace(p)) for p in trace_files(tmp_path))  # windows written before it are whole


def test_capture_requested_from_another_process(tmp_path):
    steps = 1500
    run = subprocess.Popen([sys.executable, os.path.join(HERE, "capture_script.py"), str(tmp_path), str(steps)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        markers, deadline = [], time.time() + 120  # no logger: the run's own folder, profiler/run=...
        while not markers and time.time() < deadline and run.poll() is None:
            markers = glob.glob(str(tmp_path / "profiler" / "run=*" / ".profkit-run"))
            time.sleep(0.1)
        assert len(markers) == 1, "the run did not start"
        marker = pathlib.Path(markers[0])
        profkit = os.path.join(os.path.dirname(sys.executable), "profkit")
        buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as users run it
        asked = subprocess.run([profkit, "capture", str(tmp_path), "--steps", "4"], capture_output=True, text=True,
                               env=buffered)
        assert asked.returncode == 0 and "requested a window of 4 steps" in asked.stdout, asked.stderr
        while not trace_files(tmp_path) and time.time() < deadline and run.poll() is None:
            time.sleep(0.05)
        found = trace_files(tmp_path)
        assert found and run.poll() is None  # written while training goes on
        out, _ = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 0, out[-2000:]
    recorded = profiler_steps(read_trace(found[0]))
    assert len(recorded) == 4 and max(recorded) < steps - 1
    said = re.search(r"recording 4 steps from batch (\d+) of epoch (\d+) \(requested from outside\)", out)
    folder = os.path.basename(os.path.dirname(found[0]))  # where the line said the window is
    assert said and folder.startswith(f"epoch={int(said[2]):04d}-batch={int(said[1]):06d}-"), (out[-2000:], folder)
    assert not marker.exists() and leftovers(tmp_path) == []


def test_rolling_checks_log_a_curve_while_the_epoch_runs(tmp_path, monkeypatch):
    from lightning_profkit.monitor.alerting.checks import RollingChecks

    seen = []  # the checks' own figures: (ratio, rank) of each check, as the rule gets them
    worst = RollingChecks.worst
    monkeypatch.setattr(RollingChecks, "worst", staticmethod(lambda rows: seen.append(worst(rows)) or seen[-1]))
    monitor = PerformanceMonitor(profile=False, alert_window=50, alert_threshold=None)
    fit(tmp_path, monitor, Busy(SleepDataset(400, delay=0.001), batch_size=1, work=0.001),
        logger=CSVLogger(tmp_path, name="csv"))
    (path,) = glob.glob(os.path.join(str(tmp_path), "csv", "*", "metrics.csv"))
    import csv

    with open(path) as f:
        rows = list(csv.DictReader(f))
    curve = [(int(r["step"]), float(r["profkit/rolling/data_wait_ratio"]), float(r["profkit/rolling/step_time_ms"]))
             for r in rows if r.get("profkit/rolling/data_wait_ratio")]
    assert [s for s, _, _ in curve] == list(range(49, 400, 50))  # one point per check, at its step
    assert [ratio for _, ratio, _ in curve] == [ratio for ratio, _ in seen]
    assert all(0.2 < ratio < 0.8 for _, ratio, _ in curve)  # 1 ms of data against 1 ms of work (and Lightning's)
    (epoch,) = [r for r in rows if r.get("profkit/step_time_ms_mean")]
    mean_step = sum(ms for _, _, ms in curve) / len(curve)
    assert mean_step == pytest.approx(float(epoch["profkit/step_time_ms_mean"]), rel=0.05)


def test_alerts_are_in_tensorboards_text_tab(tmp_path, tensorboard_server):
    from lightning.pytorch.loggers import TensorBoardLogger

    monitor = PerformanceMonitor(alert_window=10, steps="2-3")
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    fit(tmp_path, monitor, Busy(SleepDataset(120, delay=0.004), work=0.002), logger=logger)
    (alert,) = monitor.alerts
    server = tensorboard_server(logger.log_dir)
    server.wait_for(lambda: server.get("tags", plugin="text"))
    tag = "profkit/alerts/text_summary"  # torch's SummaryWriter.add_text adds "/text_summary"
    (run,) = server.wait_for(lambda: [r for r, names in server.get("tags", plugin="text").items() if tag in names])
    (shown,) = server.get("text", plugin="text", run=run, tag=tag)
    assert shown["step"] == alert.step
    assert "data wait was" in shown["text"] and "<li>num_workers=0" in shown["text"]
    first, last = alert.recording  # the text is written when the alert fires: the steps, not yet their trace
    assert f"Recording {last - first + 1} steps after it" in shown["text"]
    assert alert.trace_dir.endswith(f"epoch=0000-batch={first:06d}-{last:06d}")  # epoch 0: its batches are the steps


@pytest.mark.parametrize("others", [0, 2], ids=["alone", "beside 2 busy processes"])
@pytest.mark.parametrize("dataset, says", [
    (SleepDataset(160, delay=0.01), ("the workers wait on storage",)),
    (BurnDataset(160, burn=0.01), ("the workers compute on every CPU", "the workers compute on CPUs that are all taken")),
], ids=["waiting on I/O", "computing"])
def test_the_advice_on_workers_rests_on_how_busy_they_were(tmp_path, two_cpus, busy_cores, dataset, says, others):
    """Two workers on this 2-CPU machine, each sample 10 ms, the step 1 ms: both runs wait on data; the advice
    tells the workers that wait (on storage, here a sleep) from those that compute, by the CPU they used and their
    wait for a CPU, also where other processes keep both CPUs busy (a computing worker then gets half a CPU: it
    read as waiting on storage). Pinned to 2 CPUs, on any machine with at least 2."""
    assert usable_cpus() == 2
    busy_cores(others)
    got = []
    monitor = PerformanceMonitor(profile=False, alert_window=10, on_alert=got.append)
    fit(tmp_path, monitor, Busy(dataset, work=0.001, num_workers=2))
    (alert,) = got
    assert any(said in alert.advice[0] for said in says), alert.advice
    assert any(line.startswith("measured: 2 workers: busy") for line in alert.advice), alert.advice


class OwnClock:
    """A dataset that reads its thread's seconds on a CPU (``time.thread_time``) and waiting for one
    (``/proc/thread-self/schedstat``) and its wall seconds around each sample: the truth for the training thread's
    figures where the training process loads."""

    def __init__(self, dataset):
        self.dataset, self.seen = dataset, {}

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        start = time.perf_counter()  # around the reads: a wait for a CPU between them is in the wall time too
        before = self.scheduled()
        sample = self.dataset[i]
        after = self.scheduled()
        self.seen[i] = (after[0] - before[0], after[1] - before[1], time.perf_counter() - start)
        return sample

    @staticmethod
    def scheduled():
        """The thread's CPU (schedstat's lags the running thread by up to a tick) and its wait for a CPU so far."""
        return time.thread_time(), thread_scheduled_seconds()[1]

    def computed(self, samples):
        """The samples' CPU over their wall time less their wait for a CPU, at most 1 (as the advice's)."""
        ran, queued, wall = (sum(self.seen[i][k] for i in samples) for k in range(3))
        return min(ran / (wall - queued), 1.0)


@pytest.mark.skipif(thread_scheduled_seconds()[1] is None, reason="the truth needs the OS's wait for a CPU (Linux)")
@pytest.mark.parametrize("others", [0, 2], ids=["alone", "beside 2 busy processes"])
@pytest.mark.parametrize("dataset, low, high", [
    (SleepDataset(120, delay=0.01), 0.0, 0.49), (BurnDataset(120, burn=0.01), 0.6, 1.0),
], ids=["waiting on I/O", "computing"])
def test_the_advice_says_how_much_of_the_wait_the_training_process_computed(tmp_path, monkeypatch, busy_cores, dataset,
                                                                             low, high, others):
    """No workers, each sample 10 ms, the step 1 ms: the training thread's CPU in its fetches over their wait less
    its wait for a CPU tells a sample read from storage (a sleep) from one computed in the training process, also
    where other processes keep the CPUs busy, and agrees with the samples' own reading of the OS's figures over the
    batches the advice measured. Where the machine is short of memory or disk, the thread also stalls in the samples
    themselves (76% and 77% read in two runs of the suite beside package installs): the truth says so too. Its time
    on a CPU or waiting for one tells them apart too on a quiet machine; on a busy one a thread woken from its sleep
    waits for a CPU (32-97% read beside two burners and two other tests)."""
    busy_cores(others)
    spans, got = [], []
    busy = LoaderWatch.busy

    def measured(watch, pids, now, wait_s, fetched=0, fetch_cpu_s=None):  # the batches from the mark to this call
        spans.append((watch.mark[4] if watch.mark else fetched, fetched))
        return busy(watch, pids, now, wait_s, fetched, fetch_cpu_s)

    monkeypatch.setattr(LoaderWatch, "busy", measured)
    told = OwnClock(dataset)
    monitor = PerformanceMonitor(profile=False, alert_window=10, on_alert=lambda alert: got.append((alert, spans[-1])))
    fit(tmp_path, monitor, Busy(told, work=0.001))
    ((alert, (first, last)),) = got
    taking = re.search(r"ms of CPU in each fetch, (\d+)% of its wait less its wait for a CPU", "\n".join(alert.advice))
    assert taking and last - first >= 10, (first, last, alert.advice)
    truth = told.computed(range(2 * first, 2 * last))  # batches of 2, in order
    assert int(taking[1]) / 100 == pytest.approx(truth, abs=0.1), (truth, alert.advice)
    assert low <= int(taking[1]) / 100 <= high, (truth, alert.advice)
    share = re.search(r"on or waiting for a CPU (?:(\d+)-)?(\d+)% of its", alert.advice[1])
    assert share, alert.advice
    if not others:
        assert low <= int(share[1] or share[2]) / 100 <= int(share[2]) / 100 <= high, alert.advice
    assert ("waiting on I/O" in alert.advice[0]) == (high < 0.5)


def test_a_second_fit_into_a_running_fits_folder_gets_its_own(tmp_path):
    """Two fits given one `dirpath` at once: each window folder got both fits' traces, and the first fit to end
    removed the marker the other still needed. Now the second writes to a run folder of its own, says so, and
    the first is still reachable by `profkit capture` after the second has ended."""
    shared = tmp_path / "shared"
    run = subprocess.Popen([sys.executable, os.path.join(HERE, "capture_script.py"), str(tmp_path / "a"), "3000",
                            str(shared)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while not (shared / ".profkit-run").exists() and time.time() < deadline and run.poll() is None:
            time.sleep(0.1)
        monitor = PerformanceMonitor(steps="1-2", alert_threshold=None, dirpath=str(shared))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            make_trainer(tmp_path / "b", [monitor]).fit(TinyModel(SleepDataset(8)))
        said = [str(w.message) for w in caught if "another fit" in str(w.message)]
        assert len(said) == 1 and f"pid {run.pid} on" in said[0] and monitor.trace_dir in said[0], said
        assert re.fullmatch(re.escape(str(shared)) + r"/run=\d{8}-\d{6}\.\d{6}-[0-9a-f]{6}", monitor.trace_dir)
        assert [os.path.dirname(os.path.dirname(p)) for p in monitor.traces] == [monitor.trace_dir]
        profkit = os.path.join(os.path.dirname(sys.executable), "profkit")
        asked = subprocess.run([profkit, "capture", str(shared), "--steps", "2"], capture_output=True, text=True)
        assert asked.returncode == 0 and f"pid {run.pid}" in asked.stdout, asked.stderr
        out, _ = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 0, out[-2000:]
    (first,) = [p for p in trace_files(shared) if "run=" not in p]
    assert len(profiler_steps(read_trace(first))) == 2


@pytest.mark.parametrize("batches, said, recorded", [
    (40, "data-wait alert at the fit's last step: no steps are left to record for it", []),
    (44, None, [20, 21]),  # at once, without the warm-up step: the fit ends at step 21
], ids=["at the last step", "two steps before the end"])
def test_an_alert_near_the_fits_end_promises_no_step_past_it(tmp_path, caplog, batches, said, recorded):
    """The alert fires at step 19 (two checks of 10 steps): where no step is left it says so and records nothing; else
    it records at once what is left, and the line naming the trace follows once the trace is written."""
    monitor = PerformanceMonitor(profile=False, alert_window=10)
    with caplog.at_level("INFO"):
        _, warned = fit(tmp_path, monitor, Busy(SleepDataset(batches, delay=0.004), work=0.001))
    (alert,) = monitor.alerts
    assert alert.step == 19 and (alert.recording or []) == (recorded and tuple(recorded) or [])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("lightning_profkit: data-wait")]
    assert lines == ([f"lightning_profkit: {said}"] if said else [])
    messages = [str(w.message) for w in warned]
    if recorded:
        assert "Recording 2 steps after it; their trace is named when written" in messages[0]
        assert messages[1:] == [f"trace of the steps after the alert (epoch 0, batches 10-19):\n  {alert.trace_dir}"]
        (trace,) = trace_files(tmp_path)
        assert profiler_steps(read_trace(trace)) == recorded and os.path.dirname(trace) == alert.trace_dir
    else:
        assert len(messages) == 1 and "Recording" not in messages[0] and trace_files(tmp_path) == []
