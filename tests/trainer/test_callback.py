"""PerformanceMonitor with a real Trainer and real torch.profiler, reading the files it writes."""

import gzip
import json
import os
import shutil
import threading
import warnings

import pytest
import torch
from conftest import (Recorder, SleepDataset, TinyModel, fetch_timing_removed, leftovers, make_trainer, profiler_steps,
                      read_trace, trace_files)
from lightning.pytorch import Callback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.profilers import PyTorchProfiler, SimpleProfiler

from lightning_profkit import PerformanceMonitor
from lightning_profkit.monitor import fit as fit_run


class ProfilerProbe(Callback):
    """Records, for every training step, whether a torch.profiler session was recording."""

    def __init__(self):
        self.recording = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if torch.autograd.profiler._is_profiler_enabled:
            self.recording.append(trainer.fit_loop.epoch_loop.total_batch_idx)


def fit(tmp_path, monitor, epochs=1, size=40, **kwargs):
    probe = ProfilerProbe()
    trainer = make_trainer(tmp_path, [monitor, probe], max_epochs=epochs, **kwargs)
    trainer.fit(TinyModel(SleepDataset(size)))
    return trainer, probe


def windows(tmp_path):
    """{window folder name: ProfilerStep numbers} for every trace written."""
    out = {}
    for path in trace_files(tmp_path):
        out.setdefault(os.path.basename(os.path.dirname(path)), []).extend(profiler_steps(read_trace(path)))
    return out


@pytest.mark.parametrize(
    "kwargs, epochs, expected",
    [
        (dict(), 2, {"epoch=0000-batch=000011-000013": [11, 12, 13], "epoch=0001-batch=000011-000013": [31, 32, 33]}),
        (dict(skip_first=0, warmup=0, active=2), 1, {"epoch=0000-batch=000000-000001": [0, 1]}),
        (dict(steps="3-4,30-31"), 2, {"epoch=0000-batch=000003-000004": [3, 4], "epoch=0001-batch=000010-000011": [30, 31]}),
        (dict(steps=[[19, 21]]), 2, {"epoch=0000-batch=000019": [19], "epoch=0001-batch=000000-000001": [20, 21]}),
        (dict(every_n_steps=15, active=2), 2, {f"epoch={s // 20:04d}-batch={s % 20:06d}-{s % 20 + 1:06d}": [s, s + 1] for s in (15, 30)}),
        (dict(step_filter=lambda s: s % 17 == 5, warmup=2), 2, {"epoch=0000-batch=000005": [5], "epoch=0001-batch=000002": [22], "epoch=0001-batch=000019": [39]}),
        (dict(profile=False), 2, {}),
    ],
    ids=["epoch-window", "no-warmup", "ranges", "range-across-epochs", "every-n", "filter", "metrics-only"],
)
def test_exactly_the_selected_steps_are_profiled(tmp_path, kwargs, epochs, expected):
    monitor = PerformanceMonitor(**kwargs)
    _, probe = fit(tmp_path, monitor, epochs=epochs)
    assert windows(tmp_path) == expected
    recorded = sorted(s for steps in expected.values() for s in steps)
    assert probe.recording == recorded  # no session records outside its window
    assert leftovers(tmp_path) == []
    for path in trace_files(tmp_path):
        meta = read_trace(path)["profkit"]
        assert meta["steps"] == [min(profiler_steps(read_trace(path))), max(profiler_steps(read_trace(path)))]
        assert os.path.basename(path).startswith(meta["worker"] + ".")


def test_labels_under_gradient_accumulation(tmp_path):
    monitor = PerformanceMonitor(steps="6-8")
    trainer, _ = fit(tmp_path, monitor, accumulate_grad_batches=3)
    (path,) = trace_files(tmp_path)
    meta = read_trace(path)["profkit"]
    # a step is a batch: batches 6-8 are optimizer step 2 (ProfilerStep numbers follow batches), the logging axis's 2
    assert meta == {"epoch": 0, "steps": [6, 8], "batch_idx": [6, 8], "worker": meta["worker"], "rank": 0, "world_size": 1,
                    "log_step": 2}  # the fit's first window: no size estimate
    assert trainer.global_step == 20 // 3 + 1


def test_traces_go_to_the_first_tensorboard_logger(tmp_path):
    csv, tb = CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")
    monitor = PerformanceMonitor(steps="2")
    fit(tmp_path, monitor, logger=[csv, tb])
    assert monitor.trace_dir == os.path.join(tb.log_dir, "profiler")
    (path,) = trace_files(tmp_path)
    assert path.startswith(tb.log_dir) and monitor.traces == [path]


def test_every_trace_is_complete_gzip_json_and_no_thread_outlives_fit(tmp_path):
    fit(tmp_path, PerformanceMonitor(every_n_steps=5, active=2), size=60)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("profkit")]
    paths = trace_files(tmp_path)
    assert len(paths) == 5
    for path in paths:
        with gzip.open(path, "rt") as f:
            trace = json.load(f)
        assert trace["traceEvents"] and trace["profkit"]["worker"]


def test_ranks_filter_excludes_this_process(tmp_path):
    _, probe = fit(tmp_path, PerformanceMonitor(steps="2-3", ranks=[1]))
    assert trace_files(tmp_path) == [] and probe.recording == []


def test_lightning_pytorch_profiler_wins_with_one_warning(tmp_path):
    monitor = PerformanceMonitor(steps="2-3")
    with pytest.warns(UserWarning, match="PyTorchProfiler"):
        fit(tmp_path, monitor, profiler=PyTorchProfiler(dirpath=str(tmp_path / "lp"), filename="p"))
    assert [p for p in trace_files(tmp_path) if "profiler" in p.split(os.sep)[-3:-1]] == []


def test_lightning_dispatches_our_step_end_hook_only_on_steps_with_work(tmp_path, monkeypatch):
    user_profiler = SimpleProfiler()  # records every hook Lightning dispatches, by name, once per call
    monitor = PerformanceMonitor(steps="20-21", alert_window=10, max_captures=0)  # no capture-request polls
    monkeypatch.setattr(fit_run, "OWNER_CHECK_S", float("inf"))  # nor ownership checks, however long it takes
    trainer, _ = fit(tmp_path, monitor, size=80, profiler=user_profiler)  # 40 steps
    calls = {name.split(".")[-1]: len(durations) for name, durations in user_profiler.recorded_durations.items()
             if name.startswith("[Callback]PerformanceMonitor")}
    assert not set(calls) & {"on_train_batch_start", "on_before_backward", "on_after_backward",
                             "on_before_optimizer_step", "on_before_zero_grad", "on_validation_batch_start",
                             "on_validation_batch_end"}
    assert calls["on_train_epoch_end"] == 1
    # rolling checks at steps 9, 19, 29, 39; the window's steps 18 (its session opens), 19 (warm-up), 20, 21: 7
    # steps (the polls' and the ownership checks' cadence: tests/monitor/test_fit.py, against a fake clock)
    assert calls["on_train_batch_end"] == 7
    assert windows(tmp_path) == {"epoch=0000-batch=000020-000021": [20, 21]}
    assert trainer.profiler is user_profiler and fetch_timing_removed(trainer)  # the user's profiler is untouched


def test_unknown_option_fails_at_construction():
    with pytest.raises(TypeError, match="warm_up"):
        PerformanceMonitor(warm_up=2)


def test_unwritable_trace_folder_fails_at_setup_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monitor = PerformanceMonitor(dirpath=str(blocker / "traces"))
    seen = []

    class Steps(Callback):
        def on_train_batch_start(self, *args):
            seen.append(1)

    with pytest.raises(OSError, match="dirpath"):
        make_trainer(tmp_path, [monitor, Steps()]).fit(TinyModel())
    assert seen == []


def test_write_failure_warns_once_and_training_completes(tmp_path):
    monitor = PerformanceMonitor(every_n_steps=5, active=1, warmup=0, dirpath=str(tmp_path / "traces"))

    class BreakFolder(Callback):
        def on_train_batch_start(self, trainer, *args):
            # after setup checked the folder, replace it with a file: every write now fails
            if trainer.global_step == 1:
                shutil.rmtree(tmp_path / "traces")
                (tmp_path / "traces").write_text("gone")

    trainer = make_trainer(tmp_path, [monitor, BreakFolder()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(TinyModel(SleepDataset(40)))
    ours = [w for w in caught if "could not be written" in str(w.message)]
    assert len(ours) == 1
    assert trainer.global_step == 20 and trainer.state.finished
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("logger", ["none", "a logger without a folder of its own"])
def test_runs_without_a_versioned_logger_never_share_a_folder(tmp_path, logger):
    """With ``logger=False`` (or MLflow's, W&B's, a custom logger) Lightning gives every run the same folder: each
    run's traces go to a folder of its own under ``profiler/``, named so that the runs sort in order, and each
    window folder holds the one trace of its run."""

    folders = []
    for _ in range(2):
        monitor = PerformanceMonitor(steps="2-3", alert_threshold=None)
        make_trainer(tmp_path, [monitor], max_epochs=1, logger=False if logger == "none" else [Recorder()]).fit(
            TinyModel(SleepDataset(20)))
        folders.append(monitor.trace_dir)
        assert [os.path.dirname(os.path.dirname(p)) for p in monitor.traces] == [monitor.trace_dir]
    assert folders[0] != folders[1] and sorted(folders) == folders
    assert all(os.path.dirname(f) == str(tmp_path / "profiler") and os.path.basename(f).startswith("run=") for f in folders)
    windows = [os.path.dirname(p) for p in trace_files(tmp_path)]
    assert len(windows) == 2 and len(set(windows)) == 2  # one trace per window folder
