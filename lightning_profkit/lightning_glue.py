"""The callback's Lightning glue, no logic: the facts of a Trainer a :class:`~lightning_profkit.monitor.fit.FitRun`
is driven by, an :class:`~lightning_profkit.monitor.fit.Outcome` applied to it, and the hooks' guard."""

from __future__ import annotations

import functools
import multiprocessing
import os
import secrets
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from lightning_profkit.alerts import DataWaitAlert, DataWaitAlertError
from lightning_profkit.capture_request import other_fit
from lightning_profkit.internals import batches_that_stepped, loader_workers
from lightning_profkit.metric_names import PREFIX
from lightning_profkit.monitor.fit import Outcome, Rank
from lightning_profkit.monitor.writing.output import WINDOW_FOLDER
from lightning_profkit.printable import redact
from lightning_profkit.store import credential_keys, is_url, join


def guarded(hook: Callable) -> Callable:
    """Every hook's guard: the hook runs only while a fit runs (``self._fit``, from ``setup`` to ``teardown``); a
    failure inside the callback warns once, turns profiling off and never stops training (an alert with
    ``alert_action="raise"`` is the one error meant to reach the user)."""

    @functools.wraps(hook)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        fit = self._fit  # the one that fails, even where the hook was ending it
        if fit is None:
            return None
        try:
            return hook(self, *args, **kwargs)
        except DataWaitAlertError:
            raise
        except Exception as err:
            fit.fail(hook.__name__, err)
            return None

    return wrapper


def rank_of(trainer: Trainer) -> Rank:
    return Rank(trainer.global_rank, trainer.world_size, trainer.world_size // max(trainer.num_nodes, 1))


def log_step(trainer: Trainer, epoch_end: bool = False) -> int:
    """The step Lightning logs the user's own ``self.log`` metrics at now: the batches that stepped an optimizer
    (``global_step`` counts optimizer steps: two a batch with two optimizers). At ``epoch_end`` the last batch's,
    as Lightning logs epoch metrics (it steps the counter back for them)."""
    stepped = batches_that_stepped(trainer.fit_loop.epoch_loop)
    stepped = trainer.global_step if stepped is None else stepped
    return max(stepped - 1, 0) if epoch_end else stepped


def train_loader(trainer: Trainer) -> Any:
    """The training DataLoader (the first of several)."""
    loader = trainer.train_dataloader
    if isinstance(loader, dict):
        return next(iter(loader.values()), None)
    if isinstance(loader, (list, tuple)):
        return loader[0] if loader else None
    return loader


def worker_pids(trainer: Trainer) -> list[int]:
    """The pids of the training DataLoaders' worker processes running now. Where no iterator shows its workers (a
    loader that iterates torch's iterator inside its own, as litdata's ``StreamingDataLoader``): the live daemon
    processes this process started through ``multiprocessing``, as torch starts DataLoader workers (the finalizing
    process is started otherwise)."""
    found = loader_workers(trainer.fit_loop)
    return found or [p.pid for p in multiprocessing.active_children() if p.daemon and p.pid is not None]


def cuda_uuid(pl_module: Any) -> Optional[str]:
    """The UUID of the CUDA device the model is on; None off CUDA."""
    if pl_module.device.type != "cuda":
        return None
    return str(torch.cuda.get_device_properties(pl_module.device).uuid)


def is_a(obj: Any, class_name: str) -> bool:
    """``obj`` is of a class of this name: pytorch_lightning's classes are others than lightning.pytorch's."""
    return any(cls.__name__ == class_name for cls in type(obj).__mro__)


def apply(trainer: Trainer, outcome: Outcome) -> None:
    """What a call on the fit asks of the trainer."""
    for line in outcome.lines:
        rank_zero_info(f"lightning_profkit: {redact(line)}")
    for step, metrics in outcome.metrics:  # rank zero's alone
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
    if outcome.callback_metrics:  # where EarlyStopping and ModelCheckpoint look, as LearningRateMonitor puts its own
        held = trainer.callback_metrics  # this epoch's figures: none left from an earlier epoch that lacks one now
        for name in [k for k in held if k.startswith(PREFIX) and k not in outcome.callback_metrics]:
            del held[name]
        held.update({k: torch.tensor(v) for k, v in outcome.callback_metrics.items()})
    if outcome.stop:
        trainer.should_stop = True
    if outcome.raise_ is not None:
        raise outcome.raise_


def check_monitors_come_after(trainer: Trainer, callback: Any) -> None:
    """A callback that monitors a ``profkit/`` metric at the end of a training epoch must run after ``callback``,
    which puts the epoch's figures there; ModelCheckpoint always does (Lightning runs it last). Raises
    ``ValueError`` naming the fix."""
    for other in trainer.callbacks[:trainer.callbacks.index(callback)]:
        monitor = getattr(other, "monitor", None)
        if isinstance(monitor, str) and monitor.startswith(PREFIX) and not isinstance(other, Checkpoint):
            raise ValueError(f"{type(other).__name__}(monitor={monitor!r}) comes before PerformanceMonitor in "
                             "`callbacks=`: put PerformanceMonitor first, so that its epoch figures are there when "
                             f"{type(other).__name__} reads them")


def tensorboard_loggers(trainer: Trainer) -> list[Any]:
    return [logger for logger in trainer.loggers if is_a(logger, "TensorBoardLogger")]


def alert_to_tensorboard(trainer: Trainer, alert: DataWaitAlert) -> None:
    """An alert in TensorBoard's Text tab (``profkit/alerts``) at its step, for each TensorBoardLogger."""
    for logger in tensorboard_loggers(trainer):  # the fit's alerts all carry their step
        logger.experiment.add_text("profkit/alerts", alert.markdown, global_step=alert.log_step)


def trace_dir(trainer: Trainer) -> str:
    """The run's own folder of traces (the same on all ranks): in a TensorBoardLogger's or a first CSVLogger's
    ``version_N`` folder, else in a new run folder (MLflow's, W&B's or a custom logger give a run no folder of its own)."""
    tb = next(iter(tensorboard_loggers(trainer)), None)
    if tb is not None:
        return join(trainer.strategy.broadcast(tb.log_dir), "profiler")
    base = trainer.log_dir or trainer.default_root_dir
    if trainer.loggers and is_a(trainer.loggers[0], "CSVLogger"):
        return join(base, "profiler")
    return join(base, "profiler", run_folder_name(trainer))


def run_folder_name(trainer: Trainer) -> str:
    """``run=YYYYmmdd-HHMMSS.ffffff-xxxxxx``: now (UTC, so that runs sort) and a random part; rank zero's."""
    now = datetime.now(timezone.utc).strftime("run=%Y%m%d-%H%M%S.%f")
    return trainer.strategy.broadcast(f"{now}-{secrets.token_hex(3)}")


def _holds_windows(folder: str) -> bool:
    with os.scandir(folder) as entries:
        return any(entry.is_dir(follow_symlinks=False) and WINDOW_FOLDER.match(entry.name) for entry in entries)


def own_trace_dir(trainer: Trainer, folder: str) -> tuple[str, Optional[str]]:
    """``folder``, or a run folder of this fit's own under it, and why: another fit is writing to it now (its live-run
    marker there names a process that may still run), or an earlier fit's windows are in it (decided on rank zero).
    A folder on object storage is taken as it is: its marker is read by the finalizing process, not here."""
    why = None
    if trainer.is_global_zero and not is_url(folder):
        if other := other_fit(folder):
            why = f"another fit ({other}) writes there"
        elif os.path.isdir(folder) and _holds_windows(folder):
            why = "an earlier fit's traces are there"
    why = trainer.strategy.broadcast(why)
    return (join(folder, run_folder_name(trainer)), why) if why else (folder, None)


def epoch_length(trainer: Trainer) -> Optional[int]:
    n = trainer.num_training_batches
    return int(n) if n != float("inf") else None


def last_step(trainer: Trainer) -> Optional[int]:
    """The fit's last batch (on the step axis our hooks count: all epochs' batches), where the Trainer knows it:
    ``max_epochs`` of a sized loader, or ``max_steps`` optimizer steps; None when neither bounds it."""
    bounds = []
    epochs, per_epoch = trainer.max_epochs, epoch_length(trainer)
    if epochs is not None and epochs >= 0 and per_epoch is not None:
        bounds.append(epochs * per_epoch)
    if trainer.max_steps is not None and trainer.max_steps >= 0:
        bounds.append(trainer.max_steps * trainer.accumulate_grad_batches)
    return min(bounds) - 1 if bounds else None


def saved_credentials(trainer: Trainer, storage_options: Optional[dict[str, Any]]) -> Optional[str]:
    """Why credentials of ``storage_options`` are about to be stored in the run folder (LightningCLI's
    ``SaveConfigCallback`` writes every argument of the config to ``config.yaml``), in words; None where they are
    not."""
    keys = credential_keys(storage_options)
    if not keys or not any(is_a(c, "SaveConfigCallback") for c in trainer.callbacks):
        return None
    return (f"`storage_options` holds credentials ({', '.join(keys)}), and LightningCLI saves its config, these "
            "included, as config.yaml in the run folder: give them through the environment or the store's profile "
            "(AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS) instead")
