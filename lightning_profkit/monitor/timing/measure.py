"""What a fit measures of each epoch beside its fetches: the validation runs inside it, the GPU's idle time (NVML),
peak memory, the loader's start-up before training, the training thread's wait for a CPU, and what profiling cost (the
Metrics page's ``overhead/`` rows, docs/metrics.md). Design notes: docs/how-it-works.md."""

from __future__ import annotations

import statistics
from typing import Any, Callable, Optional, Sequence

import torch

from lightning_profkit import machine
from lightning_profkit.monitor.timing.epoch_figures import epoch_figures
from lightning_profkit.monitor.timing.fetch_timer import FetchStats, LoaderSetupTimer
from lightning_profkit.monitor.timing.gpu_sampler import UtilizationSampler, nvml_reader

# after_window_ratio above this in two epochs running: warn. On CUDA 1.1, not 1.05: the baseline holds few steps
# (5 with the default window); the CUPTI slowdown it is for is 10-20% (pytorch/pytorch#144455). On CPU 1.5:
# nothing known there outlives a profiler session, and clean runs on a loaded 2-core machine read 0.6-1.5, so only
# a slowdown far above that is news
SLOW_AFTER = {"cuda": 1.1, "cpu": 1.5}
# On CPU, an epoch whose training thread waited for a CPU over this share of its time after the window is not
# counted: there the machine's load moves the figure past the limit (1.6-3.0 seen, the window finished by either
# path, the thread waiting for a CPU most of its time)
BUSY_AFTER = 0.25
SLOW_EPOCHS = 2
SKIP = 5  # an epoch's first steps (worker start-up, allocator growth) are no baseline


class EpochMeasure:
    """One fit's measurements on one rank. ``report(message, key)`` warns once per kind of problem; ``fit_loop``
    (Lightning's): its ``setup_data``, where epoch 0's loader starts before training, is timed until :meth:`arm`."""

    def __init__(self, report: Callable[..., None], fit_loop: Any = None) -> None:
        self.report = report
        self.setup_timer = LoaderSetupTimer(fit_loop).install(report) if fit_loop is not None else None
        self.startup_before_s = 0.0  # its seconds, added to the first epoch's start-up
        self.sampler: Optional[UtilizationSampler] = None
        self.on_cuda = False
        self.batch_size: Optional[int] = None
        # the epoch's start and validation runs in perf_counter seconds and, where GPU utilization is sampled, in
        # NVML's clock (marks: see gpu_sampler)
        self.start = 0.0
        self.gpu_start: Optional[float] = None
        self.validation: list[tuple[float, float]] = []
        self.gpu_validation: list[tuple[float, float]] = []
        self._open: Optional[tuple[float, Optional[float]]] = None  # a validation run's start
        self.step_baseline: Optional[float] = None  # seconds: unprofiled steps before the fit's first window
        self.cpu_waits = CpuWaitShares()  # the training thread's wait for a CPU before and after the first window
        self.slow_epochs = 0  # epochs running with unprofiled steps slower after a window
        self.busy_after: Optional[float] = None  # the last epoch's share after its window spent waiting for a CPU
        self.helper_cpu_s = 0.0  # CPU s of the fit's trace writing off the training thread, to the last epoch's end

    def arm(self, on_cuda: bool, batch_size: Optional[int]) -> None:
        self.on_cuda, self.batch_size = on_cuda, batch_size
        timer, self.setup_timer = self.setup_timer, None
        if timer is not None:  # the first arm of the fit
            self.startup_before_s = timer.seconds
            timer.uninstall()

    def start_sampler(self, cuda_uuid: Optional[str]) -> Optional[str]:
        """Sample the utilization of the GPU ``cuda_uuid`` (None: the model is not on CUDA) through NVML; returns
        why GPU figures will be absent, when they will."""
        if cuda_uuid is None:
            return "the model is not on a CUDA device; GPU idle and memory are not logged"
        if self.sampler is None:
            read, why = nvml_reader(cuda_uuid)
            if read is None:
                return why
            self.sampler = UtilizationSampler(read).start()
        return None

    def close(self) -> None:
        if self.setup_timer is not None:  # never armed
            self.setup_timer.uninstall()
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None

    def epoch_start(self, now: float) -> None:
        self.start, self.gpu_start = now, self.sampler.clear() if self.sampler is not None else None
        self.validation, self.gpu_validation, self._open = [], [], None
        if self.on_cuda:
            torch.cuda.reset_peak_memory_stats()
        self.cpu_waits.epoch_start(now)

    def validation_start(self, now: float) -> None:
        self._open = (now, self._gpu_mark())

    def validation_end(self, now: float) -> float:
        """The seconds of the validation run that ended ``now``, inside the epoch (0 where none was open)."""
        if self._open is None:
            return 0.0
        (start, gpu_start), self._open = self._open, None
        self.validation.append((start, now))
        gpu_end = self._gpu_mark()
        if gpu_start is not None and gpu_end is not None:
            self.gpu_validation.append((gpu_start, gpu_end))
        return now - start

    def figures(self, stats: FetchStats, end: float, first_step: int, profiled: list[int], spent: list[float],
                helper_total: Optional[float]) -> dict[str, float]:
        """This rank's figures of the epoch ending at ``end`` (from step ``first_step``; ``profiled``: its steps in
        windows, ``spent``: seconds the windows' sessions took on the training thread, ``helper_total``: CPU seconds
        of trace writing off it so far), measured and what profiling cost, by name."""
        try:
            peak = torch.cuda.max_memory_allocated() if self.on_cuda else None
            validation_s = sum(b - a for a, b in self.validation)
            figures = epoch_figures(stats, self.start, end, validation_s, self.batch_size, peak, self._gpu_idle(),
                                    self.startup_before_s)
            self.startup_before_s = 0.0
            helper = None
            if helper_total is not None:  # never below the last: a finalizing process that ends is counted after it ends
                helper = max(helper_total - self.helper_cpu_s, 0.0)
                self.helper_cpu_s = max(helper_total, self.helper_cpu_s)
            waits = self.cpu_waits.shares(end)
            self.busy_after = waits[1]
            cost, baseline = own_cost(stats.step_times, first_step, profiled, self.step_baseline, spent, helper, waits)
            self.step_baseline = self.step_baseline or baseline
            return {**figures, **cost}
        except Exception as err:
            self.report(f"epoch metrics failed:\n  {err!r}", "metrics")
            return {}

    def after_window(self, ratio: Optional[float]) -> Optional[str]:
        """The notice to give once unprofiled steps stay slower after the windows than before them, epochs running
        (``ratio``: the epoch's ``after_window_ratio``); None until then. On CPU an epoch busy with other work after
        its window (``BUSY_AFTER``) is not counted."""
        if not self.on_cuda and self.busy_after is not None and self.busy_after > BUSY_AFTER:
            ratio = None
        if ratio is not None:  # an epoch without the figure leaves the count as it is
            self.slow_epochs = self.slow_epochs + 1 if ratio > SLOW_AFTER["cuda" if self.on_cuda else "cpu"] else 0
        if self.slow_epochs < SLOW_EPOCHS or ratio is None:
            return None
        if self.on_cuda:
            cause = ["likely CUPTI left attached: set TEARDOWN_CUPTI=1 before the first window, or record fewer windows"]
        else:
            cause = ["waiting for a CPU is left out of the figure; nothing of torch.profiler is known to outlive a window",
                     "compare step_time_ms_mean with a fit with profile=False"]
        return "\n  - ".join([f"unprofiled steps are {ratio:.2f}x slower after the windows, {self.slow_epochs} epochs "
                                "running", *cause, "logged as profkit/overhead/after_window_ratio"])

    def _gpu_mark(self) -> Optional[float]:
        return self.sampler.mark() if self.sampler is not None else None

    def _gpu_idle(self) -> Optional[float]:
        """NVML idle ratio of this epoch's training time, between marks in NVML's own clock."""
        if self.sampler is None or self.gpu_start is None:
            return None
        ratio = self.sampler.idle_ratio(self.gpu_start, self.sampler.mark(), self.gpu_validation)
        if self.sampler.error is not None:
            self.report(f"NVML sampling stopped:\n  {self.sampler.error!r}", "nvml")
        return ratio


def own_cost(step_times: Sequence[float], first_step: int, profiled: Sequence[tuple[int, int]],
             baseline: Optional[float] = None, spent: Sequence[float] = (),
             helper_cpu_s: Optional[float] = None, cpu_waits: tuple[Optional[float], Optional[float]] = (None, None),
             ) -> tuple[dict[str, float], Optional[float]]:
    """``overhead/...`` figures of an epoch whose step ``first_step + i`` took ``step_times[i]`` seconds and
    whose windows held the steps of ``profiled`` (inclusive ranges) and spent ``spent`` seconds each in their
    own calls, against ``baseline`` (seconds; default: this epoch's steps before its first window); and this
    epoch's own baseline. Absent without a window; ``helper_cpu_s`` where the epoch used some (None or 0: none).
    ``cpu_waits``: the share of the time before the epoch's first window and after it that the training thread
    waited for a CPU (None: not known), taken out of the steps' times on each side."""
    out: dict[str, float] = {}
    if helper_cpu_s:
        out["overhead/helper_cpu_s"] = helper_cpu_s
    if spent:
        out["overhead/window_ms"] = 1000 * sum(spent) / len(spent)
    if not profiled or not step_times:
        return out, None
    last = first_step + len(step_times) - 1
    inside = {step - first_step for a, b in profiled for step in range(max(a, first_step), min(b, last) + 1)}
    on = [t for i, t in enumerate(step_times) if i in inside]
    off = [t for i, t in enumerate(step_times) if i not in inside]
    if on and off:
        out["overhead/profiled_step_ratio"] = (sum(on) / len(on)) / (sum(off) / len(off))
    start, end = profiled[0][0] - first_step, profiled[0][1] - first_step
    before = [t for i, t in enumerate(step_times[:max(start, 0)]) if i >= SKIP]
    own = statistics.median(before) * (1 - (cpu_waits[0] or 0.0)) if before else None
    after = [t for i, t in enumerate(step_times) if i > end and i not in inside]
    reference = baseline if baseline is not None else own
    if after and reference:
        out["overhead/after_window_ratio"] = statistics.median(after) * (1 - (cpu_waits[1] or 0.0)) / reference
    return out, own


class CpuWaitShares:
    """The share of the epoch's time before its first window, and after it, that the training thread waited for a CPU
    while ready to run (what a busy machine adds to the steps; ``after_window_ratio`` leaves it out). Marks taken on the
    training thread at the epoch's start, its first window's start and that window's end; :meth:`shares` adds the
    epoch's end."""

    __slots__ = ("_marks",)

    def __init__(self) -> None:
        self._marks: list[tuple[float, Optional[float]]] = []  # (clock seconds, seconds waited so far)

    def epoch_start(self, now: float) -> None:
        self._marks = []
        self.mark(now)

    def mark(self, now: float) -> None:
        """A window of the epoch starts or ends at ``now``: only the first window's two are kept."""
        if len(self._marks) < 3:
            self._marks.append((now, machine.thread_scheduled_seconds()[1]))

    def shares(self, end: float) -> tuple[Optional[float], Optional[float]]:
        """The shares before the first window and after it (None: not measured, or no time there)."""
        marks = [*self._marks, (end, machine.thread_scheduled_seconds()[1])]
        return _share(marks, 0), _share(marks, 2)


def _share(marks: list[tuple[float, Optional[float]]], i: int) -> Optional[float]:
    if i + 1 >= len(marks):
        return None
    (t0, w0), (t1, w1) = marks[i], marks[i + 1]
    if w0 is None or w1 is None or t1 <= t0:
        return None
    return min(max((w1 - w0) / (t1 - t0), 0.0), 1.0)
