"""Validation windows (`validation_batches`): selected validation batches in windows of their own, named to
sort with the training windows, and training windows that never hold validation; with a real Trainer."""

import csv
import glob
import os

import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from conftest import SleepDataset, TinyModel, make_trainer, profiler_steps, read_trace, trace_files
from lightning_profkit import PerformanceMonitor

TRAIN, VAL = "test_training_step", "test_validation_step"  # markers the model records in each step


class Marked(TinyModel):
    """Each training and validation step inside a record_function of its own name, and a validation set."""

    def __init__(self, train_size, val_size):
        super().__init__(SleepDataset(train_size))
        self.val_size = val_size

    def training_step(self, batch, batch_idx):
        with torch.profiler.record_function(TRAIN):
            return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        with torch.profiler.record_function(VAL):
            return super().validation_step(batch, batch_idx)

    def val_dataloader(self):
        return DataLoader(SleepDataset(self.val_size), batch_size=2)


def windows(root):
    """Each window folder: its ProfilerStep numbers and how many of each marker its trace holds."""
    out = {}
    for path in trace_files(root):
        trace = read_trace(path)
        names = [e.get("name") for e in trace["traceEvents"] if e.get("ph") == "X"]
        out[os.path.basename(os.path.dirname(path))] = (profiler_steps(trace), names.count(TRAIN), names.count(VAL),
                                                        trace["profkit"])
    return out


def test_validation_batches_get_windows_of_their_own(tmp_path):
    monitor = PerformanceMonitor(steps="3-5", validation_batches="2-4", alert_threshold=None)
    logger = CSVLogger(str(tmp_path), name="csv")
    trainer = make_trainer(tmp_path, [monitor], max_epochs=2, limit_val_batches=1.0, num_sanity_val_steps=2,
                           logger=logger)
    trainer.fit(Marked(train_size=20, val_size=16))  # 10 training batches an epoch, 8 validation batches
    found = windows(tmp_path)
    assert sorted(found) == [  # in step order: each validation run after the training step it followed
        "epoch=0000-batch=000003-000005",
        "epoch=0000-batch=000009-val-batch=000002-000004",
        "epoch=0001-batch=000009-val-batch=000002-000004",
    ]  # none from the sanity check
    assert found["epoch=0000-batch=000003-000005"][:3] == ([3, 4, 5], 3, 0)
    for name in ("epoch=0000-batch=000009-val-batch=000002-000004", "epoch=0001-batch=000009-val-batch=000002-000004"):
        steps, train, val, meta = found[name]
        assert (steps, train, val) == ([2, 3, 4], 0, 3)  # only validation batches, three of them
        assert meta["validation"] is True and meta["batch_idx"] == [2, 4]
    (path,) = glob.glob(os.path.join(str(tmp_path), "csv", "*", "metrics.csv"))
    with open(path) as f:
        rows = list(csv.DictReader(f))
    val_steps = [int(r["step"]) for r in rows if r.get("profkit/val_window/host_step_ms")]
    train_steps = [int(r["step"]) for r in rows if r.get("profkit/window/host_step_ms")]
    assert val_steps == [9, 19] and train_steps == [5]


def test_a_training_window_ends_before_validation_inside_the_epoch(tmp_path):
    monitor = PerformanceMonitor(steps="4-7", validation_batches="0-1", alert_threshold=None)
    trainer = make_trainer(tmp_path, [monitor], max_epochs=1, limit_val_batches=1.0, val_check_interval=6)
    trainer.fit(Marked(train_size=24, val_size=8))  # validation after steps 5 and 11
    found = windows(tmp_path)
    assert {k: v[:3] for k, v in found.items()} == {
        "epoch=0000-batch=000004-000005": ([4, 5], 2, 0),  # ended as validation began
        "epoch=0000-batch=000005-val-batch=000000-000001": ([0, 1], 0, 2),
        "epoch=0000-batch=000006-000007": ([6, 7], 2, 0),  # the rest of the window, after validation
        "epoch=0000-batch=000011-val-batch=000000-000001": ([0, 1], 0, 2),
    }


def test_the_batch_hooks_are_set_only_with_validation_batches(tmp_path):
    plain = PerformanceMonitor(steps="1-2", alert_threshold=None)
    make_trainer(tmp_path / "a", [plain], limit_val_batches=1.0).fit(Marked(8, 4))
    assert PerformanceMonitor().on_validation_batch_start is None and plain.on_validation_batch_start is None
    with_val = PerformanceMonitor(steps="1-2", validation_batches="0", alert_threshold=None)
    make_trainer(tmp_path / "b", [with_val], limit_val_batches=1.0).fit(Marked(8, 4))
    assert with_val.on_validation_batch_start is None  # given back when the fit ended
    assert sorted(windows(tmp_path / "b")) == ["epoch=0000-batch=000001-000002", "epoch=0000-batch=000003-val-batch=000000"]

