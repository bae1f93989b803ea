"""The private names of Lightning and torch sit in lightning_profkit/internals.py alone, the installed versions
have each of them, and where Lightning's fetch pair is gone fetches are still timed, through the public
``trainer.profiler``."""

import ast
import os
import re
import warnings

from conftest import Recorder, SleepDataset, TinyModel, fetch_timing_removed, make_trainer
from lightning.pytorch import Callback
from lightning.pytorch.profilers import PassThroughProfiler, SimpleProfiler
from torch.utils.data import DataLoader
from test_layers import PACKAGE, sources

from lightning_profkit import PerformanceMonitor, internals
from lightning_profkit.monitor.timing import fetch_timer

STDLIB = {"_exit", "_replace", "_asdict", "_fields"}  # os._exit; a NamedTuple's own


class ValidatedModel(TinyModel):
    def val_dataloader(self):
        return DataLoader(SleepDataset(4, delay=0.004), batch_size=2)


def test_no_module_but_internals_names_a_private_attribute_of_another_package():
    trees = dict(sources())
    ours = set(STDLIB)  # every name the package itself defines
    for tree in trees.values():
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                ours.add(n.name)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                ours.add(n.attr)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                ours.add(n.id)
            elif isinstance(n, ast.Call) and ast.unparse(n.func) in ("setattr", "object.__setattr__"):
                ours.update(a.value for a in n.args[1:2] if isinstance(a, ast.Constant))
    found = []
    for name, tree in trees.items():
        if name == "internals.py":
            continue
        for n in ast.walk(tree):
            word = n.attr if isinstance(n, ast.Attribute) else None
            if isinstance(n, ast.Call) and ast.unparse(n.func) in ("getattr", "hasattr", "setattr", "delattr"):
                word = next((a.value for a in n.args[1:2] if isinstance(a, ast.Constant)), None)
            if word and re.fullmatch(r"_[A-Za-z]\w*", word) and word not in ours:
                found.append((name, n.lineno, word))
    assert not found
    for name, tree in trees.items():  # public but undocumented: torch's and Lightning's too, read or set here alone
        if name != "internals.py":
            words = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
            skipped = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                       and any(ast.unparse(t).rsplit(".", 1)[-1].startswith("on_") for t in n.targets)
                       and isinstance(n.value, ast.Constant) and n.value.value is None]
            assert not {"kineto_results", "step_num"} & set(words) and not skipped, name
    assert "_generate_state_key" not in ours and "_generate_state_key" in open(os.path.join(PACKAGE, "internals.py")).read()


class Reads(Callback):
    """What the adapter reads of the installed Lightning and torch, in the middle of a real fit."""

    def __init__(self):
        self.seen = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 2:
            loop = trainer.fit_loop.epoch_loop
            self.seen = dict(pair=internals.fetch_pair(loop), val_pair=internals.fetch_pair(loop.val_loop),
                             lightnings=internals.lightnings_fetch_pair(loop),
                             stepped=internals.batches_that_stepped(loop), workers=internals.loader_workers(trainer.fit_loop),
                             setup=internals.has_loader_setup(trainer.fit_loop))
            ready = internals.batch_ready(trainer.fit_loop)
            self.seen["ready"] = ready() if ready is not None else None


def test_the_installed_lightning_and_torch_have_every_private_name_the_package_uses(tmp_path):
    reads = Reads()
    make_trainer(tmp_path, [reads]).fit(TinyModel(SleepDataset(16), num_workers=2))
    seen = reads.seen
    assert seen["pair"] is not None and seen["val_pair"] is not None and seen["lightnings"] and seen["setup"]
    assert seen["stepped"] == 2  # batches 0 and 1; batch 2's optimizer step is counted after this hook
    assert len(seen["workers"]) == 2 and all(isinstance(pid, int) for pid in seen["workers"])
    assert isinstance(seen["ready"], bool)  # the loader's queues say whether a batch waits (Linux)
    import torch

    profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    if tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 13):  # torch 2.8 has none: the adapter
        assert hasattr(profile, "_prev_schedule_action")  # sets current_action alone, all torch 2.8 reads
    assert isinstance(profile.action_map, dict)
    assert not internals.profiler_running()
    with profile:
        assert internals.profiler_running()
    assert internals.state_key(PerformanceMonitor(), a=1) == PerformanceMonitor()._generate_state_key(a=1)


def test_without_lightnings_fetch_pair_fetches_are_timed_through_the_trainers_profiler(tmp_path, monkeypatch):
    """A Lightning whose loops have no ``_on_before_fetch`` (the names the adapter looks for are made ones that
    no loop has): one line says so, every epoch's data wait is at least the time its samples slept, the user's
    profiler still sees every fetch, and the trainer gets its own profiler back."""
    monkeypatch.setattr(internals, "FETCH_PAIR", ("_on_before_fetch_gone", "_on_after_fetch_gone"))
    recorder, delay, samples = Recorder(), 0.004, 16
    user_profiler = SimpleProfiler(dirpath=str(tmp_path), filename="simple")  # its summary to a file
    trainer = make_trainer(tmp_path, [PerformanceMonitor(profile=False, alert_threshold=None)], logger=recorder,
                           max_epochs=2, profiler=user_profiler, limit_val_batches=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(ValidatedModel(SleepDataset(samples, delay=delay)))
    said = [str(w.message) for w in caught if "has no `_on_before_fetch`" in str(w.message)]
    assert len(said) == 1 and "fetches are timed through trainer.profiler" in said[0]
    epochs = [m for _, m in recorder.rows if "profkit/step_time_ms_mean" in m]
    assert len(epochs) == 2
    assert all(m["profkit/data_wait_s"] >= samples * delay for m in epochs)
    assert all(m["profkit/val_data_wait_ratio"] > 0 for m in epochs)
    assert trainer.profiler is user_profiler and fetch_timing_removed(trainer)
    fetches = [name for name in user_profiler.recorded_durations if name.endswith(fetch_timer.TRAIN_FETCH)]
    assert fetches and len(user_profiler.recorded_durations[fetches[0]]) >= 2 * samples // 2


def test_without_the_fit_loops_setup_data_epoch_0s_startup_before_training_is_left_out(tmp_path, monkeypatch):
    """A Lightning whose fit loop has no ``setup_data`` (a made name in its place): one line says so, the loop is
    left as it was, and every epoch still logs its DataLoader start-up."""
    monkeypatch.setattr(internals, "LOADER_SETUP", "setup_data_gone")
    recorder = Recorder()
    trainer = make_trainer(tmp_path, [PerformanceMonitor(profile=False, alert_threshold=None)], logger=recorder,
                           max_epochs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(TinyModel(SleepDataset(8), num_workers=1))
    said = [str(w.message) for w in caught if "has no `setup_data`" in str(w.message)]
    assert len(said) == 1 and "epoch 0's DataLoader start-up before training is not counted" in said[0]
    assert "setup_data" not in vars(trainer.fit_loop) and "setup_data_gone" not in vars(trainer.fit_loop)
    epochs = [m["profkit/dataloader_startup_s"] for _, m in recorder.rows if "profkit/dataloader_startup_s" in m]
    assert len(epochs) == 2 and all(s >= 0 for s in epochs)


def test_a_fetch_profiler_left_by_a_fit_that_ended_without_us_is_taken_off_at_setup(tmp_path, monkeypatch):
    monkeypatch.setattr(internals, "FETCH_PAIR", ("_on_before_fetch_gone", "_on_after_fetch_gone"))
    trainer = make_trainer(tmp_path, [])
    fetch_timer.install(trainer, say=lambda line: None)
    fetch_timer.install(trainer, say=lambda line: None)
    assert isinstance(trainer.profiler.wrapped, fetch_timer.FetchProfiler)
    fetch_timer.uninstall_stale(trainer)
    assert isinstance(trainer.profiler, PassThroughProfiler)
