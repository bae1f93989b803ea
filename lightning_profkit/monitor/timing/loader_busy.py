"""How busy the training DataLoader was, for the advice of an alert: its worker processes' CPU time over the wall
time and their time waiting for a CPU (the scheduler tells a worker that computes on a crowded node from one that
waits on storage), and the training thread's own time on or waiting for a CPU during its data wait, read from the
OS at marks (the rolling checks and the epoch ends). Off the hot path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lightning_profkit.machine import scheduled_seconds_of, thread_busy_seconds


def _whose(rank: Optional[int], what: str) -> str:
    return f"rank {rank}'s {what}" if rank is not None else what


@dataclass(frozen=True)
class WorkersBusy:
    """The workers' CPU seconds over the wall seconds, per worker (0: always waiting, 1: a CPU each the whole
    time), measured over ``seconds``; ``queued``: likewise their seconds ready to run but waiting for a CPU (None
    where the OS does not say)."""

    share: float
    workers: int
    seconds: float
    rank: Optional[int] = None  # the rank they feed, where several train
    queued: Optional[float] = None

    @property
    def computing(self) -> float:
        """The share of the time they computed or wanted to: what is left is their wait on anything else."""
        return self.share + (self.queued or 0.0)

    def __str__(self) -> str:
        queued = f", waiting for a CPU {self.queued:.0%}" if self.queued is not None else ""
        return f"{_whose(self.rank, f'{self.workers} workers')}: busy {self.share:.0%}{queued} of the last {self.seconds:.1f} s"


@dataclass(frozen=True)
class WaitBusy:
    """How much of the training thread's data wait (``wait_s`` of the last ``seconds``) it was on a CPU itself or
    ready to run and waiting for one, as shares of the wait: at least that time less the time it did not wait
    (``low``), at most that time (``high``). Where it is high, the batches are made or unpacked in the training
    process; where it is low, the thread waited for workers or storage."""

    low: float
    high: float
    wait_s: float
    seconds: float
    rank: Optional[int] = None
    ready: Optional[float] = None  # the share of the wait in fetches that began with a batch made and waiting

    def __str__(self) -> str:
        low, high = f"{self.low:.0%}", f"{self.high:.0%}"
        share = low if low == high else f"{low[:-1]}-{high}"
        return (f"{_whose(self.rank, 'training process')}: on or waiting for a CPU {share} of its {self.wait_s:.1f} s "
                f"data wait in {self.seconds:.1f} s")

    @property
    def ready_line(self) -> Optional[str]:
        """How much of the wait had a batch made and waiting, where that is known."""
        if self.ready is None:
            return None
        return f"{_whose(self.rank, 'training process')}: a batch the workers made waited through {self.ready:.0%} of its data wait"


@dataclass(frozen=True)
class LoaderBusy:
    """What the loading did since the previous mark; a part is None where it could not be measured."""

    workers: Optional[WorkersBusy] = None
    training: Optional[WaitBusy] = None


class LoaderWatch:
    """Marks the workers' CPU (``read(pid)``: seconds on a CPU and waiting for one so far, the second None where the OS
    does not say; None when nothing can be read), the training thread's (``thread_busy()``, called on that thread:
    its seconds on or waiting for a CPU) and its data wait so far at each call, keeping the previous mark until
    ``min_seconds`` have passed: the OS counts a process's CPU in ticks of 10 ms, so a shorter span would be too
    coarse."""

    def __init__(self, read: Callable[[int], Optional[tuple[float, Optional[float]]]] = scheduled_seconds_of,
                 thread_busy: Callable[[], float] = thread_busy_seconds, min_seconds: float = 1.0) -> None:
        self.read, self.thread_busy, self.min_seconds = read, thread_busy, min_seconds
        # now, the data wait, the thread's CPU, the workers' (CPU, queued) seconds, the wait with a batch ready
        self.mark: Optional[tuple[float, float, float, dict[int, tuple[float, Optional[float]]], float]] = None

    def due(self, now: float) -> bool:
        """Whether a call at ``now`` takes a new mark (none yet, or ``min_seconds`` since the last)."""
        return self.mark is None or now - self.mark[0] >= self.min_seconds

    def busy(self, pids: Sequence[int], now: float, wait_s: float, ready_s: float = 0.0,
             asked: bool = False) -> LoaderBusy:
        """How busy the workers ``pids`` and the training thread (``wait_s``: its data wait so far, ``ready_s`` the
        part of it that began with a batch ready, known where every fetch since the last call was ``asked``) were
        since the mark (nothing at the first)."""
        cpu = {pid: seconds for pid in pids if (seconds := self.read(pid)) is not None}
        mine = self.thread_busy()
        last = self.mark
        if self.due(now):
            self.mark = (now, wait_s, mine, cpu, ready_s)
        if last is None or now <= last[0]:
            return LoaderBusy()
        span, waited = now - last[0], wait_s - last[1]
        workers = None
        if cpu:  # a new worker since the mark: all of its seconds
            before = {pid: last[3].get(pid, (0.0, 0.0)) for pid in cpu}
            wall = span * len(cpu)
            ran = sum(seconds - before[pid][0] for pid, (seconds, _) in cpu.items())
            queued = None
            if all(q is not None and before[pid][1] is not None for pid, (_, q) in cpu.items()):
                queued = max(sum(q - before[pid][1] for pid, (_, q) in cpu.items()), 0.0) / wall  # type: ignore[operator]
            workers = WorkersBusy(max(ran, 0.0) / wall, len(cpu), span, queued=queued)
        training = None
        if waited > 0:  # CPU time outside the wait is at most the wall time outside it
            used = max(mine - last[2], 0.0)
            low, high = min(max(used - (span - waited), 0.0), waited), min(used, waited)
            ready = min(max(ready_s - last[4], 0.0) / waited, 1.0) if asked else None
            training = WaitBusy(low / waited, high / waited, waited, span, ready=ready)
        return LoaderBusy(workers, training)
