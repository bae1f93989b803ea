"""The private names of Lightning and torch sit in lightning_profkit/internals.py alone, the installed versions
have each of them, and a Lightning without the fetch pair is refused at setup."""

import ast
import re
import warnings
from importlib import metadata

import pytest
from conftest import Recorder, SleepDataset, TinyModel, fetch_timing_removed, make_trainer
from lightning.pytorch import Callback, Trainer
from torch.utils.data import DataLoader
from test_layers import sources

from lightning_profkit import PerformanceMonitor, internals

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


def test_the_installed_lightning_and_torch_have_every_private_name_the_package_uses(tmp_path):
    reads = Reads()
    make_trainer(tmp_path, [reads]).fit(TinyModel(SleepDataset(16), num_workers=2))
    seen = reads.seen
    assert seen["pair"] is not None and seen["val_pair"] is not None and seen["lightnings"] and seen["setup"]
    assert seen["stepped"] == 2  # batches 0 and 1; batch 2's optimizer step is counted after this hook
    assert len(seen["workers"]) == 2 and all(isinstance(pid, int) for pid in seen["workers"])
    import torch

    profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    if tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 13):  # torch 2.8 has none: the adapter
        assert hasattr(profile, "_prev_schedule_action")  # sets current_action alone, all torch 2.8 reads
    assert isinstance(profile.action_map, dict)
    assert not internals.profiler_running()
    with profile:
        assert internals.profiler_running()


class OwnTrainer(Trainer):
    """A Trainer subclass of the user's, in a module of theirs."""


def test_a_lightning_without_the_fetch_pair_is_refused_at_setup_naming_its_version(tmp_path, monkeypatch):
    """A Lightning whose loops have no ``_on_before_fetch`` (the names the adapter looks for are made ones that
    no loop has): the fit stops at setup, before any step, with the installed version and the name it lacks."""
    monkeypatch.setattr(internals, "FETCH_PAIR", ("_on_before_fetch_gone", "_on_after_fetch_gone"))
    trainer = make_trainer(tmp_path, [PerformanceMonitor(profile=False)], trainer_class=OwnTrainer)  # a user's own
    with pytest.raises(RuntimeError, match=r"lightning \d+\.\d+\S* has no `_on_before_fetch") as raised:
        trainer.fit(TinyModel(SleepDataset(8)))
    assert "needs a Lightning 2.5 or later" in str(raised.value)
    assert str(raised.value).startswith(f"lightning {metadata.version('lightning')} ")  # its Trainer's package
    assert trainer.global_step == 0 and fetch_timing_removed(trainer)


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
