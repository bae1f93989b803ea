"""How busy the training DataLoader's worker processes were: their CPU time over the wall time, read from the OS
at marks (the rolling checks and the epoch ends), for the advice of an alert. Off the hot path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lightning_profkit.machine import cpu_seconds_of


@dataclass(frozen=True)
class WorkersBusy:
    """The workers' CPU seconds over the wall seconds, per worker (0: always waiting, 1: a CPU each the whole
    time), measured over ``seconds``."""

    share: float
    workers: int
    seconds: float

    def __str__(self) -> str:
        return (f"the {self.workers} DataLoader workers were busy {self.share:.0%} of the last {self.seconds:.1f} s "
                "(their CPU time over the wall time, measured)")


class WorkerWatch:
    """Marks the workers' CPU (``read(pid)``: seconds so far, None when it cannot be read) at each call, keeping
    the previous mark until ``min_seconds`` have passed: the OS counts CPU in ticks of 10 ms, so a shorter span
    would be too coarse."""

    def __init__(self, read: Callable[[int], Optional[float]] = cpu_seconds_of, min_seconds: float = 1.0) -> None:
        self.read, self.min_seconds = read, min_seconds
        self.mark: Optional[tuple[float, dict[int, float]]] = None

    def busy(self, pids: Sequence[int], now: float) -> Optional[WorkersBusy]:
        """How busy the workers ``pids`` were since the mark (None at the first, or with none readable)."""
        cpu = {pid: seconds for pid in pids if (seconds := self.read(pid)) is not None}
        last = self.mark
        if last is None or now - last[0] >= self.min_seconds:
            self.mark = (now, cpu)
        if last is None or not cpu or now <= last[0]:
            return None
        used = sum(seconds - last[1].get(pid, 0.0) for pid, seconds in cpu.items())  # a new worker: all of its CPU
        return WorkersBusy(max(used, 0.0) / ((now - last[0]) * len(cpu)), len(cpu), now - last[0])
