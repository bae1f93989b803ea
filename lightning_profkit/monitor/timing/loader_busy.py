"""How busy the training DataLoader was, for the advice of an alert: its worker processes' CPU time over the wall
time, and the training thread's own CPU during its data wait, read from the OS at marks (the rolling checks and
the epoch ends). Off the hot path."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lightning_profkit.machine import cpu_seconds_of


def _whose(rank: Optional[int], what: str) -> str:
    return f"rank {rank}'s {what}" if rank is not None else f"the {what}"


@dataclass(frozen=True)
class WorkersBusy:
    """The workers' CPU seconds over the wall seconds, per worker (0: always waiting, 1: a CPU each the whole
    time), measured over ``seconds``."""

    share: float
    workers: int
    seconds: float
    rank: Optional[int] = None  # the rank they feed, where several train

    def __str__(self) -> str:
        return (f"{_whose(self.rank, f'{self.workers} DataLoader workers')} were busy {self.share:.0%} of the last "
                f"{self.seconds:.1f} s (their CPU time over the wall time, measured)")


@dataclass(frozen=True)
class WaitBusy:
    """How much of the training thread's data wait (``wait_s`` of the last ``seconds``) it was on the CPU itself,
    as shares of the wait: at least its CPU time less the time it did not wait (``low``), at most its CPU time
    (``high``). Where it is high, the batches are made or unpacked in the training process; where it is low, the
    thread waited for workers or storage."""

    low: float
    high: float
    wait_s: float
    seconds: float
    rank: Optional[int] = None

    def __str__(self) -> str:
        low, high = f"{self.low:.0%}", f"{self.high:.0%}"
        share = low if low == high else f"{low[:-1]}-{high}"
        return (f"{_whose(self.rank, 'training process')} was on the CPU for {share} of its {self.wait_s:.1f} s of "
                f"data wait in the last {self.seconds:.1f} s (its thread's CPU time against the time it waited, "
                "measured)")


@dataclass(frozen=True)
class LoaderBusy:
    """What the loading did since the previous mark; a part is None where it could not be measured."""

    workers: Optional[WorkersBusy] = None
    training: Optional[WaitBusy] = None

    def as_values(self) -> list[float]:
        """Seven numbers for the exchange across ranks (NaN for what is None)."""
        w, t = self.workers, self.training
        return ([w.share, float(w.workers), w.seconds] if w else [math.nan] * 3) + \
               ([t.low, t.high, t.wait_s, t.seconds] if t else [math.nan] * 4)

    @staticmethod
    def from_values(values: Sequence[float], rank: Optional[int] = None) -> "LoaderBusy":
        workers = WorkersBusy(values[0], int(values[1]), values[2], rank) if not math.isnan(values[0]) else None
        training = WaitBusy(*values[3:7], rank) if not math.isnan(values[3]) else None
        return LoaderBusy(workers, training)


class LoaderWatch:
    """Marks the workers' CPU (``read(pid)``: seconds so far, None when it cannot be read), the training thread's
    (``thread_cpu()``, called on that thread) and its data wait so far at each call, keeping the previous mark until
    ``min_seconds`` have passed: the OS counts a process's CPU in ticks of 10 ms, so a shorter span would be too
    coarse."""

    def __init__(self, read: Callable[[int], Optional[float]] = cpu_seconds_of,
                 thread_cpu: Callable[[], float] = time.thread_time, min_seconds: float = 1.0) -> None:
        self.read, self.thread_cpu, self.min_seconds = read, thread_cpu, min_seconds
        self.mark: Optional[tuple[float, float, float, dict[int, float]]] = None  # now, wait, thread CPU, workers

    def busy(self, pids: Sequence[int], now: float, wait_s: float) -> LoaderBusy:
        """How busy the workers ``pids`` and the training thread (``wait_s``: its data wait so far) were since the
        mark (nothing at the first)."""
        cpu = {pid: seconds for pid in pids if (seconds := self.read(pid)) is not None}
        mine = self.thread_cpu()
        last = self.mark
        if last is None or now - last[0] >= self.min_seconds:
            self.mark = (now, wait_s, mine, cpu)
        if last is None or now <= last[0]:
            return LoaderBusy()
        span, waited = now - last[0], wait_s - last[1]
        workers = None
        if cpu:
            used = sum(seconds - last[3].get(pid, 0.0) for pid, seconds in cpu.items())  # a new worker: all its CPU
            workers = WorkersBusy(max(used, 0.0) / (span * len(cpu)), len(cpu), span)
        training = None
        if waited > 0:  # CPU time outside the wait is at most the wall time outside it
            used = max(mine - last[2], 0.0)
            low, high = min(max(used - (span - waited), 0.0), waited), min(used, waited)
            training = WaitBusy(low / waited, high / waited, waited, span)
        return LoaderBusy(workers, training)
