"""The Lightning glue: hooks that hand step boundaries to the window runner and traces to the writer."""

from __future__ import annotations

import functools
import os
import re
import socket
import time
import warnings
from collections import deque
from time import perf_counter
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torch.profiler import ProfilerActivity

from lightning_profkit import alerts, capture_request, fetch_timer
from lightning_profkit.advice import data_wait_advice, gpu_idle_advice, loader_facts
from lightning_profkit.alerts import AlertRule, CheckBlock, DataWaitAlert, DataWaitAlertError
from lightning_profkit.epoch_stats import PREFIX, epoch_figures, reduce_ranks, to_vector, window_metrics
from lightning_profkit.gpu_sampler import UtilizationSampler, nvml_reader
from lightning_profkit.report_text import short_summary
from lightning_profkit.retention import Retention
from lightning_profkit.selection import Selection, StepRanges, make_selection
from lightning_profkit.session import WindowRunner, WindowSession
from lightning_profkit.trace_summary import aggregate
from lightning_profkit.writer import TraceWriter, WindowJob

_ACTIVITIES = {"cpu": ProfilerActivity.CPU, "cuda": ProfilerActivity.CUDA}
_SUMMARIZED = 50  # windows in the end-of-fit summary (the newest)
_OPTIONS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")
_OWNER_CHECK_S = 10.0  # seconds of training between checks that we are still among the trainer's callbacks
# the running fit's machinery: left out of pickles and copies (see PerformanceMonitor.__getstate__)
_RUNTIME = dict(_runner=None, _writer=None, _trainer=None, _timer=None, _sampler=None, _poller=None, _marker=None,
                _group=None, _created_dir=None, _fitting=False, _in_epoch=False)


class DataWaitWarning(UserWarning):
    """The category of data-wait alert warnings (filter it like any warning)."""


def _guarded(hook: Callable) -> Callable:
    """A failure inside the callback warns once, turns profiling off and never stops training."""

    @functools.wraps(hook)
    def wrapper(self: "PerformanceMonitor", *args: Any, **kwargs: Any) -> Any:
        if self._broken:
            return None
        try:
            return hook(self, *args, **kwargs)
        except Exception as err:
            self._broken = True
            self._warn_once(f"profiling is off for the rest of this run after an error in `{hook.__name__}`: {err!r}")
            runner, self._runner = self._runner, None
            if runner is not None:
                try:  # end the profiler session cleanly, keeping what it recorded
                    runner.stop()
                except Exception:
                    runner.session = None
            return None

    return wrapper


def worker_name(rank: int, host: Optional[str] = None) -> str:
    """A file-name-safe worker name unique per host and rank."""
    host = re.sub(r"[^A-Za-z0-9_-]+", "_", host or socket.gethostname()) or "host"
    return f"{host}_rank{rank}"


def window_name(epoch: int, first: int, last: int) -> str:
    steps = f"{first}" if first == last else f"{first}-{last}"
    return f"epoch={epoch}-step={steps}"


class PerformanceMonitor(Callback):
    r"""Profile selected training steps with ``torch.profiler`` and stream each window's trace.

    By default one window per epoch (``profile=False``: none, metrics only): skip ``skip_first`` batches, warm up ``warmup``, record ``active``.
    Other selections (pass at most one): ``steps`` (``"100-102,500-502"`` or a list), ``every_n_steps``,
    or ``step_filter(step) -> bool``. A *step* is one training batch, numbered from 0 across epochs; it
    equals ``trainer.global_step`` unless ``accumulate_grad_batches > 1``. The trace's ``ProfilerStep#N``
    markers carry that number. Outside windows no profiler session exists.

    Each window goes to ``<run dir>/profiler/epoch=E-step=A-B/<host>_rank<R>.<ns>.pt.trace.json.gz``,
    where the run dir is the first TensorBoardLogger's ``log_dir`` (else ``trainer.log_dir``), so
    ``tensorboard --logdir <run dir>`` shows every window in the PyTorch Profiler tab.

    **Logged metrics** (through the trainer's loggers, once per epoch, x-axis ``global_step``), under
    ``profkit/``: ``data_wait_ratio`` (time inside the DataLoader's ``next()`` over training time, which
    leaves out validation), ``data_wait_s``, ``train_s``, ``step_time_ms_mean``/``_p90`` (a step's first
    fetch to the next step's, validation left out), ``dataloader_startup_s`` (epoch start to first fetch:
    worker start-up), ``samples_per_s``,
    ``val_data_wait_ratio``, ``peak_memory_mb`` (CUDA only), ``gpu_idle_ratio`` (CUDA with the ``nvml`` extra:
    ``1 -`` mean NVML utilization over the epoch's training time, sampled about every 1/6 s to 1 s). Several ranks: means, plus
    ``data_wait_ratio_max`` and ``data_wait_worst_rank``. Per profiled window (rank zero's traces):
    ``window/data_wait_share``, ``window/gpu_idle_ratio`` (GPU runs only), ``window/blocking_sync_ms``,
    ``window/sync_ms/<call>``, ``window/peak_memory_mb/<device>``, ``window/step_time_ms``.
    With alerts on: ``data_wait_alert`` (1 when the epoch was in a data-wait episode, else 0).

    **Alerts**: the data-wait ratio is checked every ``alert_window`` steps and at each epoch end (with several
    ranks, the worst rank's). ``alert_patience`` consecutive checks over ``alert_threshold`` start an episode,
    which gives one alert (none within ``alert_cooldown`` steps of the previous one): a
    :class:`DataWaitWarning` on rank zero with advice from the training DataLoader, ``on_alert(alert)`` with a
    :class:`~lightning_profkit.alerts.DataWaitAlert`, and, with ``capture_on_alert``, a window recorded right
    after the alert whose folder is in the alert. ``alert_action="stop"`` ends training at the next step
    boundary; ``"raise"`` raises :class:`~lightning_profkit.alerts.DataWaitAlertError`.

    **Capture on demand**: ``profkit capture <run dir>`` (or any process that creates
    ``<dirpath>/capture.request``) gets a window recorded within about a second (single process) or
    ``alert_window`` steps (several ranks, so that all ranks record the same steps).

    Args:
        profile: record profiler windows; ``False`` keeps only the per-epoch metrics.
        skip_first: batches skipped at the start of every epoch before the window (default mode).
        warmup: steps the profiler runs before recording, so start-up cost stays out of the trace.
        active: steps recorded per window (default mode and ``every_n_steps``).
        steps: explicit global steps to record, e.g. ``"100-102,500-502"`` or ``[[100, 102], 500]``.
        every_n_steps: record ``active`` steps from every multiple of this many steps.
        step_filter: record the steps for which ``step_filter(step)`` is true (a function of the step alone:
            it is asked ahead of time, up to 1000 steps at once, so that other steps cost nothing).
        ranks: global ranks that profile (default: all).
        dirpath: folder for the window folders (default: ``<run dir>/profiler``).
        activities: ``"cpu"``, ``"cuda"`` (default: CPU, plus CUDA when the model is on a CUDA device).
        record_shapes, profile_memory, with_stack, with_flops, with_modules: passed to ``torch.profiler``;
            off by default because each adds cost to the profiled steps.
        quiet: hide the ``USDT:`` lines torch prints whenever a session starts or stops.
        flush_timeout: seconds to wait at the end of ``fit`` for traces still being written.
        log_metrics: log the per-epoch and per-window metrics above.
        alert_threshold: data-wait ratio above which a check counts (default 0.2, TensorFlow's "highly
            input-bound"); ``None`` turns alerts off.
        alert_window: steps per rolling check.
        alert_patience: consecutive checks over the threshold before an alert.
        alert_cooldown: steps after an alert during which no new one is raised.
        alert_action: ``"warn"``, ``"stop"`` (end training gracefully) or ``"raise"``.
        on_alert: called on rank zero with each :class:`~lightning_profkit.alerts.DataWaitAlert`.
        capture_on_alert: record a window (``warmup`` + ``active`` steps) right after an alert.
        max_captures: the most windows recorded per ``fit`` after alerts and on request.
        keep_last_windows: keep only the newest this many window folders (our own files; ``None``: keep all).

    Example::

        from lightning.pytorch import Trainer
        from lightning.pytorch.demos.boring_classes import BoringModel
        from lightning_profkit import PerformanceMonitor

        trainer = Trainer(max_epochs=1, limit_train_batches=20, callbacks=[PerformanceMonitor()])
        trainer.fit(BoringModel())
    """

    # Lightning dispatches every hook to every callback through its profiler's context manager (about 7 µs
    # each here) unless the attribute is not callable. The per-batch hooks this callback does not use are
    # None, so that they cost nothing. So is `on_train_batch_end`, except on the steps where there is work
    # at the step's end (a window's steps, a rolling check, a capture request poll): the fetch timer, which
    # sees every step begin, sets it for those steps (`_wake`) and it unsets itself.
    on_train_batch_start = on_train_batch_end = on_before_backward = on_after_backward = None  # type: ignore[assignment]
    on_before_optimizer_step = on_before_zero_grad = None  # type: ignore[assignment]
    on_validation_batch_start = on_validation_batch_end = None  # type: ignore[assignment]
    on_test_batch_start = on_test_batch_end = None  # type: ignore[assignment]
    on_predict_batch_start = on_predict_batch_end = None  # type: ignore[assignment]

    def __init__(
        self,
        profile: bool = True,
        skip_first: int = 10,
        warmup: int = 1,
        active: int = 3,
        steps: Optional[StepRanges] = None,
        every_n_steps: Optional[int] = None,
        step_filter: Optional[Callable[[int], bool]] = None,
        ranks: Optional[Sequence[int]] = None,
        dirpath: Optional[str] = None,
        activities: Optional[Sequence[str]] = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        quiet: bool = True,
        flush_timeout: float = 60.0,
        log_metrics: bool = True,
        alert_threshold: Optional[float] = alerts.DEFAULT_THRESHOLD,
        alert_window: int = 100,
        alert_patience: int = 2,
        alert_cooldown: int = 1000,
        alert_action: str = "warn",
        on_alert: Optional[Callable[[DataWaitAlert], Any]] = None,
        capture_on_alert: bool = True,
        max_captures: int = 10,
        keep_last_windows: Optional[int] = None,
    ) -> None:
        self.selection: Selection = make_selection(skip_first, warmup, active, steps, every_n_steps, step_filter, profile)
        self.profile = profile
        if ranks is not None:
            if isinstance(ranks, (str, bytes)) or not all(isinstance(r, int) and r >= 0 for r in ranks) or not ranks:
                raise ValueError(f"`ranks` must be a non-empty list of ranks >= 0, got {ranks!r}")
            ranks = sorted(set(ranks))
        self.ranks = ranks
        if activities is not None:
            unknown = [a for a in activities if str(a).lower() not in _ACTIVITIES]
            if isinstance(activities, str) or unknown or not activities:
                raise ValueError(f"`activities` must be a list of 'cpu' and/or 'cuda', got {activities!r}")
        self.activities = activities
        if dirpath is not None and not isinstance(dirpath, (str, os.PathLike)):
            raise ValueError(f"`dirpath` must be a folder path, got {dirpath!r}")
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.profiler_options = dict(
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_flops=with_flops,
            with_modules=with_modules,
        )
        for name, value in self.profiler_options.items():
            if not isinstance(value, bool):
                raise ValueError(f"`{name}` must be True or False, got {value!r}")
        if not isinstance(flush_timeout, (int, float)) or flush_timeout < 0:
            raise ValueError(f"`flush_timeout` must be a number of seconds >= 0, got {flush_timeout!r}")
        if not isinstance(log_metrics, bool):
            raise ValueError(f"`log_metrics` must be True or False, got {log_metrics!r}")
        self.log_metrics = log_metrics
        alerts.validate(alert_threshold, alert_window, alert_patience, alert_cooldown, alert_action)
        if on_alert is not None and not callable(on_alert):
            raise ValueError(f"`on_alert` must be callable, got {on_alert!r}")
        if not isinstance(capture_on_alert, bool):
            raise ValueError(f"`capture_on_alert` must be True or False, got {capture_on_alert!r}")
        if isinstance(max_captures, bool) or not isinstance(max_captures, int) or max_captures < 0:
            raise ValueError(f"`max_captures` must be an integer >= 0, got {max_captures!r}")
        self.active = active
        self.alert_threshold = alert_threshold
        self.alert_window = alert_window
        self.alert_patience = alert_patience
        self.alert_cooldown = alert_cooldown
        self.alert_action = alert_action
        self.on_alert = on_alert
        self.capture_on_alert = capture_on_alert
        self.max_captures = max_captures
        if keep_last_windows is not None and (
            isinstance(keep_last_windows, bool) or not isinstance(keep_last_windows, int) or keep_last_windows < 1
        ):
            raise ValueError(f"`keep_last_windows` must be an integer >= 1 or None, got {keep_last_windows!r}")
        self.keep_last_windows = keep_last_windows
        self._retention: Optional[Retention] = None
        self.alerts: list[DataWaitAlert] = []
        if not isinstance(quiet, bool):
            raise ValueError(f"`quiet` must be True or False, got {quiet!r}")
        self.quiet = quiet
        self.flush_timeout = float(flush_timeout)
        self.trace_dir: Optional[str] = None
        self.traces: list[str] = []
        self._runner: Optional[WindowRunner] = None
        self._writer: Optional[TraceWriter] = None
        self._trainer: Optional[Trainer] = None
        self._created_dir: Optional[str] = None  # the trace folder, when we created it for the marker
        self._warned: set[str] = set()
        self._broken = False
        self._epoch = 0
        self._on_cuda = False
        self._timer: Optional[fetch_timer.FetchTimer] = None
        self._epoch_start = 0.0
        self._validation_spans: list[tuple[float, float]] = []
        self._validation_start: Optional[float] = None
        self._rule: Optional[AlertRule] = None
        self._episode_in_epoch = False
        self._pending: list[DataWaitAlert] = []  # alerts waiting for their capture window
        self._captures_left = max_captures
        self._requested = 0  # steps asked for from outside, for the next exchange (several ranks)
        self._poller: Optional[capture_request.RequestPoller] = None
        self._marker: Optional[str] = None
        self._group: Any = None
        self._check_at: Optional[int] = None  # the step at whose end the next rolling check runs
        self._windows_at: float = float("inf")  # the next step at whose end the window runner has work
        self._block = CheckBlock()
        self._epoch_carry = (0.0, 0.0)  # the block's figures at the last epoch end
        self._is_zero = True
        self._resume_state: Optional[dict[str, Any]] = None
        self._fitting = False
        self._in_epoch = False
        self._sampler: Optional[UtilizationSampler] = None
        # NVML marks (see gpu_sampler): the epoch's start and its validation runs; and a validation run's start
        self._gpu_marks: Optional[tuple[float, list[tuple[float, float]]]] = None
        self._gpu_validation_start = 0.0
        self._batch_size: Optional[int] = None
        self._finished_windows: deque[dict[str, Any]] = deque()
        self._summaries: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ setup
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._close(wait=False)  # what an earlier fit left, if it ended without reaching our hooks
        fetch_timer.uninstall_stale(trainer)  # and what any PerformanceMonitor left on these loops
        self._broken = False
        self.trace_dir = self.dirpath or os.path.join(_run_dir(trainer), "profiler")
        _check_writable(self.trace_dir)
        self._trainer = trainer
        self._worker = worker_name(trainer.global_rank)
        self._retention = Retention(self.keep_last_windows) if self.keep_last_windows else None
        self._runner = None
        self._rule = AlertRule(self.alert_threshold, self.alert_patience, self.alert_cooldown) if self.alert_threshold else None
        self._captures_left = self.max_captures
        self._pending = []
        self._summaries = []
        self._apply_resume_state()
        self._fitting = True
        self._check_at = None
        self._windows_at = float("inf")
        self.on_train_batch_end = None  # type: ignore[assignment]  # not left set by an earlier fit
        self._epoch_carry = (0.0, 0.0)
        self._group = _exchange_group(trainer)
        self._is_zero = trainer.is_global_zero
        if _runs_pytorch_profiler(trainer) and (self.ranks is None or trainer.global_rank in self.ranks):
            rank_zero_warn(
                "PerformanceMonitor: the Trainer runs Lightning's PyTorchProfiler, and torch allows one profiler "
                "session at a time; PerformanceMonitor records no windows in this run."
            )

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._arm(trainer)
        self._on_cuda = pl_module.device.type == "cuda"
        self._batch_size = getattr(trainer.train_dataloader, "batch_size", None)
        if self.log_metrics and not self._on_cuda:
            rank_zero_info("lightning_profkit: the model is not on a CUDA device; GPU idle and memory are not logged")
        if self.log_metrics and self._on_cuda and self._sampler is None:
            read, why = nvml_reader(str(torch.cuda.get_device_properties(pl_module.device).uuid))
            if read is None:
                rank_zero_info(f"lightning_profkit: {why}")
            else:
                self._sampler = UtilizationSampler(read).start()
        ranks = "all ranks" if self.ranks is None else f"ranks {','.join(map(str, self.ranks))}"
        sel = self.selection.for_epoch(_epoch_length(trainer))
        loop = trainer.fit_loop.epoch_loop
        if loop.restarting and loop.batch_progress.current.ready > 0:
            # resuming in the middle of an epoch: Lightning does not call on_train_epoch_start again
            self.on_train_epoch_start(trainer, pl_module)
        if not self.profile:
            rank_zero_info("lightning_profkit: metrics only (profile=False), no profiler windows")
            return
        rank_zero_info(
            f"lightning_profkit: profiling {sel.describe()} on {ranks}; traces -> {self.trace_dir}"
            + ("" if self._runner is not None or trainer.world_size > 1 else " (disabled, see warning)")
        )

    def _arm(self, trainer: Trainer) -> None:
        """Put the fetch timer on the loops and, on rank zero, announce the run for capture requests.

        Done when training starts rather than at ``setup``: a tuner that runs its own loop from
        ``on_fit_start`` (``lr_find``, ``scale_batch_size``) swaps ``trainer.callbacks`` for its own and, when
        it fails, never calls our ``teardown``, so whatever we put in place before it would stay."""
        self._timer = fetch_timer.install(trainer)
        if (self.ranks is None or trainer.global_rank in self.ranks) and not _runs_pytorch_profiler(trainer):
            self._runner = WindowRunner(self.selection, self._open_session)
        if trainer.is_global_zero and self.max_captures and self.trace_dir is not None:
            created = not os.path.isdir(self.trace_dir)
            self._marker = capture_request.mark_running(self.trace_dir)
            self._created_dir = self.trace_dir if created else None
            capture_request.take_request(self.trace_dir)  # a request left from an earlier run is stale
            self._poller = capture_request.RequestPoller(self.trace_dir)

    # ------------------------------------------------------------------ step boundaries
    @_guarded
    def _stop_windows(self) -> None:
        if self._runner is not None:
            self._runner.stop()

    @_guarded
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._fitting and self._timer is None:  # given back while loops ran without us (a tuner's)
            self._arm(trainer)
        self._epoch = trainer.current_epoch
        self._start_epoch_stats()
        loop = trainer.fit_loop.epoch_loop
        # the epoch's counters are reset after this hook, unless resuming inside the epoch
        step, batch_idx = loop.total_batch_idx + 1, loop.batch_progress.current.ready if loop.restarting else 0
        if self._check_at is None:
            self._check_at = step + self.alert_window - 1
        if self._runner is not None:
            self._runner.epoch_start(step, batch_idx, _epoch_length(trainer))
        self._windows_at = self._next_window_step(step, batch_idx)
        self._schedule()

    def _wake(self) -> None:
        """From the fetch timer, at the first fetch of a step with work at its end (and at least every
        ``_OWNER_CHECK_S`` seconds): have Lightning call us there. Loops that run without us in
        ``trainer.callbacks`` (a tuner's, or a fit whose callbacks were replaced) are given back at once."""
        if self._trainer is not None and self not in self._trainer.callbacks:
            self._close(wait=False)
            return
        self.on_train_batch_end = self._step_end  # type: ignore[assignment]

    def _step_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """``on_train_batch_end`` of the steps we were woken for; it schedules the next one."""
        self.on_train_batch_end = None  # type: ignore[assignment]
        now = perf_counter()
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        if self._check_at is not None and step >= self._check_at:
            self._check_at = step + self.alert_window
            self._check_block(trainer, now)  # every rank at the same step: it may exchange figures
        if self._poller is not None and now >= self._poller.next_poll:
            self._poll_requests(trainer, now)
        if self._finished_windows:  # log each window's figures once its trace is written
            self._log_windows(trainer)
        if step >= self._windows_at:
            self._advance_windows(trainer, batch_idx)
            self._windows_at = self._next_window_step(step + 1, batch_idx + 1)
        self._schedule()

    def _next_window_step(self, step: int, batch_idx: int) -> float:
        return self._runner.next_step_end(step, batch_idx) if self._runner is not None else float("inf")

    def _schedule(self) -> None:
        """Ask the fetch timer to wake us at the next step with work at its end, or at the next poll (or
        ownership check)."""
        if self._timer is not None:
            due = min(self._windows_at, float("inf") if self._check_at is None else self._check_at)
            at = perf_counter() + _OWNER_CHECK_S
            if self._poller is not None:
                at = min(at, self._poller.next_poll)
            self._timer.wake(due, at, self._wake)

    @_guarded
    def _advance_windows(self, trainer: Trainer, batch_idx: int) -> None:
        if self._runner is not None:
            loop = trainer.fit_loop.epoch_loop
            self._runner.step_end(
                loop.total_batch_idx, batch_idx, loop.batch_progress.is_last_batch, lambda: loop.done
            )

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._in_epoch:
            self._validation_start = perf_counter()
            if self._sampler is not None:
                self._gpu_validation_start = self._sampler.mark()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._validation_start is not None:
            end = perf_counter()
            self._validation_spans.append((self._validation_start, end))
            if self._sampler is not None and self._gpu_marks is not None:
                self._gpu_marks[1].append((self._gpu_validation_start, self._sampler.mark()))
            if self._timer is not None:
                self._timer.stats.exclude(end - self._validation_start)
            self._validation_start = None

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        end = perf_counter()
        self._in_epoch = False
        self.on_train_batch_end = None  # type: ignore[assignment]
        self._stop_windows()
        if self._timer is not None:
            self._timer.stats.end_step(end, trainer.fit_loop.epoch_loop.batch_progress.total.completed)
            self._epoch_carry = self._block_so_far(end)
        if self._timer is None or not (self.log_metrics or self._rule is not None):
            return
        # every rank takes part in the same collective here, whatever happened to its profiling
        metrics = self._epoch_metrics(trainer, pl_module, end)
        alert = None
        if self._rule is not None:
            ratio = metrics.get(PREFIX + "data_wait_ratio_max", metrics.get(PREFIX + "data_wait_ratio"))
            if ratio is not None:
                worst = metrics.get(PREFIX + "data_wait_worst_rank")
                alert = self._check(trainer, ratio, None if worst is None else int(worst), f"epoch {self._epoch}")
            metrics[PREFIX + "data_wait_alert"] = float(self._episode_in_epoch)
        if self.log_metrics and metrics and trainer.is_global_zero:
            metrics["epoch"] = float(trainer.current_epoch)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        self._log_windows(trainer)
        if alert is not None and self.alert_action == "raise":
            raise DataWaitAlertError(alert)

    @_guarded
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close()
        self._log_windows(trainer)
        self._deliver_pending()
        if self._summaries and trainer.is_global_zero:
            rank_zero_info(
                f"lightning_profkit: last {len(self._summaries)} window(s) of rank 0: {short_summary(aggregate(self._summaries))}."
                f" More: profkit summary {self.trace_dir}"
            )
        self._summaries = []

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._close()
        self._pending = []

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self._close()
            self._fitting = False
            self._trainer = None

    # ------------------------------------------------------------------ copies
    def __getstate__(self) -> dict[str, Any]:
        """Configuration and resumable state; not the running fit's machinery (threads, locks, the profiler
        session, the fetch timer, the trainer), which a copy neither shares nor disturbs."""
        state = dict(self.__dict__)
        state.update(_RUNTIME)
        state.pop("on_train_batch_end", None)  # a bound method of this object, set for one step
        state["_finished_windows"] = deque(self._finished_windows)
        return state

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Saved in checkpoints: the alert episode and cooldown, and the capture budget left."""
        return {"alert": self._rule.state_dict() if self._rule is not None else None, "captures_left": self._captures_left}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_state = dict(state_dict)
        if self._fitting:  # setup already ran (strategies that restore after setup)
            self._apply_resume_state()

    def _apply_resume_state(self) -> None:
        state, self._resume_state = self._resume_state, None
        if not state:
            return
        if self._rule is not None and state.get("alert"):
            self._rule.load_state_dict(state["alert"])
        if isinstance(state.get("captures_left"), int):
            self._captures_left = state["captures_left"]

    # ------------------------------------------------------------------ metrics
    def _start_epoch_stats(self) -> None:
        if self._timer is not None:
            self._timer.reset()
        self._epoch_start = perf_counter()
        self._in_epoch = True
        self._validation_spans = []
        self._episode_in_epoch = False
        self._block.start(self._epoch_start, self._fetch_s(), self._epoch_carry)  # a block runs on across epochs
        if self._on_cuda:
            torch.cuda.reset_peak_memory_stats()
        if self._sampler is not None:
            self._gpu_marks = (self._sampler.clear(), [])

    def _epoch_metrics(self, trainer: Trainer, pl_module: LightningModule, end: float) -> dict[str, float]:
        """This epoch's figures from every rank, reduced (the same on all ranks)."""
        try:
            peak = torch.cuda.max_memory_allocated() if self._on_cuda else None
            validation_s = sum(b - a for a, b in self._validation_spans)
            figures = epoch_figures(
                self._timer.stats, self._epoch_start, end, validation_s, self._batch_size, peak, self._gpu_idle()
            )
            vector = to_vector(figures)
        except Exception as err:
            self._warn_once(f"epoch metrics failed: {err!r}", key="metrics")
            vector = to_vector({})
        return reduce_ranks(_exchange(self._group, vector))  # over gloo: the device is not touched

    # ------------------------------------------------------------------ alerts and captures
    def _fetch_s(self) -> float:
        return self._timer.stats.train_s if self._timer is not None else 0.0

    def _check_block(self, trainer: Trainer, now: float) -> None:
        """The rolling check: this block's data wait on every rank (exchanged off the device), then the rule."""
        fetch, train = self._block_so_far(now)
        requested, self._requested = self._requested, 0
        self._block.start(now, self._fetch_s())
        rows = _exchange(self._group, [fetch, train, float(requested)])
        asked = int(max(row[2] for row in rows))
        if asked:
            self._start_capture(trainer, asked, "requested from outside")
        ratios = [(row[0] / row[1], rank) for rank, row in enumerate(rows) if row[1] > 0]
        if self._rule is not None and ratios:
            ratio, worst = max(ratios)
            step = trainer.fit_loop.epoch_loop.total_batch_idx
            alert = self._check(trainer, ratio, worst if len(rows) > 1 else None,
                                f"steps {step - self.alert_window + 1}-{step}")
            if alert is not None and self.alert_action == "raise":
                raise DataWaitAlertError(alert)

    def _block_so_far(self, now: float) -> tuple[float, float]:
        return self._block.so_far(now, self._fetch_s(), self._validation_spans)

    def _check(self, trainer: Trainer, ratio: float, worst_rank: Optional[int], checked: str) -> Optional[DataWaitAlert]:
        """Feed one check to the rule; on an alert, act on it (every rank decides alike) and return it."""
        assert self._rule is not None
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        fired = self._rule.check(ratio, step)
        self._episode_in_epoch |= self._rule.in_episode
        if not fired:
            return None
        alert = DataWaitAlert(ratio, self._rule.threshold, self._epoch, step, checked, worst_rank, self._advice(trainer))
        self.alerts.append(alert)
        if self.alert_action == "stop":
            trainer.should_stop = True
        captured = (
            self.alert_action == "warn" and self.capture_on_alert
            and self._start_capture(trainer, self.active, "after a data-wait alert")
        )
        if captured:
            self._pending.append(alert)  # delivered with its trace folder when the window ends
        else:
            self._deliver(alert)
        return alert

    def _advice(self, trainer: Trainer) -> list[str]:
        try:
            loader = trainer.train_dataloader
            if isinstance(loader, dict):
                loader = next(iter(loader.values()), None)
            elif isinstance(loader, (list, tuple)):
                loader = loader[0] if loader else None
            facts = loader_facts(loader, self._on_cuda, trainer.world_size // max(trainer.num_nodes, 1))
            stats = self._timer.stats if self._timer is not None else None
            startup = stats.first_fetch - self._epoch_start if stats is not None and stats.first_fetch else None
            return data_wait_advice(facts, startup, perf_counter() - self._epoch_start)
        except Exception as err:
            self._warn_once(f"advice failed: {err!r}", key="advice")
            return []

    def _start_capture(self, trainer: Trainer, steps: int, reason: str) -> Optional[tuple[int, int]]:
        """Record ``steps`` steps from the next step on; None when this rank cannot (or the budget is spent)."""
        if self._runner is None or self._broken:
            return None
        if self._captures_left <= 0:
            self._warn_once(f"no more captures: `max_captures={self.max_captures}` windows were recorded", key="budget")
            return None
        self._captures_left -= 1
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        first, last = self._runner.capture(step + 1, steps)
        self._windows_at = min(self._windows_at, step)  # the runner opens it at this step's end
        rank_zero_info(f"lightning_profkit: recording steps {first}-{last} ({reason})")
        return first, last

    def _poll_requests(self, trainer: Trainer, now: float) -> None:
        try:
            request = self._poller.poll(now)  # type: ignore[union-attr]
        except OSError as err:
            self._warn_once(f"cannot read capture requests: {err!r}", key="request")
            self._poller = None
            return
        if request is not None:
            steps = request["steps"] or self.active
            if trainer.world_size > 1:
                self._requested = steps  # all ranks start it together at the next rolling check
            else:
                self._start_capture(trainer, steps, "requested from outside")

    def _deliver(self, alert: DataWaitAlert) -> None:
        if not self._is_zero:
            return
        warnings.warn(f"PerformanceMonitor: {alert.message}", DataWaitWarning, stacklevel=2)
        if self.on_alert is not None:
            try:
                self.on_alert(alert)
            except Exception as err:
                self._warn_once(f"`on_alert` raised {err!r}; training continues", key="on_alert")

    def _deliver_pending(self, path: Optional[str] = None, steps: Optional[tuple[int, int]] = None) -> None:
        """Deliver the alerts whose capture window is ``steps`` (written to ``path``), or all of them."""
        keep = []
        for alert in self._pending:
            if steps is None or alert.step < steps[0]:  # the first window wholly after the alert
                alert.trace_dir = os.path.dirname(path) if path else None
                self._deliver(alert)
            else:
                keep.append(alert)
        self._pending = keep

    def _gpu_idle(self) -> Optional[float]:
        """NVML idle ratio of this epoch's training time, between marks in NVML's own clock."""
        if self._sampler is None or self._gpu_marks is None:
            return None
        start, validation = self._gpu_marks
        ratio = self._sampler.idle_ratio(start, self._sampler.mark(), validation)
        if self._sampler.error is not None:
            self._warn_once(f"NVML sampling stopped: {self._sampler.error!r}", key="nvml")
        return ratio

    def _log_windows(self, trainer: Trainer) -> None:
        done = []
        while self._finished_windows:  # a deque the writer thread appends to
            done.append(self._finished_windows.popleft())
        if not trainer.is_global_zero:
            return
        for window in done:
            self._gpu_idle_notice(window)
        if not self.log_metrics:
            return
        for window in done:
            metrics = window_metrics(window["figures"])
            if metrics:
                for logger in trainer.loggers:
                    logger.log_metrics(metrics, step=window["meta"]["steps"][1])

    # ------------------------------------------------------------------ sessions and traces
    def _open_session(self, selection: Selection, step: int, batch_idx: int, warmup: int) -> Optional[WindowSession]:
        if torch.autograd.profiler._is_profiler_enabled:
            self._warn_once("another torch.profiler session is running; this window is skipped")
            return None
        return WindowSession(
            selection, step, batch_idx, warmup, self._activities(), self.profiler_options, self._trace_ready, self.quiet
        )

    def _activities(self) -> list[ProfilerActivity]:
        if self.activities is not None:
            return [_ACTIVITIES[str(a).lower()] for a in self.activities]
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if self._on_cuda else [ProfilerActivity.CPU]

    def _trace_ready(self, session: WindowSession, prof: torch.profiler.profile) -> None:
        if session.last_recorded is None or self.trace_dir is None:
            return
        if self._writer is None:
            self._writer = TraceWriter(on_error=self._write_failed, on_written=self._written)
        first, last = session.first_active, session.last_recorded
        name = window_name(self._epoch, first, last)
        path = os.path.join(self.trace_dir, name, f"{self._worker}.{time.time_ns()}.pt.trace.json.gz")
        meta = {
            "epoch": self._epoch,
            "steps": [first, last],
            "batch_idx": [first - session.offset, last - session.offset],
            "worker": self._worker,
        }
        self._writer.submit(WindowJob(prof.profiler.kineto_results, path, meta))
        if self._pending:
            self._deliver_pending(path, (first, last))

    def _gpu_idle_notice(self, window: dict[str, Any]) -> None:
        """A window where the GPU mostly idles although the loop hardly waits for data: say why, once."""
        figures = window.get("figures") or {}
        idle, data = figures.get("gpu_idle_frac_window"), figures.get("dataloader_frac")
        threshold = self.alert_threshold or alerts.DEFAULT_THRESHOLD
        if idle is not None and idle > 0.5 and (data or 0.0) < threshold:
            lines = "\n".join(f"  - {line}" for line in gpu_idle_advice(figures))
            self._warn_once(
                f"the GPU was idle {idle:.0%} of the steps in {os.path.dirname(window['path'])} while the DataLoader "
                f"took {data or 0:.0%}: the CPU side of the step is the limit.\n{lines}", key="gpu_idle"
            )

    def _written(self, window: dict[str, Any]) -> None:
        """From the writer thread, once a trace is in place."""
        self.traces.append(window["path"])
        self._finished_windows.append(window)
        if window.get("summary"):
            self._summaries = self._summaries[-(_SUMMARIZED - 1):] + [window["summary"]]
        if self._retention is not None:
            removed = set(self._retention.add(window["path"]))
            if removed:
                self.traces = [p for p in self.traces if p not in removed]

    def _write_failed(self, message: str) -> None:
        self._warn_once(f"a profiler trace could not be written (training continues): {message}", key="write")

    def _close(self, wait: bool = True) -> None:
        """End the fit's machinery: the profiler session, the fetch timer, the sampler, the marker and,
        waiting up to ``flush_timeout`` (``wait``), the writer. Safe to call again."""
        if self._runner is not None:
            try:
                self._runner.stop()
            except Exception as err:
                self._warn_once(f"stopping the profiler failed: {err!r}")
            self._runner = None
        fetch_timer.uninstall(self._timer)
        self._timer = None
        self.on_train_batch_end = None  # type: ignore[assignment]
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        if self._marker is not None:
            capture_request.unmark(self._marker)
            self._marker = None
        self._poller = None
        writer, self._writer = self._writer, None
        left = writer.close(self.flush_timeout if wait else 0.0) if writer is not None else 0
        if left and wait:
            self._warn_once(f"{left} profiler trace(s) were still being written after {self.flush_timeout:.0f}s")
        if self._created_dir is not None:
            try:
                os.rmdir(self._created_dir)  # ours, and nothing was written into it
            except OSError:
                pass
            self._created_dir = None

    def _warn_once(self, message: str, key: Optional[str] = None) -> None:
        """Warn about each kind of problem once per callback (``key``, default the message itself)."""
        key = key or message
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"PerformanceMonitor: {message}", RuntimeWarning, stacklevel=2)


def _run_dir(trainer: Trainer) -> str:
    """First TensorBoardLogger's log_dir, else trainer.log_dir, else default_root_dir (same on all ranks)."""
    # by class name: pytorch_lightning's TensorBoardLogger is another class than lightning.pytorch's
    tb = next((lg for lg in trainer.loggers if any(c.__name__ == "TensorBoardLogger" for c in type(lg).__mro__)), None)
    if tb is not None:
        return trainer.strategy.broadcast(tb.log_dir)
    return trainer.log_dir or trainer.default_root_dir


def _check_writable(folder: str) -> None:
    """Fail now if ``folder`` could not be created or written, without creating it: a probe file in the
    folder or, where it does not exist yet, in its nearest existing parent, removed at once."""
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        if not os.path.isdir(existing):
            raise NotADirectoryError(20, "Not a directory", existing)
        probe = os.path.join(existing, f".profkit-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as err:
        raise OSError(
            f"PerformanceMonitor cannot write traces to {folder!r} ({err.strerror or err}: {existing!r}); "
            "pass `dirpath=` a writable folder"
        ) from err


def _exchange_group(trainer: Trainer) -> Any:
    """A gloo process group for the rolling checks, so exchanging a few numbers never touches the device."""
    if trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")


def _exchange(group: Any, values: list[float]) -> list[list[float]]:
    """Every rank's ``values`` (a CPU all_gather); just ours in a single process."""
    if group is None:
        return [values]
    mine = torch.tensor(values, dtype=torch.float64)
    rows = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(rows, mine, group=group)
    return [row.tolist() for row in rows]


def _runs_pytorch_profiler(trainer: Trainer) -> bool:
    return any(cls.__name__ == "PyTorchProfiler" for cls in trainer.profiler.__class__.__mro__)


def _epoch_length(trainer: Trainer) -> Optional[int]:
    n = trainer.num_training_batches
    return int(n) if n != float("inf") else None
