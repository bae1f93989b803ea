"""The share of an epoch's time before its first window, and after it, that the training thread waited for a CPU
while ready to run: what a machine busy with other work adds to the steps, which ``after_window_ratio`` leaves
out (:func:`~lightning_profkit.monitor.timing.own_cost.own_cost`)."""

from __future__ import annotations

from typing import Optional

from lightning_profkit import machine


class CpuWaitShares:
    """Marks taken on the training thread at the epoch's start, its first window's start and that window's end
    (later windows are not marked); :meth:`shares` adds the epoch's end."""

    __slots__ = ("_marks",)

    def __init__(self) -> None:
        self._marks: list[tuple[float, Optional[float]]] = []  # (clock seconds, seconds waited so far)

    def epoch_start(self, now: float) -> None:
        self._marks = []
        self.mark(now)

    def mark(self, now: float) -> None:
        """A window of the epoch starts or ends at ``now``: only the first window's two are kept."""
        if len(self._marks) < 3:
            self._marks.append((now, machine.waited_seconds()))

    def shares(self, end: float) -> tuple[Optional[float], Optional[float]]:
        """The shares before the first window and after it (None: not measured, or no time there)."""
        marks = [*self._marks, (end, machine.waited_seconds())]
        return _share(marks, 0), _share(marks, 2)


def _share(marks: list[tuple[float, Optional[float]]], i: int) -> Optional[float]:
    if i + 1 >= len(marks):
        return None
    (t0, w0), (t1, w1) = marks[i], marks[i + 1]
    if w0 is None or w1 is None or t1 <= t0:
        return None
    return min(max((w1 - w0) / (t1 - t0), 0.0), 1.0)
