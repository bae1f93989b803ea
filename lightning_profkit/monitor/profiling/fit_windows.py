"""The profiler windows of one fit on one rank: training and validation windows, the next step with window work, and
the captures asked for after an alert or from outside."""

from __future__ import annotations

from typing import Callable, Optional

from lightning_profkit.monitor.alerting.checks import RollingChecks
from lightning_profkit.monitor.profiling.selection import capture_steps
from lightning_profkit.monitor.profiling.windows import ValidationWindows, WindowRunner

INF = float("inf")


class FitWindows:
    """``runner`` records the training windows and ``validation`` the validation runs' (None: none); ``due``: the next
    step at whose end :meth:`step_end` has work; ``last_step``: the fit's last step, where the Trainer knows it."""

    def __init__(self, runner: Optional[WindowRunner], validation: Optional[ValidationWindows],
                 report: Callable[..., None]) -> None:
        self.runner, self.validation, self.report = runner, validation, report
        self.due = INF
        self.last_step: Optional[int] = None

    @property
    def recording(self) -> bool:
        """Whether a training window's session is open."""
        return self.runner is not None and self.runner.session is not None

    def epoch_start(self, step: int, batch_idx: int, epoch_length: Optional[int]) -> None:
        """The epoch begins at ``step`` (its batch ``batch_idx``)."""
        if self.validation is not None:
            self.validation.spent = []  # this epoch's validation windows
        if self.runner is not None:
            self.runner.epoch_start(step, batch_idx, epoch_length)
            self.due = self.runner.next_step_end(step, batch_idx)

    def step_end(self, step: int, batch_idx: int, last_in_epoch: bool, stopping: Callable[[], bool] = bool) -> None:
        """The end of a step at or past :attr:`due` (``stopping()``: training ends after it)."""
        if self.runner is not None:  # where it raises, the caller stops the windows
            self.runner.step_end(step, batch_idx, last_in_epoch, stopping)
            self.due = self.runner.next_step_end(step + 1, batch_idx + 1)

    def validation_start(self, in_epoch: bool) -> None:
        """A validation run begins (``in_epoch``: between two training steps, whose window it ends)."""
        if in_epoch and self.runner is not None:
            self.runner.pause()
        if self.validation is not None:
            self.validation.run_start()

    def validation_end(self, step: int, batch_idx: int) -> None:
        """The validation run ended; training goes on at ``step`` (batch ``batch_idx``), in the window it ended."""
        if self.validation is not None:
            self.validation.stop()
        if self.runner is not None and self.runner.resume(step, batch_idx):
            self.due = self.runner.next_step_end(step, batch_idx)

    def epoch_end(self) -> tuple[list[tuple[int, int]], list[float]]:
        """End the epoch's window: the epoch's profiled steps (first and last of each window) and the seconds each
        window spent in its session's calls."""
        runner, validation = self.runner, self.validation
        if runner is not None:
            runner.stop()
        spent = (runner.spent if runner else []) + (validation.spent if validation else [])
        return (runner.profiled if runner else []), spent

    def capture(self, step: int, steps: int, budget: RollingChecks) -> Optional[tuple[int, int]]:
        """Record ``steps`` steps after ``step``, spending one of the fit's captures (``budget``); the steps, or None
        where this rank records none, the budget is spent or the fit ends at ``step``."""
        if self.runner is None:
            return None
        window = capture_steps(step, steps, self.runner.selection.warmup, self.last_step)
        if window is None:
            return None
        if not budget.spend_capture():
            self.report(f"no more captures: `max_captures={budget.max_captures}` windows were recorded", "budget")
            return None
        self.runner.capture(*window, step + 1)
        self.due = min(self.due, step)  # the runner opens it at this step's end
        return window

    def stop(self) -> None:
        """End the training and validation windows' sessions, keeping what they recorded; none opens again."""
        for name in ("runner", "validation"):
            windows = getattr(self, name)
            setattr(self, name, None)
            if windows is not None:
                try:
                    windows.stop()
                except Exception as err:  # the windows have let go of the session already
                    self.report(f"stopping the profiler failed:\n  {err!r}")
        self.due = INF
