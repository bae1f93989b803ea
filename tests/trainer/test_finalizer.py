"""One finalizing process per fit: the same process for every window, nice 10 below training, gone after ``fit``;
killed mid-run, it costs no training step and the next windows are written by a new one. Windows of a MB of JSON
or less are finalized in the writer thread, with no process at all."""

import os
import signal

import pytest
from conftest import BurnDataset, SleepDataset, TinyModel, leftovers, make_trainer, trace_files
from lightning.pytorch import Callback

from lightning_profkit import PerformanceMonitor
from lightning_profkit.machine import usable_cpus
from lightning_profkit.monitor.writing.process import CHILD


def finalizers():
    """Our children that run the finalizing module, with their scheduling policy and nice value."""
    found = {}
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and any(CHILD.encode() in arg for arg in cmdline):
            found[int(pid)] = os.sched_getscheduler(int(pid)), os.getpriority(os.PRIO_PROCESS, int(pid))
    return found


class Watch(Callback):
    """The finalizing processes seen at every step; ``kill_at``: kill the one there at that step."""

    def __init__(self, kill_at=None):
        self.seen, self.kill_at, self.killed, self.steps = {}, kill_at, None, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps += 1
        now = finalizers()
        self.seen.update(now)
        if self.kill_at is not None and trainer.fit_loop.epoch_loop.total_batch_idx == self.kill_at and now:
            self.killed = next(iter(now))
            os.kill(self.killed, signal.SIGKILL)


def test_small_windows_are_finalized_in_the_writer_thread_with_no_process(tmp_path):
    watch = Watch()
    monitor = PerformanceMonitor(every_n_steps=6, warmup=0, active=2, alert_threshold=None)
    make_trainer(tmp_path, [monitor, watch]).fit(TinyModel(SleepDataset(80, delay=0.004)))
    assert len(trace_files(tmp_path)) == 6 and leftovers(tmp_path) == []
    assert watch.seen == {} and finalizers() == {}
    assert sorted(monitor.traces) == sorted(trace_files(tmp_path))


def test_one_finalizing_process_below_training_for_every_window_and_none_after(tmp_path, finalizing_process):
    watch = Watch()
    monitor = PerformanceMonitor(every_n_steps=6, warmup=0, active=2, alert_threshold=None)
    make_trainer(tmp_path, [monitor, watch]).fit(TinyModel(SleepDataset(80, delay=0.004)))  # 40 steps, windows at 6, 12, ..., 36
    assert len(trace_files(tmp_path)) == 6 and leftovers(tmp_path) == []
    assert len(watch.seen) == 1, watch.seen  # one process for all of them
    assert set(watch.seen.values()) == {(os.SCHED_OTHER, os.getpriority(os.PRIO_PROCESS, 0) + 10)}
    assert finalizers() == {}  # ended with the fit
    (pid,) = watch.seen
    assert not os.path.exists(f"/proc/{pid}")  # and reaped


def test_a_killed_finalizing_process_is_replaced_and_training_goes_on(tmp_path, recwarn, finalizing_process):
    watch = Watch(kill_at=20)
    monitor = PerformanceMonitor(every_n_steps=6, warmup=0, active=2, alert_threshold=None)
    make_trainer(tmp_path, [monitor, watch]).fit(TinyModel(SleepDataset(80, delay=0.004)))
    assert watch.steps == 40 and watch.killed is not None
    assert len(watch.seen) == 2 and finalizers() == {}  # the killed one and its replacement, both gone
    written = {os.path.basename(os.path.dirname(p)) for p in trace_files(tmp_path)}
    assert {"epoch=0000-batch=000024-000025", "epoch=0000-batch=000030-000031", "epoch=0000-batch=000036-000037"} <= written
    assert leftovers(tmp_path) == []
    lost = [str(w.message) for w in recwarn if "finalizing process ended" in str(w.message)]
    assert len(lost) <= 1  # the window in hand, if the kill came while one was, is reported once


@pytest.mark.parametrize("finished_by", ["writer thread", "finalizing process"])
def test_traces_stream_while_loader_workers_and_another_job_fill_every_core(tmp_path, busy_cores, request, finished_by):
    """Loader workers that compute (as many as CPUs) and as many more busy processes beside the fit: every window's
    trace is written before the last epoch begins, with no bound on any clock (at idle priority they were written
    only once the fit's end stopped the workers); by the writer thread (these traces are small) and by the finalizing
    process (as a trace over a MB is)."""
    if finished_by == "finalizing process":
        request.getfixturevalue("finalizing_process")
    epochs, written = 4, {}

    class Look(Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            names = {os.path.basename(os.path.dirname(p)) for p in trace_files(tmp_path)}
            written[trainer.current_epoch] = sorted(names)

    busy_cores(usable_cpus())
    monitor = PerformanceMonitor(alert_threshold=None)  # the default windows: batches 11-13 of every epoch
    model = TinyModel(BurnDataset(120, burn=0.01), batch_size=2, num_workers=usable_cpus())
    make_trainer(tmp_path, [monitor, Look()], max_epochs=epochs).fit(model)
    windows = [f"epoch={e:04d}-batch=000011-000013" for e in range(epochs)]
    assert written[epochs - 1] == windows[:-1] and len(trace_files(tmp_path)) == epochs, written
