"""The Lightning glue: hooks that hand step boundaries to the window runner and traces to the writer."""

from __future__ import annotations

import functools
import os
import re
import socket
import time
import warnings
from time import perf_counter
from typing import Any, Callable, Optional, Sequence

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torch.profiler import ProfilerActivity

from lightning_profkit import fetch_timer
from lightning_profkit.epoch_stats import epoch_figures, reduce_ranks, to_vector, window_metrics
from lightning_profkit.gpu_sampler import UtilizationSampler, nvml_reader
from lightning_profkit.selection import Selection, StepRanges, make_selection
from lightning_profkit.session import WindowRunner, WindowSession
from lightning_profkit.writer import TraceWriter, WindowJob

_ACTIVITIES = {"cpu": ProfilerActivity.CPU, "cuda": ProfilerActivity.CUDA}
_OPTIONS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")


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
            if self._runner is not None:
                self._runner.session = None
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
    leaves out validation), ``data_wait_s``, ``train_s``, ``step_time_ms_mean``/``_p90`` (fetch start to
    batch end), ``dataloader_startup_s`` (epoch start to first fetch: worker start-up), ``samples_per_s``,
    ``val_data_wait_ratio``, ``peak_memory_mb`` (CUDA only), ``gpu_idle_ratio`` (CUDA with the ``nvml`` extra:
    ``1 -`` mean NVML utilization over the epoch's training time, sampled about every 1/6 s to 1 s). Several ranks: means, plus
    ``data_wait_ratio_max`` and ``data_wait_worst_rank``. Per profiled window (rank zero's traces):
    ``window/data_wait_share``, ``window/gpu_idle_ratio`` (GPU runs only), ``window/blocking_sync_ms``,
    ``window/sync_ms/<call>``, ``window/peak_memory_mb/<device>``, ``window/step_time_ms``.

    Args:
        profile: record profiler windows; ``False`` keeps only the per-epoch metrics.
        skip_first: batches skipped at the start of every epoch before the window (default mode).
        warmup: steps the profiler runs before recording, so start-up cost stays out of the trace.
        active: steps recorded per window (default mode and ``every_n_steps``).
        steps: explicit global steps to record, e.g. ``"100-102,500-502"`` or ``[[100, 102], 500]``.
        every_n_steps: record ``active`` steps from every multiple of this many steps.
        step_filter: record the steps for which ``step_filter(step)`` is true.
        ranks: global ranks that profile (default: all).
        dirpath: folder for the window folders (default: ``<run dir>/profiler``).
        activities: ``"cpu"``, ``"cuda"`` (default: CPU, plus CUDA when the model is on a CUDA device).
        record_shapes, profile_memory, with_stack, with_flops, with_modules: passed to ``torch.profiler``;
            off by default because each adds cost to the profiled steps.
        quiet: hide the ``USDT:`` lines torch prints whenever a session starts or stops.
        flush_timeout: seconds to wait at the end of ``fit`` for traces still being written.
        log_metrics: log the per-epoch and per-window metrics above.

    Example::

        from lightning.pytorch import Trainer
        from lightning.pytorch.demos.boring_classes import BoringModel
        from lightning_profkit import PerformanceMonitor

        trainer = Trainer(max_epochs=1, limit_train_batches=20, callbacks=[PerformanceMonitor()])
        trainer.fit(BoringModel())
    """

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
        self.dirpath = dirpath
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
        self.quiet = bool(quiet)
        self.flush_timeout = float(flush_timeout)
        self.trace_dir: Optional[str] = None
        self.traces: list[str] = []
        self._runner: Optional[WindowRunner] = None
        self._writer: Optional[TraceWriter] = None
        self._warned: set[str] = set()
        self._broken = False
        self._epoch = 0
        self._on_cuda = False
        self._timer: Optional[fetch_timer.FetchTimer] = None
        self._epoch_start = 0.0
        self._validation_spans: list[tuple[float, float]] = []
        self._validation_start: Optional[float] = None
        self._in_epoch = False
        self._sampler: Optional[UtilizationSampler] = None
        self._step_times: list[float] = []
        self._batch_size: Optional[int] = None
        self._finished_windows: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ setup
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._broken = False
        self.trace_dir = self.dirpath or os.path.join(_run_dir(trainer), "profiler")
        _check_writable(self.trace_dir)
        self._worker = worker_name(trainer.global_rank)
        self._writer = TraceWriter(on_error=self._write_failed, on_written=self._written)
        self._runner = None
        lightning_profiler = _runs_pytorch_profiler(trainer)
        self._timer = fetch_timer.install(trainer)
        if self.ranks is not None and trainer.global_rank not in self.ranks:
            return
        if lightning_profiler:
            rank_zero_warn(
                "PerformanceMonitor: the Trainer runs Lightning's PyTorchProfiler, and torch allows one profiler "
                "session at a time; PerformanceMonitor records no windows in this run."
            )
            return
        self._runner = WindowRunner(self.selection, self._open_session)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._on_cuda = pl_module.device.type == "cuda"
        self._batch_size = getattr(trainer.train_dataloader, "batch_size", None)
        if self.log_metrics and not self._on_cuda:
            rank_zero_info("lightning_profkit: the model is not on a CUDA device; GPU idle and memory are not logged")
        if self.log_metrics and self._on_cuda and self._sampler is None:
            read, why = nvml_reader(pl_module.device.index or 0)
            if read is None:
                rank_zero_info(f"lightning_profkit: {why}")
            else:
                self._sampler = UtilizationSampler(read).start()
        ranks = "all ranks" if self.ranks is None else f"ranks {','.join(map(str, self.ranks))}"
        sel = self.selection.for_epoch(_epoch_length(trainer))
        if not self.profile:
            rank_zero_info("lightning_profkit: metrics only (profile=False), no profiler windows")
            return
        rank_zero_info(
            f"lightning_profkit: profiling {sel.describe()} on {ranks}; traces -> {self.trace_dir}"
            + ("" if self._runner is not None or trainer.world_size > 1 else " (disabled, see warning)")
        )

    # ------------------------------------------------------------------ step boundaries
    @_guarded
    def _stop_windows(self) -> None:
        if self._runner is not None:
            self._runner.stop()

    @_guarded
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._epoch = trainer.current_epoch
        self._start_epoch_stats()
        if self._runner is not None:
            loop = trainer.fit_loop.epoch_loop
            self._runner.epoch_start(
                loop.total_batch_idx + 1, loop.batch_progress.current.ready, _epoch_length(trainer)
            )

    @_guarded
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        started = self._timer.stats.fetch_started if self._timer is not None else None
        if started is not None:
            self._step_times.append(perf_counter() - started)
        if self._runner is not None:
            loop = trainer.fit_loop.epoch_loop
            self._runner.step_end(loop.total_batch_idx, batch_idx, loop.batch_progress.is_last_batch)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._in_epoch:
            self._validation_start = perf_counter()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._validation_start is not None:
            self._validation_spans.append((self._validation_start, perf_counter()))
            self._validation_start = None

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        end = perf_counter()
        self._in_epoch = False
        self._stop_windows()
        if self.log_metrics and self._timer is not None:
            # every rank takes part in the same collective here, whatever happened to its profiling
            self._log_epoch(trainer, pl_module, end)

    @_guarded
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close()
        self._log_windows(trainer)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._close()
        fetch_timer.uninstall(trainer, self._timer)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self._close()
            fetch_timer.uninstall(trainer, self._timer)
            self._timer = None

    # ------------------------------------------------------------------ metrics
    def _start_epoch_stats(self) -> None:
        if self._timer is not None:
            self._timer.reset()
        self._epoch_start = perf_counter()
        self._in_epoch = True
        self._validation_spans = []
        self._step_times = []
        if self._on_cuda:
            torch.cuda.reset_peak_memory_stats()
        if self._sampler is not None:
            self._sampler.clear()

    def _log_epoch(self, trainer: Trainer, pl_module: LightningModule, end: float) -> None:
        try:
            peak = torch.cuda.max_memory_allocated() if self._on_cuda else None
            validation_s = sum(b - a for a, b in self._validation_spans)
            figures = epoch_figures(
                self._timer.stats, self._epoch_start, end, validation_s, self._step_times, self._batch_size, peak,
                self._gpu_idle(end),
            )
            vector = to_vector(figures)
        except Exception as err:
            self._warn_once(f"epoch metrics failed: {err!r}", key="metrics")
            vector = to_vector({})
        rows = trainer.strategy.all_gather(torch.tensor(vector, dtype=torch.float64, device=pl_module.device))
        rows = rows.reshape(-1, len(vector)).cpu().tolist()
        metrics = reduce_ranks(rows)
        if metrics and trainer.is_global_zero:
            metrics["epoch"] = float(trainer.current_epoch)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        self._log_windows(trainer)

    def _gpu_idle(self, end: float) -> Optional[float]:
        """NVML idle ratio of this epoch's training time (perf_counter spans moved to wall-clock µs)."""
        if self._sampler is None:
            return None
        to_us = (time.time() - perf_counter()) * 1e6
        spans = [(a * 1e6 + to_us, b * 1e6 + to_us) for a, b in self._validation_spans]
        ratio = self._sampler.idle_ratio(self._epoch_start * 1e6 + to_us, end * 1e6 + to_us, spans)
        if self._sampler.error is not None:
            self._warn_once(f"NVML sampling stopped: {self._sampler.error!r}", key="nvml")
        return ratio

    def _log_windows(self, trainer: Trainer) -> None:
        done, self._finished_windows = self._finished_windows, []
        if not (self.log_metrics and trainer.is_global_zero):
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
        if session.last_recorded is None or self._writer is None or self.trace_dir is None:
            return
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

    def _written(self, window: dict[str, Any]) -> None:
        self.traces.append(window["path"])
        self._finished_windows.append(window)

    def _write_failed(self, message: str) -> None:
        self._warn_once(f"a profiler trace could not be written (training continues): {message}", key="write")

    def _close(self) -> None:
        if self._runner is not None:
            try:
                self._runner.stop()
            except Exception as err:
                self._warn_once(f"stopping the profiler failed: {err!r}")
            self._runner = None
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        if self._writer is not None and not self._writer.flush(self.flush_timeout):
            self._warn_once(
                f"{self._writer.pending} profiler trace(s) were still being written after {self.flush_timeout:.0f}s"
            )

    def _warn_once(self, message: str, key: Optional[str] = None) -> None:
        """Warn about each kind of problem once per callback (``key``, default the message itself)."""
        key = key or message
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"PerformanceMonitor: {message}", RuntimeWarning, stacklevel=2)


def _run_dir(trainer: Trainer) -> str:
    """First TensorBoardLogger's log_dir, else trainer.log_dir, else default_root_dir (same on all ranks)."""
    tb = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
    if tb is not None:
        return trainer.strategy.broadcast(tb.log_dir)
    return trainer.log_dir or trainer.default_root_dir


def _check_writable(folder: str) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".profkit-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as err:
        raise OSError(
            f"PerformanceMonitor cannot write traces to {folder!r} ({err.strerror or err}); "
            "pass `dirpath=` a writable folder"
        ) from err


def _runs_pytorch_profiler(trainer: Trainer) -> bool:
    return any(cls.__name__ == "PyTorchProfiler" for cls in trainer.profiler.__class__.__mro__)


def _epoch_length(trainer: Trainer) -> Optional[int]:
    n = trainer.num_training_batches
    return int(n) if n != float("inf") else None
