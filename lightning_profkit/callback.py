"""The Lightning glue: PerformanceMonitor's arguments and hooks. Each hook hands what it sees of the trainer to
the plain objects of :mod:`lightning_profkit.monitor`, which hold the logic (see the README's "How it works")."""

from __future__ import annotations

import functools
import inspect
import math
import os
from time import perf_counter
from typing import Any, Callable, Optional, Sequence

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from lightning_profkit.alerts import DataWaitAlert, DataWaitAlertError, DataWaitWarning
from lightning_profkit import capture_request
from lightning_profkit.monitor import fetch_timer
from lightning_profkit.monitor.advice import data_wait_advice, gpu_idle_notice, loader_facts
from lightning_profkit.monitor.checks import RollingChecks
from lightning_profkit.monitor.delivery import AlertDelivery
from lightning_profkit.monitor.epoch_figures import (PREFIX, EpochSpans, epoch_figures, reduce_ranks, rolling_metrics,
                                                    to_vector, window_metrics)
from lightning_profkit.monitor.exchange import close_group, exchange, exchange_group
from lightning_profkit.monitor.finalizer import child_env
from lightning_profkit.monitor.gpu_sampler import UtilizationSampler, nvml_reader
from lightning_profkit.monitor.options import DEFAULT_ALERT_THRESHOLD, DEFAULT_MAX_TRACE_MB, Options
from lightning_profkit.monitor.output import TraceOutput, check_writable
from lightning_profkit.monitor.own_cost import SLOW_AFTER, SLOW_EPOCHS, own_cost, slow_epochs
from lightning_profkit.monitor.selection import StepRanges
from lightning_profkit.monitor.windows import (FIRST_JSON_PER_BYTE, FIRST_JSON_PER_BYTE_WITH_STACK, ValidationWindows,
                                               WindowRunner, WindowSession, learned_json_per_byte, profiler_activities,
                                               session_opener)
from lightning_profkit.notices import warn
from lightning_profkit.store import is_url, join, probe, staging_dir

__all__ = ["PerformanceMonitor", "DataWaitWarning"]

OWNER_CHECK_S = 10.0  # seconds of training between checks that we are still among the trainer's callbacks
# the running fit's machinery: left out of pickles and copies (see PerformanceMonitor.__getstate__)
_RUNTIME = dict(_trainer=None, _timer=None, _runner=None, _validation=None, _output=None, _sampler=None, _live=None,
                _group=None, _delivery=None)


def _guarded(hook: Callable) -> Callable:
    """Every hook's guard: a failure inside the callback warns once, turns profiling off and never stops
    training (an alert with ``alert_action="raise"`` is the one error meant to reach the user). The hooks
    still run afterwards, so that every rank keeps taking part in the same exchanges."""

    @functools.wraps(hook)
    def wrapper(self: "PerformanceMonitor", *args: Any, **kwargs: Any) -> Any:
        try:
            return hook(self, *args, **kwargs)
        except DataWaitAlertError:
            raise
        except Exception as err:
            self._broken = True
            self._report(f"profiling is off for the rest of this run after an error in `{hook.__name__}`: {err!r}")
            self._end_windows()
            return None

    return wrapper


class PerformanceMonitor(Callback):
    r"""Profile selected training steps with ``torch.profiler`` and stream each window's trace.

    By default one window per epoch (``profile=False``: none, metrics only): skip ``skip_first`` batches, warm up ``warmup``, record ``active``.
    Other selections (pass at most one): ``steps`` (``"100-102,500-502"`` or a list), ``every_n_steps``,
    or ``step_filter(step) -> bool``. A *step* is one training batch, numbered from 0 across epochs; it
    equals ``trainer.global_step`` unless ``accumulate_grad_batches > 1``. The trace's ``ProfilerStep#N``
    markers carry that number. Outside windows no profiler session exists.

    Each window goes to ``<run dir>/profiler/step=AAAAAA-BBBBBB-epoch=E/<host>_rank<R>.<ns>.pt.trace.json.gz``,
    where the run dir is the first TensorBoardLogger's ``log_dir`` (else ``trainer.log_dir``), so
    ``tensorboard --logdir <run dir>`` shows every window in the PyTorch Profiler tab.

    **Logged metrics** (through the trainer's loggers, once per epoch, x-axis ``global_step``), under
    ``profkit/``: ``data_wait_ratio`` (time in Lightning's fetch of each batch, the DataLoader's
    ``next()`` and Lightning's CombinedLoader around it, over training time, which leaves out validation), ``data_wait_s``, ``train_s``, ``step_time_ms_mean``/``_p90`` (a step's first
    fetch to the next step's, validation left out), ``dataloader_startup_s`` (epoch start to first fetch:
    worker start-up), ``samples_per_s``,
    ``val_data_wait_ratio``, ``peak_memory_mb`` (CUDA only), ``gpu_idle_ratio`` (CUDA with the ``nvml`` extra:
    ``1 -`` mean NVML utilization over the epoch's training time, sampled about every 1/6 s to 1 s). Several ranks: means, plus
    ``data_wait_ratio_max`` and ``data_wait_worst_rank``; in epochs with a window, what profiling cost:
    ``overhead/profiled_step_ratio``, ``overhead/after_window_ratio`` (warned about when above 1.1 on CUDA, 1.5 on
    CPU, two epochs running) and ``overhead/window_ms``; from the first trace on, ``overhead/helper_cpu_s`` (CPU off the
    training thread). Per profiled window (rank zero's traces):
    ``window/data_wait_share``, ``window/host_step_ms``, ``window/gpu_idle_share`` (GPU runs only),
    ``window/blocking_sync_ms_per_step``, ``window/sync_ms_per_step/<call>``, ``window/peak_memory_mb/<device>``.
    With alerts on: ``data_wait_alert`` (1 when the epoch was in a data-wait episode, else 0).

    **Alerts**: the data-wait ratio is checked every ``alert_window`` steps and at each epoch end (with several
    ranks, the worst rank's). ``alert_patience`` consecutive checks over ``alert_threshold`` start an episode,
    which gives one alert (none within ``alert_cooldown`` steps of the previous one): a
    :class:`~lightning_profkit.alerts.DataWaitWarning` on rank zero with advice from the training DataLoader, ``on_alert(alert)`` with a
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
        quiet: hide the ``USDT:`` lines torch prints whenever a session starts or stops (the default).
        flush_timeout: seconds to wait at the end of ``fit`` for traces still being written.
        log_metrics: log the per-epoch and per-window metrics above.
        alert_threshold: data-wait ratio above which a check counts (default 0.2, TensorFlow's "highly
            input-bound"); ``None`` turns alerts off.
        alert_window: steps per rolling check (each check's figures are logged at its step, ``profkit/rolling/``).
        alert_patience: consecutive checks over the threshold before an alert.
        alert_cooldown: steps after an alert during which no new one is raised.
        alert_action: ``"warn"``, ``"stop"`` (end training gracefully) or ``"raise"``.
        on_alert: called on rank zero with each :class:`~lightning_profkit.alerts.DataWaitAlert`.
        capture_on_alert: record a window (``warmup`` + ``active`` steps) right after an alert.
        max_captures: the most windows recorded per ``fit`` after alerts and on request.
        keep_last_windows: keep only the newest this many window folders (our own files; ``None``: keep all).
        max_trace_mb: end a window early, keeping the steps recorded, once its trace would pass this many MB of
            JSON (estimated from the process's memory growth while recording; ``None``: no limit).
        validation_batches: validation batches to record in every validation run (not the sanity check), by
            their index in the run's first dataloader, e.g. ``"0-2"``: a window of their own each run, in
            ``step=SSSSSS-val-batch=AAAAAA-BBBBBB-epoch=E`` after training step S, with ``warmup`` first;
            metrics ``profkit/val_window/<name>``. A training window open when validation starts inside an
            epoch ends there; its remaining steps are recorded in a window of their own after validation.

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
        alert_threshold: Optional[float] = DEFAULT_ALERT_THRESHOLD,
        alert_window: int = 100,
        alert_patience: int = 2,
        alert_cooldown: int = 1000,
        alert_action: str = "warn",
        on_alert: Optional[Callable[[DataWaitAlert], Any]] = None,
        capture_on_alert: bool = True,
        max_captures: int = 10,
        keep_last_windows: Optional[int] = None,
        max_trace_mb: Optional[float] = DEFAULT_MAX_TRACE_MB,
        validation_batches: Optional[StepRanges] = None,
    ) -> None:
        arguments = {name: value for name, value in locals().items() if name in _PARAMETERS}
        self.options = Options(**arguments)
        self.selection = self.options.selection()
        self.trace_dir: Optional[str] = None
        self.traces: list[str] = []  # this rank's trace files, oldest first
        self.alerts: list[DataWaitAlert] = []  # the alerts of the last fit
        o = self.options
        self._checks = RollingChecks(o.alert_threshold, o.alert_patience, o.alert_cooldown, o.alert_window, o.max_captures)
        self._spans = EpochSpans()
        self._warned: set[str] = set()
        self._broken = False
        self._epoch = 0
        self._on_cuda = False
        self._in_epoch = False
        self._batch_size: Optional[int] = None
        self._windows_at: float = float("inf")  # the next step at whose end the window runner has work
        self._resume_training_window = False  # validation inside the epoch ended a training window
        self._epoch_first_step = 0
        self._step_baseline: Optional[float] = None  # seconds: unprofiled steps before the fit's first window
        self._slow_epochs = 0  # epochs running with unprofiled steps slower after a window
        self._helper_cpu_s = 0.0  # the fit's trace writing off the training thread, as of the last epoch's end
        self._json_per_byte = FIRST_JSON_PER_BYTE  # trace JSON per byte of memory growth while recording
        self.__dict__.update(_RUNTIME)

    # ------------------------------------------------------------------ setup and the end of a fit
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # not guarded: a trace folder that cannot be written is the user's to fix, before the first step
        if stage != "fit":
            return
        self._close(wait=False)  # what an earlier fit left, if it ended without reaching our hooks
        fetch_timer.uninstall_stale(trainer)  # and what any PerformanceMonitor left on these loops
        self._broken = False
        trace_dir = self.options.dirpath or join(_run_dir(trainer), "profiler")
        if is_url(trace_dir):  # written locally in full, then uploaded by the finalizing process
            probe(trace_dir, env=child_env())
            check_writable(staging_dir(trace_dir))
        else:
            check_writable(trace_dir)
        self.trace_dir = trace_dir
        self._trainer = trainer
        self._checks.start_fit()
        self._step_baseline, self._slow_epochs, self._helper_cpu_s = None, 0, 0.0
        self._json_per_byte = FIRST_JSON_PER_BYTE_WITH_STACK if self.options.with_stack else FIRST_JSON_PER_BYTE
        self._delivery = AlertDelivery(self.options.on_alert, self._report, lambda alert: _alert_to_tensorboard(trainer, alert))
        self._delivery.to_user = trainer.is_global_zero
        self._windows_at = float("inf")
        self.on_train_batch_end = None  # type: ignore[assignment]  # not left set by an earlier fit
        self._end_group()  # an earlier fit's, if it ended without teardown
        self._group = exchange_group(trainer.world_size)
        if _runs_pytorch_profiler(trainer) and self.options.profiles_rank(trainer.global_rank):
            if trainer.is_global_zero:
                warn("PerformanceMonitor: the Trainer runs Lightning's PyTorchProfiler, and torch allows one profiler "
                     "session at a time; PerformanceMonitor records no windows in this run.", UserWarning)

    @_guarded
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._on_cuda = pl_module.device.type == "cuda"
        self._arm(trainer)
        self._batch_size = getattr(trainer.train_dataloader, "batch_size", None)
        if self.options.log_metrics:
            self._start_sampler(pl_module)
        loop = trainer.fit_loop.epoch_loop
        if loop.restarting and loop.batch_progress.current.ready > 0:
            # resuming in the middle of an epoch: Lightning does not call on_train_epoch_start again
            self.on_train_epoch_start(trainer, pl_module)
        rank_zero_info(f"lightning_profkit: {self._plan(trainer)}")

    @_guarded
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close(trainer)
        if self._delivery is not None:
            self._delivery.window_written()
        summaries = self._output.summaries if self._output is not None else []
        slowest = self._slowest_rank(summaries) if self._group is not None and self.options.profile else None
        if summaries and trainer.is_global_zero:
            from lightning_profkit.trace.headline import fit_line  # the analysis side, only here
            from lightning_profkit.trace.summary import aggregate

            rank_zero_info(f"lightning_profkit: last {len(summaries)} window(s) of rank 0: "
                           f"{fit_line(aggregate(summaries))}{slowest or ''}. More: profkit summary {self.trace_dir}")
        self._output = None

    def _slowest_rank(self, summaries: list[dict[str, Any]]) -> Optional[str]:
        """On every rank (an exchange): the verdict over the ranks' newest windows, for rank zero's line."""
        from lightning_profkit.trace.ranks import RankFigures, rank_figures, verdict

        mine = rank_figures(summaries)
        rows = exchange(self._group, mine[0].as_values() if mine else [float("nan")] * len(RankFigures.__dataclass_fields__))
        found = verdict([RankFigures.from_values(row) for row in rows if not math.isnan(row[0])])  # NaN: no windows
        return f"; across ranks, {found.line}" if found is not None else None

    @_guarded
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._close()
        self._end_group()
        if self._delivery is not None:
            self._delivery.held = []

    @_guarded
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self._close()
            self._end_group()
            self._checks.end_fit()
            self._trainer = None

    # ------------------------------------------------------------------ epochs and steps
    @_guarded
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._checks.fitting and self._timer is None:  # given back while loops ran without us (a tuner's)
            self._arm(trainer)
        if self._timer is None:
            return
        self._epoch = trainer.current_epoch
        self._timer.reset()
        now = perf_counter()
        self._in_epoch = True
        self._spans = EpochSpans(now, self._sampler.clear() if self._sampler is not None else None)
        if self._on_cuda:
            torch.cuda.reset_peak_memory_stats()
        loop = trainer.fit_loop.epoch_loop
        # the epoch's counters are reset after this hook, unless resuming inside the epoch
        step, batch_idx = loop.total_batch_idx + 1, loop.batch_progress.current.ready if loop.restarting else 0
        self._checks.epoch_start(now, self._timer.stats.train_s, step, self._epoch)
        self._epoch_first_step = step
        if self._runner is not None:
            self._runner.epoch_start(step, batch_idx, _epoch_length(trainer))
        self._windows_at = self._next_window_step(step, batch_idx)
        self._schedule()

    @_guarded
    def _step_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        """``on_train_batch_end`` of the steps we were woken for; it schedules the next one."""
        self.on_train_batch_end = None  # type: ignore[assignment]
        now = perf_counter()
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        if self._checks.due(step):
            self._rolling_check(trainer, now, step)  # every rank at the same step: it may exchange figures
        if self._live is not None and now >= self._live.next_poll:
            self._poll_requests(trainer, now)
        if self._output is not None and self._output.has_written:
            self._take_windows(trainer)
        if step >= self._windows_at:
            self._advance_windows(trainer, batch_idx)
            self._windows_at = self._next_window_step(step + 1, batch_idx + 1)
        self._schedule()

    @_guarded
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._in_epoch:
            self._spans.validation_start(perf_counter(), self._gpu_mark())
            if self._runner is not None and self._runner.session is not None:  # no validation in a training window
                self._runner.stop(ran_current=False)  # between two steps: the next one has not run
                self._resume_training_window = True
        if self._validation is not None:
            self._validation.run_start()

    @_guarded
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._validation is not None:
            self._validation.stop()
        seconds = self._spans.validation_end(perf_counter(), self._gpu_mark())
        if seconds and self._timer is not None:
            self._timer.stats.exclude(seconds)
        if self._resume_training_window and self._runner is not None:
            loop = trainer.fit_loop.epoch_loop
            step, batch_idx = loop.total_batch_idx + 1, loop.batch_progress.current.ready
            self._runner.resume(step, batch_idx)
            self._windows_at = min(self._windows_at, self._next_window_step(step, batch_idx))
            self._schedule()
        self._resume_training_window = False

    @_guarded
    def _validation_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        """``on_validation_batch_start`` when ``validation_batches`` is set."""
        if self._validation is not None and dataloader_idx == 0 and not trainer.sanity_checking:
            self._validation.batch_start(batch_idx)

    @_guarded
    def _validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                              batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._validation is not None and dataloader_idx == 0:
            self._validation.batch_end()

    @_guarded
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        end = perf_counter()
        self._in_epoch = False
        self.on_train_batch_end = None  # type: ignore[assignment]
        if self._runner is not None:
            self._runner.stop()
        if self._timer is None:
            return
        self._timer.stats.end_step(end, trainer.fit_loop.epoch_loop.batch_progress.total.completed)
        self._checks.epoch_end(end, self._timer.stats.train_s, self._spans.validation)
        if self.options.log_metrics or self._checks.rule is not None:
            # every rank takes part in the same collective here, whatever happened to its profiling
            self._epoch_end_figures(trainer, end)

    # ------------------------------------------------------------------ checkpoints and copies
    def state_dict(self) -> dict[str, Any]:
        """Saved in checkpoints: the alert episode and cooldown, and the capture budget left."""
        return self._checks.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._checks.load_state_dict(state_dict)

    def __getstate__(self) -> dict[str, Any]:
        """Configuration and resumable state; not the running fit's machinery (threads, locks, the profiler
        session, the fetch timer, the trainer), which a copy neither shares nor disturbs."""
        state = dict(self.__dict__)
        state.update(_RUNTIME)
        for hook in ("on_train_batch_end", "on_validation_batch_start", "on_validation_batch_end"):
            state.pop(hook, None)  # bound methods of this object, set while a fit runs
        return state

    # ------------------------------------------------------------------ the fit's machinery
    def _arm(self, trainer: Trainer) -> None:
        """Put the fetch timer on the loops, the window runner in place and, on rank zero, announce the run
        for capture requests. Done when training starts rather than at ``setup``: a tuner that runs its own
        loop from ``on_fit_start`` (``lr_find``, ``scale_batch_size``) swaps ``trainer.callbacks`` for its own
        and, when it fails, never calls our ``teardown``, so whatever we put in place before it would stay."""
        assert self.trace_dir is not None
        o = self.options
        self._timer = fetch_timer.install(trainer)
        self._output = TraceOutput(self.trace_dir, trainer.global_rank, trainer.world_size, o.keep_last_windows,
                                   self._report)
        if o.profiles_rank(trainer.global_rank) and not _runs_pytorch_profiler(trainer):
            activities = profiler_activities(o.activities, self._on_cuda)
            limit = None if o.max_trace_mb is None else int(o.max_trace_mb * 1e6)

            def opener(trace_ready: Callable) -> Callable:
                return session_opener(activities, o.profiler_options(), trace_ready, o.quiet, self._report, limit,
                                      lambda: self._json_per_byte)

            self._runner = WindowRunner(self.selection, opener(self._trace_ready))
            batches = o.validation_selection()
            if batches is not None:  # the validation batch hooks exist only then: otherwise they cost nothing
                self._validation = ValidationWindows(batches, opener(self._validation_trace_ready))
                self.on_validation_batch_start = self._validation_batch_start  # type: ignore[assignment]
                self.on_validation_batch_end = self._validation_batch_end  # type: ignore[assignment]
        if trainer.is_global_zero and o.max_captures:  # requests for a run on a store are taken on its staging folder
            self._live = capture_request.LiveRun(self._output.local_dir)
            if self._output.remote:  # the finalizing process announces the run there and brings requests in
                self._output.announce(capture_request.this_run())

    def _close(self, trainer: Optional[Trainer] = None, wait: bool = True) -> None:
        """End the fit's machinery: the profiler session, the fetch timer, the sampler, the writer (waiting up
        to ``flush_timeout``, with ``wait``) and the live-run marker. Safe to call again. With ``trainer``, the
        windows written meanwhile are logged."""
        self._end_windows()
        self.on_validation_batch_start = self.on_validation_batch_end = None  # type: ignore[assignment]
        fetch_timer.uninstall(self._timer)
        self._timer = None
        self.on_train_batch_end = None  # type: ignore[assignment]
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        if self._output is not None:
            timeout = self.options.flush_timeout if wait else 0.0
            left, unsent = self._output.close(timeout)
            if left and wait:
                self._report(f"{left} profiler trace(s) were still being written after {timeout:.0f}s")
            if unsent:
                self._report(f"{len(unsent)} profiler trace(s) could not be uploaded to {self.trace_dir}; they are kept "
                             f"on this machine: {', '.join(unsent)}", key="unsent")
            self._take_windows(trainer)
        if self._live is not None:
            self._live.end()
            self._live = None

    def _end_windows(self) -> None:
        """End the training and validation windows' profiler sessions, keeping what they recorded."""
        for name in ("_runner", "_validation"):
            runner = getattr(self, name)
            setattr(self, name, None)
            if runner is not None:
                try:
                    runner.stop()
                except Exception as err:  # the runner has let go of the session already
                    self._report(f"stopping the profiler failed: {err!r}")

    def _end_group(self) -> None:
        group, self._group = self._group, None
        close_group(group)

    def _start_sampler(self, pl_module: LightningModule) -> None:
        if not self._on_cuda:
            rank_zero_info("lightning_profkit: the model is not on a CUDA device; GPU idle and memory are not logged")
        elif self._sampler is None:
            read, why = nvml_reader(str(torch.cuda.get_device_properties(pl_module.device).uuid))
            if read is None:
                rank_zero_info(f"lightning_profkit: {why}")
            else:
                self._sampler = UtilizationSampler(read).start()

    def _plan(self, trainer: Trainer) -> str:
        if not self.options.profile:
            return "metrics only (profile=False), no profiler windows"
        ranks = "all ranks" if self.options.ranks is None else f"ranks {','.join(map(str, self.options.ranks))}"
        disabled = "" if self._runner is not None or trainer.world_size > 1 else " (disabled, see warning)"
        return f"profiling {self.selection.for_epoch(_epoch_length(trainer)).describe()} on {ranks}; traces -> {self.trace_dir}{disabled}"

    def _wake(self) -> None:
        """From the fetch timer, at the first fetch of a step with work at its end (and at least every
        ``OWNER_CHECK_S`` seconds): have Lightning call us there. Loops that run without us in
        ``trainer.callbacks`` (a tuner's, or a fit whose callbacks were replaced) are given back at once."""
        if self._trainer is not None and self not in self._trainer.callbacks:
            self._close(wait=False)
            return
        self.on_train_batch_end = self._step_end  # type: ignore[assignment]

    def _schedule(self) -> None:
        """Ask the fetch timer to wake us at the next step with work at its end, or at the next poll (or
        ownership check)."""
        if self._timer is not None:
            check_at = self._checks.check_at
            due = min(self._windows_at, float("inf") if check_at is None else check_at)
            at = perf_counter() + OWNER_CHECK_S
            if self._live is not None:
                at = min(at, self._live.next_poll)
            self._timer.wake(due, at, self._wake)

    def _next_window_step(self, step: int, batch_idx: int) -> float:
        return self._runner.next_step_end(step, batch_idx) if self._runner is not None else float("inf")

    @_guarded
    def _advance_windows(self, trainer: Trainer, batch_idx: int) -> None:
        if self._runner is not None:
            loop = trainer.fit_loop.epoch_loop
            self._runner.step_end(loop.total_batch_idx, batch_idx, loop.batch_progress.is_last_batch, lambda: loop.done)

    def _trace_ready(self, session: WindowSession, prof: torch.profiler.profile) -> None:
        if session.last_recorded is None or self._output is None:
            return
        first, last = session.first_active, session.last_recorded
        notes: dict[str, Any] = {}
        if session.estimate_bytes is not None:
            notes.update(estimated_mb=round(session.estimate_bytes / 1e6, 3), memory_growth_bytes=session.growth_bytes)
        if session.planned_last is not None:
            notes["cut"] = {"reason": "max_trace_mb", "max_trace_mb": self.options.max_trace_mb,
                            "planned_steps": [first, session.planned_last]}
            self._report(self._cut_message(first, last, session), key="max_trace_mb")
        path = self._output.submit(prof.profiler.kineto_results, self._epoch, first, last, session.offset, notes)
        if self._delivery is not None and self._delivery.held:
            self._delivery.window_written(path, first)

    def _validation_trace_ready(self, session: WindowSession, prof: torch.profiler.profile) -> None:
        if session.last_recorded is None or self._output is None or self._trainer is None:
            return
        after = self._trainer.fit_loop.epoch_loop.total_batch_idx  # the training step validation followed
        self._output.submit(prof.profiler.kineto_results, self._trainer.current_epoch, session.first_active,
                            session.last_recorded, 0, validation_after=max(after, 0))

    def _cut_message(self, first: int, last: int, session: WindowSession) -> str:
        o = self.options
        heavy = [name for name in ("with_stack", "record_shapes", "profile_memory", "with_modules") if getattr(o, name)]
        fewer = f"record fewer steps (active={o.active}, `steps=`)"
        advice = f"turn off {', '.join(f'{n}=True' for n in heavy)} or {fewer}" if heavy else fewer
        return (f"the trace of steps {first}-{session.planned_last} would pass max_trace_mb={o.max_trace_mb:g}, so the "
                f"window ended after step {last} with the steps recorded (about {session.estimate_bytes / 1e6:.0f} MB "
                f"of JSON so far, estimated from the memory the profiler took). To record whole windows: {advice}, "
                "or raise max_trace_mb")

    def _take_windows(self, trainer: Optional[Trainer]) -> None:
        """The windows written since the last look: their traces listed and, on rank zero, their figures logged."""
        assert self._output is not None
        done = self._output.take_written(self.traces)
        for window in done:  # the size estimate's factor, from the fit's latest window (same model, same options)
            if window.json_bytes and window.growth_bytes:
                self._json_per_byte = learned_json_per_byte(window.json_bytes, window.growth_bytes)
        if trainer is None or not trainer.is_global_zero:
            return
        threshold = self.options.alert_threshold or DEFAULT_ALERT_THRESHOLD
        for window in done:
            notice = None if window.validation else gpu_idle_notice(window.figures, os.path.dirname(window.path), threshold)
            if notice:
                self._report(notice, key="gpu_idle")
            metrics = window_metrics(window.figures, window.validation) if self.options.log_metrics else {}
            for logger in trainer.loggers if metrics else ():
                logger.log_metrics(metrics, step=window.last)

    # ------------------------------------------------------------------ metrics, alerts and captures
    def _epoch_end_figures(self, trainer: Trainer, end: float) -> None:
        """The epoch's figures from every rank, reduced, logged, and checked for an alert."""
        try:
            peak = torch.cuda.max_memory_allocated() if self._on_cuda else None
            stats = self._timer.stats  # type: ignore[union-attr]
            figures = epoch_figures(stats, self._spans.start, end, self._spans.validation_s, self._batch_size, peak,
                                    self._gpu_idle())
            runner, helper = self._runner, None
            if self._output is not None and self._output.helper_cpu_s:  # from the fit's first trace on
                helper, self._helper_cpu_s = self._output.helper_cpu_s - self._helper_cpu_s, self._output.helper_cpu_s
            cost, baseline = own_cost(stats.step_times, self._epoch_first_step, runner.profiled if runner else [],
                                      self._step_baseline, runner.spent if runner else [], helper)
            self._step_baseline = self._step_baseline or baseline
            vector = to_vector({**figures, **cost})
        except Exception as err:
            self._report(f"epoch metrics failed: {err!r}", key="metrics")
            vector = to_vector({})
        metrics = reduce_ranks(exchange(self._group, vector))  # over gloo: the device is not touched
        self._watch_after_window(metrics.get(PREFIX + "overhead/after_window_ratio"), trainer.is_global_zero)
        alert = None
        if self._checks.rule is not None:
            ratio = metrics.get(PREFIX + "data_wait_ratio_max", metrics.get(PREFIX + "data_wait_ratio"))
            if ratio is not None:
                worst = metrics.get(PREFIX + "data_wait_worst_rank")
                alert = self._judge(trainer, ratio, None if worst is None else int(worst), f"epoch {self._epoch}")
            metrics[PREFIX + "data_wait_alert"] = float(self._checks.episode_in_epoch)
        if self.options.log_metrics and metrics and trainer.is_global_zero:
            metrics["epoch"] = float(trainer.current_epoch)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        if self._output is not None:
            self._take_windows(trainer)
        if alert is not None and self.options.alert_action == "raise":
            raise DataWaitAlertError(alert)

    def _watch_after_window(self, ratio: Optional[float], to_user: bool) -> None:
        """Warn once when unprofiled steps stay slower after the windows than before them."""
        self._slow_epochs = slow_epochs(self._slow_epochs, ratio, SLOW_AFTER["cuda" if self._on_cuda else "cpu"])
        if self._slow_epochs < SLOW_EPOCHS or not to_user:
            return
        if self._on_cuda:
            cause = ("This is usually CUPTI left attached after a window: kineto keeps it unless TEARDOWN_CUPTI=1 "
                     "(torch sets TEARDOWN_CUPTI=0 with CUDA graphs on CUDA older than 12.6); set TEARDOWN_CUPTI=1 "
                     "in the environment before the first window, or record fewer windows (`steps=`, `profile=False`)")
        else:
            cause = ("On CPU nothing of torch.profiler is known to outlive a window: a fit with `profile=False` "
                     "tells whether the windows are the cause (its after_window_ratio is absent, its step_time_ms_mean "
                     "comparable) or the machine is")
        self._report(
            f"unprofiled steps after the profiler windows took {ratio:.2f}x the time of those before the first "
            f"window, {self._slow_epochs} epochs running (profkit/overhead/after_window_ratio). {cause}",
            key="after_window",
        )

    def _rolling_check(self, trainer: Trainer, now: float, step: int) -> None:
        """This block's data wait on every rank (exchanged off the device), then the rule."""
        assert self._timer is not None
        checked = self._checks.span(step)
        rows = exchange(self._group, self._checks.take_block(now, self._timer.stats.train_s, self._spans.validation, step))
        asked = int(max(row[2] for row in rows))
        if asked:
            self._capture_requested(trainer, asked)
        if self.options.log_metrics and trainer.is_global_zero:  # the curve grows while a long epoch runs
            metrics = rolling_metrics(rows, self.options.alert_window)
            for logger in trainer.loggers if metrics else ():
                logger.log_metrics(metrics, step=step)
        worst = self._checks.worst(rows)
        if self._checks.rule is not None and worst is not None:
            alert = self._judge(trainer, worst[0], worst[1] if len(rows) > 1 else None, checked)
            if alert is not None and self.options.alert_action == "raise":
                raise DataWaitAlertError(alert)

    def _judge(self, trainer: Trainer, ratio: float, worst_rank: Optional[int], checked: str) -> Optional[DataWaitAlert]:
        """Feed one check to the rule; on an alert, act on it (every rank decides alike) and return it."""
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        if not self._checks.judge(ratio, step):
            return None
        assert self._checks.rule is not None and self._delivery is not None
        alert = DataWaitAlert(ratio, self._checks.rule.threshold, self._epoch, step, checked, worst_rank, self._advice(trainer))
        self.alerts.append(alert)
        o = self.options
        if o.alert_action == "stop":
            trainer.should_stop = True
        steps = self._start_capture(trainer, o.active) if o.alert_action == "warn" and o.capture_on_alert else None
        if steps is not None:
            rank_zero_info(f"lightning_profkit: data-wait alert at step {step}: recording steps {steps[0]}-{steps[1]} "
                           "for it; the alert follows when their trace is written")
            self._delivery.hold(alert)  # delivered with its trace folder when the window ends
        else:
            self._delivery.send(alert)
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
            startup = stats.first_fetch - self._spans.start if stats is not None and stats.first_fetch else None
            return data_wait_advice(facts, startup, perf_counter() - self._spans.start)
        except Exception as err:
            self._report(f"advice failed: {err!r}", key="advice")
            return []

    def _capture_requested(self, trainer: Trainer, steps: int) -> None:
        window = self._start_capture(trainer, steps)
        if window is not None:
            rank_zero_info(f"lightning_profkit: recording steps {window[0]}-{window[1]} (requested from outside)")

    def _start_capture(self, trainer: Trainer, steps: int) -> Optional[tuple[int, int]]:
        """Record ``steps`` steps from the next step on; None when this rank cannot (or the budget is spent)."""
        if self._runner is None or self._broken:
            return None
        if not self._checks.spend_capture():
            self._report(f"no more captures: `max_captures={self.options.max_captures}` windows were recorded", key="budget")
            return None
        step = trainer.fit_loop.epoch_loop.total_batch_idx
        first, last = self._runner.capture(step + 1, steps)
        self._windows_at = min(self._windows_at, step)  # the runner opens it at this step's end
        return first, last

    def _poll_requests(self, trainer: Trainer, now: float) -> None:
        assert self._live is not None
        try:
            request = self._live.poll(now)
        except OSError as err:
            self._report(f"cannot read capture requests: {err!r}", key="request")
            return
        if request is not None:
            steps = request["steps"] or self.options.active
            if trainer.world_size > 1:
                self._checks.requested = steps  # all ranks start it together at the next rolling check
            else:
                self._capture_requested(trainer, steps)

    def _gpu_mark(self) -> Optional[float]:
        return self._sampler.mark() if self._sampler is not None else None

    def _gpu_idle(self) -> Optional[float]:
        """NVML idle ratio of this epoch's training time, between marks in NVML's own clock."""
        if self._sampler is None or self._spans.gpu_start is None:
            return None
        ratio = self._sampler.idle_ratio(self._spans.gpu_start, self._sampler.mark(), self._spans.gpu_validation)
        if self._sampler.error is not None:
            self._report(f"NVML sampling stopped: {self._sampler.error!r}", key="nvml")
        return ratio

    def _report(self, message: str, key: Optional[str] = None) -> None:
        """Warn about each kind of problem once per callback (``key``, default the message itself)."""
        key = key or message
        if key not in self._warned:
            self._warned.add(key)
            warn(f"PerformanceMonitor: {message}", RuntimeWarning, stacklevel=2)


_PARAMETERS = frozenset(inspect.signature(PerformanceMonitor.__init__).parameters) - {"self"}


def _tensorboard_loggers(trainer: Trainer) -> list[Any]:
    # by class name: pytorch_lightning's TensorBoardLogger is another class than lightning.pytorch's
    return [lg for lg in trainer.loggers if any(c.__name__ == "TensorBoardLogger" for c in type(lg).__mro__)]


def _alert_to_tensorboard(trainer: Trainer, alert: DataWaitAlert) -> None:
    """An alert in TensorBoard's Text tab (``profkit/alerts``) at its step, for each TensorBoardLogger."""
    for logger in _tensorboard_loggers(trainer):
        logger.experiment.add_text("profkit/alerts", alert.markdown, global_step=alert.step)


def _run_dir(trainer: Trainer) -> str:
    """First TensorBoardLogger's log_dir, else trainer.log_dir, else default_root_dir (same on all ranks)."""
    tb = next(iter(_tensorboard_loggers(trainer)), None)
    if tb is not None:
        return trainer.strategy.broadcast(tb.log_dir)
    return trainer.log_dir or trainer.default_root_dir


def _runs_pytorch_profiler(trainer: Trainer) -> bool:
    return any(cls.__name__ == "PyTorchProfiler" for cls in trainer.profiler.__class__.__mro__)


def _epoch_length(trainer: Trainer) -> Optional[int]:
    n = trainer.num_training_batches
    return int(n) if n != float("inf") else None
