"""Faults inside profiling windows, failures of our own code, and resuming from checkpoints (real Trainer)."""

import csv
import os
import re
import shutil
import signal
import warnings

import pytest
import torch
from conftest import (Recorder, SleepDataset, TinyModel, WaitForTraces, fetch_timing_removed, leftovers, make_trainer,
                      profiler_steps, read_trace, trace_files)
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lightning_profkit import PerformanceMonitor


class Boom(RuntimeError):
    pass


class FailingModel(TinyModel):
    def __init__(self, dataset, fail_at, error):
        super().__init__(dataset)
        self.fail_at, self.error = fail_at, error

    def training_step(self, batch, batch_idx):
        if batch_idx == self.fail_at:
            raise self.error
        return super().training_step(batch, batch_idx)


class FailingDataset(SleepDataset):
    def __getitem__(self, i):
        if i == 24:  # batch 12 with batch_size 2
            raise Boom("bad sample 24")
        return super().__getitem__(i)


def profiler_off():
    return not torch.autograd.profiler._is_profiler_enabled


def second_fit_works(tmp_path):
    monitor = PerformanceMonitor(steps="2-3", alert_threshold=None)
    make_trainer(tmp_path / "again", [monitor]).fit(TinyModel(SleepDataset(20)))
    return [os.path.basename(os.path.dirname(p)) for p in monitor.traces] == ["epoch=0000-batch=000002-000003"]


@pytest.mark.parametrize("where", ["training_step", "dataset"])
def test_exception_inside_a_window_reaches_the_user_unchanged(tmp_path, where):
    error = Boom("in the step")
    model = FailingModel(SleepDataset(40), 12, error) if where == "training_step" else TinyModel(FailingDataset(40))
    trainer = make_trainer(tmp_path, [PerformanceMonitor(steps="11-14", alert_threshold=None)])
    with pytest.raises(Boom) as caught:
        trainer.fit(model)
    if where == "training_step":
        assert caught.value is error
    assert profiler_off() and leftovers(tmp_path) == []
    for path in trace_files(tmp_path):  # kept whole: step 11, and step 12 up to the error
        assert profiler_steps(read_trace(path)) == [11, 12]
    assert fetch_timing_removed(trainer)
    assert second_fit_works(tmp_path)


def test_keyboard_interrupt_inside_a_window(tmp_path):
    trainer = make_trainer(tmp_path, [PerformanceMonitor(steps="11-14", alert_threshold=None)])
    try:
        with pytest.raises(SystemExit):  # Lightning turns Ctrl+C into a graceful shutdown and exit(1)
            trainer.fit(FailingModel(SleepDataset(40), 12, KeyboardInterrupt()))
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Lightning ignores SIGINT after shutdown
    assert trainer.interrupted and profiler_off() and leftovers(tmp_path) == []
    assert second_fit_works(tmp_path)


def test_a_bug_in_the_callback_stops_the_profiler_and_training_goes_on(tmp_path):
    class Faulty(Callback):
        """Puts a bug into the window runner of the fit, at the end of step 12 (a session is open there)."""

        def on_train_start(self, trainer, pl_module):
            runner = monitor._fit.runner
            step_end = runner.step_end

            def buggy(step, batch_idx, *args):
                step_end(step, batch_idx, *args)
                if batch_idx == 12:
                    raise ValueError("bug in our callback")

            runner.step_end = buggy

    monitor = PerformanceMonitor(steps="11-14,17", alert_threshold=None)
    trainer = make_trainer(tmp_path, [monitor, Faulty()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(TinyModel(SleepDataset(40)))
    assert trainer.state.finished and trainer.global_step == 20
    assert [str(w.message) for w in caught if "profiling is off" in str(w.message)] and profiler_off()
    # what was recorded is kept (step 13 had just begun), nothing after: no step 14, no window at 17
    assert [profiler_steps(read_trace(p)) for p in trace_files(tmp_path)] == [[11, 12, 13]]
    assert leftovers(tmp_path) == []


def test_write_failure_keeps_the_metrics(tmp_path):
    """The trace folder disappears mid-run (a file takes its place): one warning, metrics still logged."""
    monitor = PerformanceMonitor(every_n_steps=5, active=1, warmup=0, dirpath=str(tmp_path / "traces"))
    logger = CSVLogger(str(tmp_path), name="csv")

    class BreakFolder(ModelCheckpoint):
        def on_train_batch_start(self, trainer, *args):
            if trainer.global_step == 1:
                shutil.rmtree(tmp_path / "traces")
                (tmp_path / "traces").write_text("gone")

    trainer = make_trainer(tmp_path, [monitor, BreakFolder(dirpath=str(tmp_path / "ck"))], logger=logger, max_epochs=2,
                           enable_checkpointing=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(TinyModel(SleepDataset(40)))
    assert len([w for w in caught if "could not be written" in str(w.message)]) == 1
    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r.get("profkit/data_wait_ratio")]
    assert len(rows) == 2 and trainer.global_step == 40


def fit_steps(root, monitor, max_steps, ckpt_path=None, every=None):
    callbacks = [monitor]
    if every:
        callbacks.append(ModelCheckpoint(dirpath=str(root / "ckpt"), every_n_train_steps=every, save_top_k=-1))
    trainer = make_trainer(root, callbacks, max_steps=max_steps, max_epochs=-1, logger=CSVLogger(str(root), name="csv"),
                           enable_checkpointing=bool(every))
    trainer.fit(TinyModel(SleepDataset(40)), ckpt_path=ckpt_path)
    return trainer


@pytest.mark.parametrize("stop_at", [10, 4], ids=["between-windows", "inside-a-window"])
def test_resume_neither_repeats_nor_skips_windows(tmp_path, stop_at):
    steps = "3-5,15-17,25-26"
    whole = PerformanceMonitor(steps=steps, alert_threshold=None)
    fit_steps(tmp_path / "whole", whole, 30)
    first = PerformanceMonitor(steps=steps, alert_threshold=None)
    fit_steps(tmp_path / "resumed", first, stop_at, every=stop_at)
    ckpt = os.path.join(str(tmp_path / "resumed" / "ckpt"), sorted(os.listdir(tmp_path / "resumed" / "ckpt"))[-1])
    second = PerformanceMonitor(steps=steps, alert_threshold=None)
    trainer = fit_steps(tmp_path / "resumed", second, 30, ckpt_path=ckpt)
    recorded = lambda m: sorted(s for p in m.traces for s in profiler_steps(read_trace(p)))  # noqa: E731
    assert recorded(first) + recorded(second) == recorded(whole) == [3, 4, 5, 15, 16, 17, 25, 26]
    assert min(recorded(second)) >= stop_at and trainer.global_step == 30
    # the metrics go on along the same x-axis (global step): the resumed run logs at steps after stop_at
    with open(os.path.join(trainer.logger.log_dir, "metrics.csv")) as f:
        logged = [int(r["step"]) for r in csv.DictReader(f) if r.get("profkit/data_wait_ratio")]
    assert logged and min(logged) > stop_at


def test_alert_state_and_budget_survive_a_checkpoint(tmp_path):
    monitor = PerformanceMonitor(profile=False, alert_window=5, alert_patience=1, max_captures=3)
    trainer = make_trainer(tmp_path, [monitor])
    trainer.fit(TinyModel(SleepDataset(40, delay=0.004)))
    state = monitor.state_dict()
    assert state["alert"]["alerts"] == 1 and state["alert"]["in_episode"] and state["captures_left"] == 2
    again = PerformanceMonitor(profile=False, alert_window=5, alert_patience=1, max_captures=3)
    again.load_state_dict(state)
    make_trainer(tmp_path / "b", [again]).fit(TinyModel(SleepDataset(40, delay=0.004)))
    assert again.alerts == []  # the same data-bound episode goes on: no second alert after resuming


def test_the_capture_budget_comes_back_from_a_checkpoint(tmp_path):
    """The monitor's state travels in Lightning's checkpoint and comes back with `ckpt_path`."""
    def fit(monitor, **kwargs):
        saver = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_last=True)
        make_trainer(tmp_path, [monitor, saver], enable_checkpointing=True).fit(TinyModel(SleepDataset(8)), **kwargs)

    fit(PerformanceMonitor(profile=False, alert_threshold=None, max_captures=3))
    again = PerformanceMonitor(profile=False, alert_threshold=None, max_captures=3)
    again.load_state_dict({"captures_left": 0})
    fit(again, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))  # loads its state; the fit had ended: no step runs
    assert again.state_dict()["captures_left"] == 3


def test_a_second_monitor_in_one_trainer_is_refused(tmp_path):
    """One PerformanceMonitor per Trainer: Lightning refuses a second at construction (they share a checkpoint key),
    and one added to the Trainer's callbacks later is an error at setup, before any step, that leaves the loops as
    they were."""
    with pytest.raises(RuntimeError, match="more than one stateful callback of type `PerformanceMonitor`"):
        make_trainer(tmp_path, [PerformanceMonitor(), PerformanceMonitor(steps="2-3")])
    trainer = make_trainer(tmp_path, [PerformanceMonitor(profile=False)])
    trainer.callbacks.append(PerformanceMonitor(profile=False))
    with pytest.raises(ValueError, match=r"`callbacks=` holds 2 PerformanceMonitors: a Trainer takes one"):
        trainer.fit(TinyModel(SleepDataset(8)))
    assert trainer.global_step == 0 and fetch_timing_removed(trainer)


class FreeTheDisk(Callback):
    """Deletes ``filler`` when epoch ``epoch`` starts: room comes back."""

    def __init__(self, filler, epoch):
        self.filler, self.epoch = filler, epoch

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            os.remove(self.filler)


def test_a_full_disk_is_said_once_in_words_leaves_nothing_and_profiling_resumes_with_room(tmp_path, small_disk):
    """40 kB left on a real small filesystem, less than one window's JSON: the window was lost with a warning about
    a missing `.raw` file, kineto's partial `.raw.tmp` stayed (the disk still full after the fit), and later windows
    were recorded and lost, leaving empty folders. Now: one warning saying "disk full" with the folder and the free
    space, nothing partial left, the next windows skipped, metrics every epoch, and windows again once there is
    room (the filler deleted at epoch 2)."""
    filler = small_disk / "filler"
    filler.write_bytes(b"x" * (shutil.disk_usage(small_disk).free - 40 * 1024))
    monitor = PerformanceMonitor(dirpath=str(small_disk / "profiler"), every_n_steps=5, warmup=1, active=2,
                                 alert_threshold=None)
    recorder = Recorder()
    waits = [WaitForTraces(monitor, epoch) for epoch in (1, 2, 3)]  # each epoch's windows written before the next
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = make_trainer(tmp_path, [monitor, FreeTheDisk(filler, 2), *waits], max_epochs=4, logger=[recorder],
                               log_every_n_steps=1)
        trainer.fit(TinyModel(SleepDataset(20)))
    said = [str(w.message) for w in caught if "PerformanceMonitor" in str(w.message)]
    assert len(said) == 1 and said[0].startswith(f"PerformanceMonitor: disk full at {small_disk / 'profiler'}"), said
    # under the 40 kB left: kB, or bytes where the partial window took all but the last kB (opener.size_words)
    assert re.search(r": \d+(\.\d)? (kB|bytes) free", said[0]), said
    assert "windows are skipped until there is room" in said[0], said
    assert trainer.global_step == 40 and len([m for _, m in recorder.rows if "profkit/data_wait_ratio" in m]) == 4
    assert leftovers(small_disk) == []  # no .raw, .raw.tmp or .tmp
    folders = sorted(os.listdir(small_disk / "profiler"))
    assert all(os.listdir(small_disk / "profiler" / f) for f in folders), folders  # no empty window folder
    assert [f.split("epoch=")[1][:4] for f in folders] == ["0002", "0002", "0003", "0003"], folders  # windows again with room
    assert all(profiler_steps(read_trace(p)) for p in trace_files(small_disk))


@pytest.mark.parametrize("planted", ["a link to another folder", "another user's folder"])
def test_a_window_folder_planted_mid_fit_is_refused_once_and_nothing_is_written_through_it(tmp_path, planted):
    """Window folder names can be foreseen: one made by someone else at the next window's name once the fit runs (a
    link to another folder, or a folder of another user) receives nothing; one warning names it, and the windows
    after it are written as usual."""
    if planted == "another user's folder" and (not hasattr(os, "getuid") or os.getuid() != 0):
        pytest.skip("a folder of another user needs root to make")
    traces, elsewhere = tmp_path / "traces", tmp_path / "elsewhere"
    elsewhere.mkdir()
    monitor = PerformanceMonitor(steps="5-6,15-16,25-26", warmup=0, dirpath=str(traces))

    class Plant(Callback):
        def on_train_batch_start(self, trainer, *args):
            if trainer.global_step == 10:  # the first window is written, the folder and its marker are there
                taken = traces / "epoch=0000-batch=000015-000016"
                if planted == "a link to another folder":
                    os.symlink(elsewhere, taken)
                else:
                    taken.mkdir()
                    os.chown(taken, 65534, 65534)
                    taken.chmod(0o777)

    trainer = make_trainer(tmp_path, [monitor, Plant()], max_epochs=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(TinyModel(SleepDataset(60)))
    said = [str(w.message) for w in caught if "is already there" in str(w.message)]
    assert len(said) == 1 and "epoch=0000-batch=000015-000016" in said[0], said
    assert list(elsewhere.iterdir()) == [] and list((traces / "epoch=0000-batch=000015-000016").iterdir()) == []
    assert sorted(p.parent.name for p in traces.glob("*/*.pt.trace.json.gz")) == [
        "epoch=0000-batch=000005-000006", "epoch=0000-batch=000025-000026"]
