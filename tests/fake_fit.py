"""A fit without a Trainer: :class:`FakeFit` drives a real :class:`~lightning_profkit.monitor.fit.FitRun` and its
real fetch timer in the order Lightning's loops call them (fetch, the step, ``on_train_batch_end`` when the timer
woke us, then the next fetch), with a fake clock that moves only by the seconds a test gives each fetch, step and
validation run. So every time-based figure (data-wait ratios, step times, own cost, the rolling checks, the
capture-request polls) is known exactly in advance, whatever the machine is doing."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any, Optional, Sequence

from lightning_profkit import PerformanceMonitor, machine
from lightning_profkit.monitor.alerting.advice import LoaderFacts
from lightning_profkit.monitor.fit import FitRun, Outcome
from lightning_profkit.monitor.profiling import windows
from lightning_profkit.monitor.timing import fetch_timer
from lightning_profkit.notices import Notices


class Clock:
    """Seconds that pass only when told."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class _TrainingEpochLoop:
    """The attributes of Lightning's training epoch loop that the fetch timer reads; named as Lightning's class,
    so that the timer treats it as it treats Lightning's own (its fetch pair not overridden)."""

    def __init__(self) -> None:
        self.batch_progress = SimpleNamespace(total=SimpleNamespace(completed=0))
        self.val_loop = _EvaluationLoop()

    def _on_before_fetch(self) -> None:
        pass

    def _on_after_fetch(self) -> None:
        pass


class _EvaluationLoop(_TrainingEpochLoop):
    def __init__(self) -> None:
        pass


class PassThroughProfiler:
    """Lightning's default profiler, by name: the timer calls nothing of it."""


class FakeFit:
    """One rank's fit of ``PerformanceMonitor(**arguments)``. ``monkeypatch`` points the fetch timer's and the
    profiler windows' clocks at :attr:`clock`. ``outcomes`` collects what every call returned; ``warnings`` what
    the callback said; :attr:`cpu_wait` what the training thread has waited for a CPU by a time of the clock."""

    def __init__(self, monkeypatch: Any, trace_dir: str, loader: LoaderFacts = LoaderFacts(), batch_size: int = 2,
                 **arguments: Any) -> None:
        self.clock = Clock()
        monkeypatch.setattr(fetch_timer, "perf_counter", self.clock)
        monkeypatch.setattr(windows, "perf_counter", self.clock)
        self.cpu_wait = lambda now: 0.0  # seconds the training thread had waited for a CPU by ``now``
        monkeypatch.setattr(machine, "thread_scheduled_seconds", lambda: (0.0, self.cpu_wait(self.clock())))
        self.options = PerformanceMonitor(**arguments).options
        self.checks = self.options.checks()
        self.loop = _TrainingEpochLoop()
        self.trainer = SimpleNamespace(fit_loop=SimpleNamespace(epoch_loop=self.loop), profiler=PassThroughProfiler())
        self.traces: list[str] = []
        self.alerts: list[Any] = []
        self.outcomes: list[Outcome] = []
        self.woken_at: list[int] = []  # the steps whose end we were called at
        self.fetch_starts: list[float] = []  # the clock as each step's fetch began, and at each epoch's end
        self.step = 0
        self._woken = False
        self.warnings: list[str] = []
        self._catch = warnings.catch_warnings(record=True)
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")
        self.run = FitRun(self.options, self.checks, self.traces, self.alerts, trace_dir, Notices(), wake=self._wake,
                          clock=self.clock)
        self.run.arm(fetch_timer.FetchTimer(self.trainer).install(), False, batch_size, lambda: loader, tuple)

    def _wake(self) -> None:
        self._woken = True

    def epoch(self, epoch: int, steps: Sequence[tuple[float, float]], startup: float = 0.0,
              validation: Optional[dict[int, float]] = None, validation_batches: int = 1) -> Outcome:
        """One epoch of ``steps`` ``(fetch seconds, step seconds)``, ``startup`` seconds before the first fetch,
        and validation runs of ``validation[batch_idx]`` seconds after those batches (``validation_batches``
        batches, sharing those seconds); returns the epoch end's outcome."""
        self.run.epoch_start(epoch, self.step, 0, len(steps))
        self.clock.advance(startup)
        for batch_idx, (wait, work) in enumerate(steps):
            self._woken = False
            self.fetch_starts.append(self.clock())
            self.loop._on_before_fetch()  # the timer's
            self.clock.advance(wait)
            self.loop._on_after_fetch()
            self.clock.advance(work)
            if self._woken:
                self.woken_at.append(self.step)
                last = batch_idx == len(steps) - 1
                self.outcomes.append(self.run.step_end(self.step, batch_idx, last, bool, self.step))
            self.loop.batch_progress.total.completed += 1
            if validation and batch_idx in validation:
                self.run.validation_start(self.step, self.step)
                for val_batch in range(validation_batches):  # the batch hooks run where there are validation windows
                    if self.run.validation_windows is not None:
                        self.run.validation_windows.batch_start(val_batch)
                    self.clock.advance(validation[batch_idx] / validation_batches)
                    if self.run.validation_windows is not None:
                        self.run.validation_windows.batch_end()
                self.run.validation_end(self.step + 1, batch_idx + 1)
            self.step += 1
        self.fetch_starts.append(self.clock())
        out = self.run.epoch_end(self.step - 1, self.loop.batch_progress.total.completed, self.step)
        self.outcomes.append(out)
        return out

    def end(self) -> Outcome:
        out = self.run.end()
        self.outcomes.append(out)
        self.run.close()
        self._catch.__exit__(None, None, None)
        self.warnings = [str(w.message) for w in self._caught]
        return out

    def logged(self, prefix: str = "profkit/") -> list[tuple[int, dict[str, float]]]:
        """Every metric logged so far under ``prefix``, with its step."""
        return [(step, {k: v for k, v in m.items() if k.startswith(prefix)}) for out in self.outcomes
                for step, m in out.metrics if any(k.startswith(prefix) for k in m)]
