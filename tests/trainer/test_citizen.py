"""A good Lightning citizen: copies and pickles at any point of a fit, nothing left behind however a fit
ends, waits that a patched clock cannot cut short, and nothing on disk before there is something to write."""

import copy
import itertools
import json
import os
import pickle
import subprocess
import sys
import time
import warnings
from unittest import mock

import pytest
import torch
from conftest import (SleepDataset, TinyModel, fetch_timing_removed, leftovers, make_trainer, profiler_steps,
                      read_trace, trace_files)
from lightning.pytorch import Callback
from lightning.pytorch.tuner import Tuner

from lightning_profkit import PerformanceMonitor, capture_request
from lightning_profkit.atomic_files import write_atomic
from lightning_profkit.internals import SET_WHILE_NEEDED

PROFKIT = os.path.join(os.path.dirname(sys.executable), "profkit")


def window_names(monitor):
    return sorted(os.path.basename(os.path.dirname(p)) for p in monitor.traces)


def same_configuration(a, b):
    return a.options == b.options


class CopyAt(Callback):
    """Pickles and deep-copies the monitor (and the whole Trainer) at chosen points of the fit."""

    def __init__(self, monitor, steps=()):
        self.monitor, self.steps, self.copies = monitor, set(steps), {}

    def _copy(self, trainer, when):
        in_window = torch.autograd.profiler._is_profiler_enabled
        copies = [pickle.loads(pickle.dumps(self.monitor)), copy.deepcopy(self.monitor)]
        pickle.loads(pickle.dumps(trainer))
        copy.deepcopy(trainer)
        self.copies[when] = (in_window, copies)

    def on_fit_start(self, trainer, pl_module):
        self._copy(trainer, "fit start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        if step in self.steps:
            self._copy(trainer, step)

    def on_train_end(self, trainer, pl_module):
        self._copy(trainer, "train end")


def test_pickle_and_deepcopy_at_every_point_of_a_fit(tmp_path):
    # checks every 5 steps (an alert may fire: a tiny model's data wait is near the threshold under load), but only
    # the planned windows are recorded
    monitor = PerformanceMonitor(steps="4-6,15-16", alert_window=5, max_captures=3, capture_on_alert=False)
    before = [pickle.loads(pickle.dumps(monitor)), copy.deepcopy(monitor)]
    spy = CopyAt(monitor, steps=[2, 5, 10])  # between windows, inside one, after one
    trainer = make_trainer(tmp_path, [monitor, spy])
    trainer.fit(TinyModel(SleepDataset(40)))
    after = [pickle.loads(pickle.dumps(monitor)), copy.deepcopy(monitor)]
    saved = tmp_path / "trainer.pt"
    torch.save(trainer, saved)  # as Lightning's own test_model_torch_save does
    assert torch.load(saved, weights_only=False).callbacks

    # the fit itself was not disturbed: both windows recorded whole, nothing left behind
    assert window_names(monitor) == ["epoch=0000-batch=000004-000006", "epoch=0000-batch=000015-000016"]
    assert sorted(profiler_steps(read_trace(p)) for p in monitor.traces) == [[4, 5, 6], [15, 16]]
    assert fetch_timing_removed(trainer) and leftovers(tmp_path) == []
    assert spy.copies[5][0] and not spy.copies[2][0]  # one copy was made with the profiler session running
    for when, (_, copies) in spy.copies.items():
        for c in copies:
            assert same_configuration(c, monitor), when
            assert c._fit is None and c._trainer is None, when
            # Lightning skips a copy's per-step hooks: none is a method bound to the original
            assert [getattr(c, hook) for hook in SET_WHILE_NEEDED] == [None] * len(SET_WHILE_NEEDED), when
    assert all(same_configuration(c, monitor) for c in before + after)
    assert all(c.state_dict() == monitor.state_dict() for c in after)
    assert after[0].traces == monitor.traces  # what the fit recorded travels with the copy


def test_a_copy_made_during_the_fit_profiles_a_fit_of_its_own(tmp_path):
    monitor = PerformanceMonitor(steps="4-5", alert_threshold=None)
    spy = CopyAt(monitor, steps=[4])
    make_trainer(tmp_path / "a", [monitor, spy]).fit(TinyModel(SleepDataset(20)))
    _, (clone, _) = spy.copies[4]
    make_trainer(tmp_path / "b", [clone]).fit(TinyModel(SleepDataset(20)))
    assert window_names(monitor) == ["epoch=0000-batch=000004-000005"]
    assert [p for p in clone.traces if str(tmp_path / "b") in p] and leftovers(tmp_path) == []


def test_a_trainer_copied_mid_fit_fits_with_one_timer_and_leaves_none(tmp_path):
    """A Trainer copied mid-fit carries a copy of the fetch timer on its loops, with no fit of its own to take it off:
    the copy's fit puts its own timer in its place and leaves the loops as Lightning made them."""
    class CopyTrainer(Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 2:
                self.copied = copy.deepcopy(trainer)

    spy = CopyTrainer()
    make_trainer(tmp_path / "a", [PerformanceMonitor(steps="4-5", alert_threshold=None), spy]).fit(
        TinyModel(SleepDataset(20)))
    copied = spy.copied
    assert not fetch_timing_removed(copied)
    copied.callbacks = copied.callbacks[:1]
    copied.fit(TinyModel(SleepDataset(20)))
    assert fetch_timing_removed(copied) and window_names(copied.callbacks[0])


def test_user_callback_deep_copying_the_callbacks_in_on_fit_start(tmp_path):
    class Snapshot(Callback):
        def on_fit_start(self, trainer, pl_module):
            self.saved = copy.deepcopy(trainer.callbacks)

    monitor = PerformanceMonitor(steps="3-4", alert_threshold=None)
    snapshot = Snapshot()
    trainer = make_trainer(tmp_path, [monitor, snapshot])
    trainer.fit(TinyModel(SleepDataset(20)))
    assert trainer.state.finished and window_names(monitor) == ["epoch=0000-batch=000003-000004"]
    assert isinstance(snapshot.saved[0], PerformanceMonitor) and snapshot.saved[0].traces == []


class LrModel(TinyModel):
    """A model the learning-rate finder can tune; while ``failing``, its fourth step fails."""

    def __init__(self, dataset, failing=False):
        super().__init__(dataset)
        self.lr, self.failing, self.failing_steps = 0.01, failing, 0

    def training_step(self, batch, batch_idx):
        if self.failing:
            self.failing_steps += 1
            if self.failing_steps == 4:
                raise RuntimeError("diverged")
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Batches(Callback):
    """Lightning's batch index of each of the fit's steps (``total_batch_idx``), as the steps begin."""

    def __init__(self):
        self.seen = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen[trainer.fit_loop.epoch_loop.total_batch_idx] = batch_idx


def test_failed_lr_find_leaves_nothing_and_a_later_fit_profiles(tmp_path, monkeypatch):
    import tqdm

    monkeypatch.setattr(tqdm.std.tqdm, "monitor_interval", 0)  # the finder's bar would leave tqdm's thread running
    monitor = PerformanceMonitor(steps="4-5", alert_threshold=None)
    trainer = make_trainer(tmp_path, [monitor], max_epochs=1)
    callbacks, max_steps = list(trainer.callbacks), trainer.fit_loop.epoch_loop.max_steps
    model = LrModel(SleepDataset(40), failing=True)
    with pytest.raises(RuntimeError, match="diverged"):
        Tuner(trainer).lr_find(model, num_training=10, early_stop_threshold=None)
    # Lightning left the finder's callbacks in place and reached none of our hooks after setup
    assert monitor not in trainer.callbacks
    assert fetch_timing_removed(trainer) and not (tmp_path / "profiler").exists()

    # what the finder restores when it succeeds
    batches = Batches()
    trainer.callbacks, trainer.fit_loop.epoch_loop.max_steps, trainer.limit_val_batches = callbacks + [batches], max_steps, 0
    model.failing = False
    trainer.fit(model)
    # the fit's steps 4-5, named by their batches as Lightning numbered them (Lightning 2.5 goes on counting the
    # finder's steps: batches 0-1; later releases start again: batches 4-5)
    first, last = (batches.seen[step] for step in (4, 5))
    assert window_names(monitor) == [f"epoch=0000-batch={first:06d}-{last:06d}"]
    assert fetch_timing_removed(trainer) and leftovers(tmp_path) == []
    assert capture_request.running(monitor.trace_dir) is None


def test_loops_that_run_without_us_get_their_fetch_callbacks_back(tmp_path):
    """Callbacks swapped mid-fit, as Lightning's tuners do when run from a hook, and a failure while they
    are out: none of our hooks is called again, and the loops must not keep our timer."""

    class Fails(Callback):
        def __init__(self):
            self.steps = 0

        def on_train_batch_end(self, *args):
            self.steps += 1
            if self.steps == 4:
                raise RuntimeError("diverged")

    class Swap(Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                trainer.callbacks = [Fails()]

    monitor = PerformanceMonitor(steps="2-3")
    trainer = make_trainer(tmp_path, [monitor, Swap()], max_epochs=2)
    # its steps take long enough for the ownership check (1 s here) to come due before the failure
    with mock.patch("lightning_profkit.monitor.fit.OWNER_CHECK_S", 1.0), pytest.raises(RuntimeError, match="diverged"):
        trainer.fit(Slow(SleepDataset(40)))
    assert monitor not in trainer.callbacks and window_names(monitor) == ["epoch=0000-batch=000002-000003"]
    assert fetch_timing_removed(trainer) and not torch.autograd.profiler._is_profiler_enabled
    assert capture_request.running(monitor.trace_dir) is None and leftovers(tmp_path) == []


class Slow(TinyModel):
    def training_step(self, batch, batch_idx):
        if self.current_epoch == 1:
            time.sleep(0.4)
        return super().training_step(batch, batch_idx)


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("case", ["exited", "pid reused"])
def test_capture_refuses_a_marker_whose_process_is_gone(tmp_path, case):
    folder = tmp_path / "profiler"
    live = capture_request.LiveRun(str(folder))
    path = live.marker
    marker = json.loads(open(path).read())
    if case == "exited":
        marker["pid"] = _dead_pid()
    else:  # our own pid, alive, but a start time of another process
        marker["process_start"] = (marker["process_start"] or 0) + 1
    write_atomic(path, json.dumps(marker).encode())
    done = subprocess.run([PROFKIT, "capture", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "is not running" in done.stderr and str(marker["pid"]) in done.stderr
    assert not (folder / capture_request.REQUEST).exists()
    live.end()
    assert not os.path.exists(path)


@pytest.mark.parametrize("clock", ["constant", "racing"])
def test_a_patched_monotonic_clock_does_not_cut_the_flush_short(tmp_path, clock):
    # the last window ends with the fit, so teardown waits for the finalizing child
    monitor = PerformanceMonitor(steps="14-15", alert_threshold=None, flush_timeout=60)
    fake = mock.Mock(return_value=1000.0) if clock == "constant" else mock.Mock(side_effect=itertools.count(0, 30.0))
    with warnings.catch_warnings(record=True) as caught, mock.patch("time.monotonic", fake):
        warnings.simplefilter("always")
        make_trainer(tmp_path, [monitor]).fit(TinyModel(SleepDataset(32)))
    assert not [w for w in caught if "not written within flush_timeout" in str(w.message)]
    assert [profiler_steps(read_trace(p)) for p in trace_files(tmp_path)] == [[14, 15]]


@pytest.mark.parametrize("how", ["steps beyond the fit", "metrics only", "no captures"])
def test_a_fit_with_no_window_creates_no_trace_folder(tmp_path, monkeypatch, how):
    kwargs = {"steps beyond the fit": dict(steps="500"), "metrics only": dict(profile=False),
              "no captures": dict(steps="500", max_captures=0)}[how]
    seen = []

    class Look(Callback):
        def on_train_batch_start(self, trainer, *args):
            seen.append(os.path.isdir("profiler"))

    monkeypatch.chdir(tmp_path)  # logger=False and no default_root_dir: the current directory
    make_trainer(tmp_path, [PerformanceMonitor(**kwargs), Look()], default_root_dir=None).fit(TinyModel(SleepDataset(20)))
    assert os.listdir(tmp_path) == []
    if how == "no captures":  # nothing can be asked of the run, so nothing announces it either
        assert not any(seen)


def test_the_trace_folder_appears_with_its_first_window(tmp_path):
    monitor = PerformanceMonitor(steps="8-9", max_captures=0, alert_threshold=None)
    seen = {}

    class Look(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen[batch_idx] = (tmp_path / "profiler").is_dir()

    make_trainer(tmp_path, [monitor, Look()]).fit(TinyModel(SleepDataset(20)))
    assert not any(seen[i] for i in range(10))  # written once the window has ended, after step 9
    assert window_names(monitor) == ["epoch=0000-batch=000008-000009"]


def test_a_second_fit_into_a_folder_with_a_finished_fits_traces_writes_to_its_own(tmp_path):
    """A script run twice with one `dirpath`: the second fit's windows went beside the first's, and `profkit report`
    counted both fits' traces as one run's. Now the second writes to a run folder of its own and says so; `profkit
    summary` of the folder names each fit's windows apart."""
    shared = tmp_path / "shared"
    first = PerformanceMonitor(steps="1-2", alert_threshold=None, dirpath=str(shared))
    make_trainer(tmp_path / "a", [first]).fit(TinyModel(SleepDataset(8)))
    assert first.trace_dir == str(shared)
    second = PerformanceMonitor(steps="1-2", alert_threshold=None, dirpath=str(shared))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer(tmp_path / "b", [second]).fit(TinyModel(SleepDataset(8)))
    said = [str(w.message) for w in caught if "an earlier fit's traces are there" in str(w.message)]
    assert len(said) == 1 and said[0].endswith(f"\n  {second.trace_dir}"), said
    own = os.path.relpath(second.trace_dir, shared)
    assert own.startswith("run=") and os.sep not in own
    profkit = os.path.join(os.path.dirname(sys.executable), "profkit")
    done = subprocess.run([profkit, "summary", "--json", str(shared)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    windows = sorted(t["window"] for t in json.loads(done.stdout)["traces"])
    assert windows == sorted(["epoch=0000-batch=000001-000002", f"{own}/epoch=0000-batch=000001-000002"])
