"""What the GPU path relies on, held here without a GPU: figures reduced the way a user reads them, no device
work for the epoch figures, profiler sessions freed at once, and a CUDA check whose allow-list is real."""

import ast
import csv
import gc
import os
import re
import weakref

import torch
from conftest import SleepDataset, TinyModel, make_trainer
from lightning.pytorch import Callback
from lightning.pytorch.loggers import CSVLogger
from torch.profiler import ProfilerAction, ProfilerActivity

from lightning_profkit import PerformanceMonitor
from lightning_profkit.monitor.profiling.windows import Recording, WindowSession
from lightning_profkit.monitor.timing.epoch_figures import PREFIX, reduce_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "lightning_profkit")


def test_peak_memory_is_the_worst_rank_not_the_mean():
    rows = [{"peak_memory_mb": 1000.0, "data_wait_ratio": 0.1}, {"peak_memory_mb": 70000.0, "data_wait_ratio": 0.3}]
    out = reduce_ranks(rows)
    assert out[PREFIX + "peak_memory_mb"] == 70000.0
    assert out[PREFIX + "data_wait_ratio"] == 0.2  # the rest stay means


def test_epoch_figures_are_exchanged_without_the_device(tmp_path):
    """The epoch-end exchange goes over gloo on the host (as the rolling checks do): no tensor is put on the
    model's device and copied back, which on CUDA is two blocking copies every epoch."""
    calls = []

    class Spy(Callback):
        def setup(self, trainer, pl_module, stage):
            gather = trainer.strategy.all_gather
            trainer.strategy.all_gather = lambda *a, **k: calls.append(a) or gather(*a, **k)

    logger = CSVLogger(tmp_path)
    trainer = make_trainer(tmp_path, [Spy(), PerformanceMonitor(profile=False, alert_window=5)], max_epochs=2, logger=logger)
    trainer.fit(TinyModel(SleepDataset(20)))
    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r.get("profkit/data_wait_ratio")]
    assert calls == [] and len(rows) == 2  # figures still logged every epoch: the exchange happened


def session_profiler(step):
    """One window of a real profiler session recorded from ``step``; returns a weak reference to its profile."""
    selection = PerformanceMonitor(warmup=1, steps=f"{step + 1}-{step + 2}").options.selection()
    kept = []
    session = WindowSession(selection, step, step, 1, Recording([ProfilerActivity.CPU], {},
                                                                lambda s, prof: kept.append(prof.profiler.kineto_results)))
    # torch 2.13 and later keep the schedule's last answer apart (in ``_prev_schedule_action``): it starts there too
    assert getattr(session.profiler, "_prev_schedule_action", ProfilerAction.WARMUP) == ProfilerAction.WARMUP
    assert session.profiler.current_action == ProfilerAction.WARMUP
    ref = weakref.ref(session.profiler)
    while session.step():
        torch.ones(4).sum()
    session.finish()
    return ref, kept


def test_a_finished_window_frees_its_profiler_without_the_garbage_collector():
    session_profiler(10)  # the first session in a process imports torch._inductor, whose frames linger
    gc.disable()
    try:
        ref, kept = session_profiler(20)
        assert len(kept) == 1
        kept.clear()  # the writer lets go of the results once saved
        assert ref() is None
    finally:
        gc.enable()


def test_the_cuda_checks_allow_list_names_what_exists():
    """Every file and function the CUDA check allows to synchronise is in the package (a renamed one would
    let the check fail on its first GPU run, or worse, pass by allowing nothing)."""
    source = open(os.path.join(ROOT, ".ci", "check_cuda.py")).read()
    tree = ast.parse(source)
    allowed = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id.startswith("ALLOWED_"):
                allowed[target.id] = ast.literal_eval(node.value)
    assert set(allowed) == {"ALLOWED_FILES", "ALLOWED_FUNCTIONS"}
    for name in allowed["ALLOWED_FILES"]:
        assert os.path.exists(os.path.join(PACKAGE, name)), name
    code = "".join(open(os.path.join(d, f)).read() for d, _, files in os.walk(PACKAGE) for f in files if f.endswith(".py"))
    for name in allowed["ALLOWED_FUNCTIONS"]:
        assert re.search(rf"def {name}\(", code), name
