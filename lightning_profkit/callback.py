"""The Lightning glue: PerformanceMonitor's arguments and hooks. Each hook reads the few facts of the trainer it
needs and makes one call on the fit's :class:`~lightning_profkit.monitor.fit.FitRun`, which holds the logic and
imports no Lightning; what comes back (metrics to log, lines to print, stop, raise) is applied here."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from lightning.pytorch import Callback, LightningModule, Trainer

from lightning_profkit.alerts import DataWaitAlert
from lightning_profkit.internals import SET_WHILE_NEEDED, SKIPPED, rehook, unhook
from lightning_profkit.lightning_glue import (alert_to_tensorboard, apply, check_monitors_come_after, cuda_uuid,
    epoch_length, guarded, is_a, last_step, log_step, own_trace_dir, rank_of, saved_credentials,
    trace_dir, train_loader, worker_pids)
from lightning_profkit.monitor.alerting.advice import loader_facts
from lightning_profkit.monitor.fit import FitRun, Outcome
from lightning_profkit.monitor.options import DEFAULT_ALERT_THRESHOLD, DEFAULT_MAX_TRACE_MB, Options
from lightning_profkit.monitor.profiling.selection import StepRanges
from lightning_profkit.monitor.timing.fetch_timer import FetchTimer, require_fetch_pair, uninstall_stale
from lightning_profkit.monitor.writing.output import check_trace_dir
from lightning_profkit.notices import Notices
from lightning_profkit.printable import redact

class PerformanceMonitor(Callback):
    r"""Profile selected training steps with ``torch.profiler``, stream each window's trace, and log where the
    training time went.

    A *step* is one training batch; a window is found by its epoch and its batches in it (Lightning's
    ``batch_idx``), as the plan line and the window's folder say; ``steps``, ``every_n_steps`` and ``step_filter``
    count the fit's steps from 0 across epochs, as the trace's ``ProfilerStep#N`` markers do. Metrics are logged at
    the step Lightning logs ``self.log`` at. One window per epoch by default; outside windows no profiler session
    exists. Each window goes to
    ``<run dir>/profiler/epoch=EEEE-batch=AAAAAA-BBBBBB/<host>_rank<R>.<ns>.pt.trace.json.gz`` (``batch=AAAAAA`` for
    one batch; the run dir: the first TensorBoardLogger's ``log_dir``, else the first logger's where that is a
    CSVLogger; otherwise each run gets ``<trainer.log_dir>/profiler/run=YYYYmmdd-HHMMSS.ffffff-xxxxxx``), so
    ``tensorboard --logdir <run dir>`` shows every window in the PyTorch Profiler tab. Metrics go to the trainer's
    loggers under ``profkit/`` (the documentation's Metrics page names each, with its unit). A data-wait alert is a
    :class:`~lightning_profkit.alerts.DataWaitWarning` on rank zero, with advice and the folder of a window
    recorded right after it; ``profkit capture <run dir>`` asks a running fit for a window.

    Args:
        profile: record the planned profiler windows; ``False``: none planned (the metrics, and the windows
            recorded after an alert or on request, remain).
        skip_first: batches skipped at the start of every epoch before the window (default mode).
        warmup: batches the profiler runs before recording, so start-up cost stays out of the trace.
        active: batches recorded per window (default mode, ``every_n_steps`` and captures).
        steps: the fit's steps to record (its batches counted from 0 across epochs), e.g. ``"100-102,500-502"``
            or ``[[100, 102], 500]``.
        every_n_steps: record ``active`` steps from every positive multiple of this many of the fit's steps.
        step_filter: record the steps where ``step_filter(step)`` is true (asked ahead of time: a pure function).
        ranks: global ranks that profile (default: all).
        dirpath: folder for the window folders (default: a folder of the run's own, see above); where another fit
            writes there now or an earlier fit's windows are in it (a local folder), a ``run=…`` folder of this fit's
            own under it.
        activities: a list of ``"cpu"`` and/or ``"cuda"``, e.g. ``["cpu"]`` (default: CPU, plus CUDA when the model
            is on a CUDA device).
        record_shapes: ``torch.profiler``'s: record operator input shapes (adds cost to profiled steps).
        profile_memory: ``torch.profiler``'s: record allocations (adds cost; gives
            ``window/peak_memory_mb/<device>`` for CUDA devices).
        with_stack: ``torch.profiler``'s: record Python stacks (adds cost).
        with_flops: ``torch.profiler``'s: estimate FLOPs of matrix operators (adds cost).
        with_modules: ``torch.profiler``'s: record the module hierarchy (adds cost).
        quiet: kineto (torch's profiler library) prints none of its log lines (``USDT:`` at every start and stop; a
            CUDA build's "no GPU" error): it reads ``KINETO_LOG_LEVEL`` at its first session, started with it set to 6
            (one set by you is kept). ``False``: kineto's default.
        flush_timeout: seconds to wait at the end of ``fit`` for traces still being written.
        log_metrics: log the per-epoch and per-window metrics above.
        alert_threshold: data-wait ratio above which a check counts (0.2: "highly input-bound"); ``None``: no alerts.
        alert_window: the fit's steps per rolling check (its figures are logged at its step, ``profkit/rolling/``).
        alert_patience: consecutive checks over the threshold before an alert.
        alert_cooldown: the fit's steps after an alert during which no new one is raised.
        alert_action: ``"warn"``, ``"stop"`` (end training gracefully) or ``"raise"``.
        on_alert: called on rank zero with each :class:`~lightning_profkit.alerts.DataWaitAlert` when it fires (its
            trace is named later: ``alerts`` holds a copy with ``trace_dir`` once written).
        capture_on_alert: record a window (``warmup`` + ``active`` batches) right after an alert.
        max_captures: the most windows recorded per ``fit`` after alerts and on request.
        keep_last_windows: keep only the newest this many window folders (our own files; ``None``: keep all).
        max_trace_mb: end a window early, before the step that would take its trace's JSON past this many MB
            (10^6 bytes), by the JSON a step of the fit's latest written window of its kind (training, validation);
            the first of each kind records all its steps, with a warning if it passed (``None``: no limit).
        validation_batches: batches of each validation run's first dataloader to record, e.g. ``"0-2"``, in
            windows ``epoch=EEEE-batch=SSSSSS-val-batch=AAAAAA-BBBBBB`` of their own (after training batch S).
        storage_options: for a trace folder on object storage, fsspec's options (``key``, ``secret``,
            ``client_kwargs`` …, as Lightning's loggers take them), given to the processes that reach the store
            through a pipe; never shown. URLs are shown with their user and password as ``***``.

    Example::

        from lightning.pytorch import Trainer
        from lightning.pytorch.demos.boring_classes import BoringModel
        from lightning_profkit import PerformanceMonitor

        trainer = Trainer(max_epochs=1, limit_train_batches=20, callbacks=[PerformanceMonitor()])
        trainer.fit(BoringModel())
    """

    # Lightning skips these per-batch hooks, and the instance's SET_WHILE_NEEDED but while needed: `on_train_batch_end`
    # on the steps with work (`_wake`), the validation batch hooks with `validation_batches`.
    on_train_batch_start = on_before_backward = on_after_backward = SKIPPED  # type: ignore[assignment]
    on_before_optimizer_step = on_before_zero_grad = SKIPPED  # type: ignore[assignment]
    on_test_batch_start = on_test_batch_end = on_predict_batch_start = on_predict_batch_end = SKIPPED  # type: ignore[assignment]

    def __init__(
        self,
        profile: bool = True, skip_first: int = 10, warmup: int = 1, active: int = 3,
        steps: Optional[StepRanges] = None, every_n_steps: Optional[int] = None,
        step_filter: Optional[Callable[[int], bool]] = None, ranks: Optional[Sequence[int]] = None,
        dirpath: Optional[str] = None, activities: Optional[Sequence[str]] = None,
        record_shapes: bool = False, profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
        with_modules: bool = False, quiet: bool = True, flush_timeout: float = 60.0, log_metrics: bool = True,
        alert_threshold: Optional[float] = DEFAULT_ALERT_THRESHOLD, alert_window: int = 100, alert_patience: int = 2,
        alert_cooldown: int = 1000, alert_action: str = "warn", on_alert: Optional[Callable[[DataWaitAlert], Any]] = None,
        capture_on_alert: bool = True, max_captures: int = 10, keep_last_windows: Optional[int] = None,
        max_trace_mb: Optional[float] = DEFAULT_MAX_TRACE_MB, validation_batches: Optional[StepRanges] = None,
        storage_options: Optional[dict[str, Any]] = None,
    ) -> None:
        self.options = Options(**{name: value for name, value in locals().items() if name != "self"})
        self.trace_dir: Optional[str] = None
        self.traces: list[str] = []  # this rank's trace files, oldest first
        self.alerts: list[DataWaitAlert] = []  # the alerts of the last fit
        self._checks = self.options.checks()
        self._notices = Notices()
        self._fit: Optional[FitRun] = None  # the running fit's machinery: never pickled or copied
        self._trainer: Optional[Trainer] = None
        unhook(self)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # not guarded: a trace folder that cannot be written is the user's to fix, before the first step
        if stage != "fit":
            return
        monitors = sum(isinstance(c, PerformanceMonitor) for c in trainer.callbacks)
        if monitors > 1:
            raise ValueError(f"`callbacks=` holds {monitors} PerformanceMonitors: a Trainer takes one (they would time "
                             "the same DataLoader fetches and profile the same steps)")
        check_monitors_come_after(trainer, self)
        self._end(wait=False)  # what an earlier fit left, if it ended without reaching our hooks
        require_fetch_pair(trainer)
        uninstall_stale(trainer)
        folder, why = own_trace_dir(trainer, self.options.dirpath or trace_dir(trainer))
        self.trace_dir = redact(folder)  # shown; the credentials of a URL stay in `folder`
        if why:
            self._notices(f"{why}; this fit writes to its own folder, so that they never mix:\n  {folder}", "shared_dir")
        check_trace_dir(folder, self.options.storage_options)
        if stored := saved_credentials(trainer, self.options.storage_options):
            self._notices(stored, "credentials")
        self._fit = FitRun(self.options, self._checks, self.traces, self.alerts, folder, self._notices,
                           rank=rank_of(trainer), other_profiler=is_a(trainer.profiler, "PyTorchProfiler"),
                           fit_loop=trainer.fit_loop, to_loggers=lambda alert: alert_to_tensorboard(trainer, alert),
                           wake=self._wake)

    @guarded
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._arm(trainer, pl_module.device.type == "cuda")
        why = self._fit.measure.start_sampler(cuda_uuid(pl_module)) if self.options.log_metrics else None
        loop = trainer.fit_loop.epoch_loop
        if loop.restarting and loop.batch_progress.current.ready > 0:  # mid-epoch: no on_train_epoch_start again
            self.on_train_epoch_start(trainer, pl_module)
        fit = self._fit
        disabled = fit.runner is None and fit.rank.world_size == 1
        plan = self.options.plan(fit.trace_dir, epoch_length(trainer), disabled)
        apply(trainer, Outcome(lines=[why, *plan] if why else plan))  # why GPU figures will be absent, where they will

    @guarded
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._fit.timer is None:  # given back while loops ran without us (a tuner's)
            self._arm(trainer, self._fit.measure.on_cuda)
        loop = trainer.fit_loop.epoch_loop
        # the epoch's counters are reset after this hook, unless resuming inside the epoch
        batch_idx = loop.batch_progress.current.ready if loop.restarting else 0
        self._fit.epoch_start(trainer.current_epoch, loop.total_batch_idx + 1, batch_idx, epoch_length(trainer))

    @guarded
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:  # on the steps we were woken for
        self.on_train_batch_end = SKIPPED  # type: ignore[assignment]
        loop = trainer.fit_loop.epoch_loop
        apply(trainer, self._fit.step_end(loop.total_batch_idx, batch_idx, loop.batch_progress.is_last_batch,
                                           lambda: loop.done, log_step(trainer), batch))

    @guarded
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._fit.validation_start(trainer.fit_loop.epoch_loop.total_batch_idx, log_step(trainer))

    @guarded
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        loop = trainer.fit_loop.epoch_loop
        self._fit.validation_end(loop.total_batch_idx + 1, loop.batch_progress.current.ready)

    @guarded
    def on_validation_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:  # with validation_batches: no sanity check
        if dataloader_idx == 0 and not trainer.sanity_checking and (windows := self._fit.validation_windows) is not None:
            windows.batch_start(batch_idx)

    @guarded
    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if dataloader_idx == 0 and (windows := self._fit.validation_windows) is not None:
            windows.batch_end()

    @guarded
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.on_train_batch_end = SKIPPED  # type: ignore[assignment]
        loop = trainer.fit_loop.epoch_loop
        apply(trainer, self._fit.epoch_end(loop.total_batch_idx, loop.batch_progress.total.completed,
                                           log_step(trainer, epoch_end=True)))

    @guarded
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        unhook(self)
        apply(trainer, self._fit.end())

    @guarded
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._end()

    @guarded
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self._end()

    def state_dict(self) -> dict[str, Any]:
        """Saved in checkpoints: the alert episode and cooldown, and the capture budget left."""
        return self._checks.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._checks.load_state_dict(state_dict)

    def __getstate__(self) -> dict[str, Any]:
        """Configuration and resumable state; not the running fit's machinery, which a copy neither shares nor disturbs."""
        return dict(self.__dict__, _fit=None, _trainer=None, **dict.fromkeys(SET_WHILE_NEEDED, SKIPPED))

    def _arm(self, trainer: Trainer, on_cuda: bool) -> None:
        """Timer and machinery in place when training starts, not at ``setup``: a failing tuner's loop skips teardown."""
        processes = self._fit.rank.processes_per_node
        self._fit.arm(FetchTimer(trainer).install(), on_cuda, getattr(trainer.train_dataloader, "batch_size", None),
                      lambda: loader_facts(train_loader(trainer), on_cuda, processes),
                      lambda: worker_pids(trainer))
        if self._fit.validation_windows is not None:  # the validation batch hooks exist only then: else they cost nothing
            rehook(self, "on_validation_batch_start", "on_validation_batch_end")
        self._fit.last_step, self._trainer = last_step(trainer), trainer

    def _wake(self) -> None:
        """From the fetch timer, at the first fetch of a step with work at its end (and every ``OWNER_CHECK_S`` s):
        have Lightning call us there; loops that run without us in ``trainer.callbacks`` are given back."""
        if self._trainer is not None and self not in self._trainer.callbacks:
            unhook(self)
            self._fit.disarm(wait=False)  # armed: set with the trainer, and let go with it
            return
        rehook(self, "on_train_batch_end")

    def _end(self, wait: bool = True) -> None:
        """Nothing of the fit left: hooks, profiler sessions, timer, writer, marker, exchange group."""
        unhook(self)
        fit, self._fit, self._trainer = self._fit, None, None
        if fit is not None:
            fit.close(wait)
