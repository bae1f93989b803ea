"""How busy the training DataLoader's workers and the training thread were between marks (the rolling checks and the
epoch ends), read from the OS, for the advice of an alert. Off the hot path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lightning_profkit.machine import scheduled_seconds_of, thread_scheduled_seconds


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
    cpu_ms_per_batch: Optional[float] = None  # their CPU (all of them) per batch the training process took

    @property
    def computing(self) -> float:
        """The share of the time they computed or wanted to: what is left is their wait on anything else."""
        return self.share + (self.queued or 0.0)

    def __str__(self) -> str:
        queued = f", waiting for a CPU {self.queued:.0%}" if self.queued is not None else ""
        made = f", {self.cpu_ms_per_batch:.1f} ms of CPU to make a batch" if self.cpu_ms_per_batch is not None else ""
        return f"{_whose(self.rank, f'{self.workers} workers')}: busy {self.share:.0%}{queued} of the last {self.seconds:.1f} s{made}"


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
    cpu_ms_per_batch: Optional[float] = None  # its own CPU in its fetches, per batch: what taking a batch costs it
    # that CPU over the wait less the thread's wait for a CPU in it: whether it took the batches (near 1) or waited
    # for them (near 0), whatever else runs on the machine (its waits for a CPU are no part of either)
    taking: Optional[float] = None

    def __str__(self) -> str:
        low, high = f"{self.low:.0%}", f"{self.high:.0%}"
        share = low if low == high else f"{low[:-1]}-{high}"
        return (f"{_whose(self.rank, 'training process')}: on or waiting for a CPU {share} of its {self.wait_s:.1f} s "
                f"data wait in {self.seconds:.1f} s")

    @property
    def taking_line(self) -> Optional[str]:
        """What taking a batch cost the training thread, where its CPU in the fetches was read."""
        if self.cpu_ms_per_batch is None or self.taking is None:
            return None
        return (f"{_whose(self.rank, 'training process')}: {self.cpu_ms_per_batch:.1f} ms of CPU in each fetch, "
                f"{self.taking:.0%} of its wait less its wait for a CPU")


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
                 thread: Callable[[], tuple[float, Optional[float]]] = thread_scheduled_seconds,
                 min_seconds: float = 1.0) -> None:
        self.read, self.thread, self.min_seconds = read, thread, min_seconds
        # now, the data wait, the thread's (CPU, queued) seconds, the workers', the batches fetched, the thread's CPU
        # in its fetches
        self.mark: Optional[tuple[float, float, tuple[float, Optional[float]], dict[int, tuple[float, Optional[float]]],
                                  int, float]] = None

    def due(self, now: float) -> bool:
        """Whether a call at ``now`` takes a new mark (none yet, or ``min_seconds`` since the last)."""
        return self.mark is None or now - self.mark[0] >= self.min_seconds

    def busy(self, pids: Sequence[int], now: float, wait_s: float, fetched: int = 0,
             fetch_cpu_s: Optional[float] = None) -> LoaderBusy:
        """How busy the workers ``pids`` and the training thread (``wait_s``: its data wait so far, in ``fetched``
        fetches, with ``fetch_cpu_s`` of its CPU in them where read) were since the mark (nothing at the first), and
        the CPU a batch cost each side: CPU time, unlike the shares of wall time, is the same on a busy machine."""
        cpu = {pid: seconds for pid in pids if (seconds := self.read(pid)) is not None}
        mine = self.thread()
        last = self.mark
        if self.due(now):
            self.mark = (now, wait_s, mine, cpu, fetched, fetch_cpu_s or 0.0)
        if last is None or now <= last[0]:
            return LoaderBusy()
        span, waited, batches = now - last[0], wait_s - last[1], fetched - last[4]
        workers = None
        if cpu:  # a new worker since the mark: all of its seconds
            before = {pid: last[3].get(pid, (0.0, 0.0)) for pid in cpu}
            wall = span * len(cpu)
            ran = sum(seconds - before[pid][0] for pid, (seconds, _) in cpu.items())
            queued = None
            if all(q is not None and before[pid][1] is not None for pid, (_, q) in cpu.items()):
                queued = max(sum(q - before[pid][1] for pid, (_, q) in cpu.items()), 0.0) / wall  # type: ignore[operator]
            made = max(ran, 0.0) * 1000 / batches if batches > 0 else None
            workers = WorkersBusy(max(ran, 0.0) / wall, len(cpu), span, queued=queued, cpu_ms_per_batch=made)
        training = None
        if waited > 0:
            training = _training(span, waited, batches, mine, last[2],
                                 None if fetch_cpu_s is None else max(fetch_cpu_s - last[5], 0.0))
        return LoaderBusy(workers, training)


def _training(span: float, waited: float, batches: int, now: tuple[float, Optional[float]],
              then: tuple[float, Optional[float]], fetch_cpu: Optional[float]) -> WaitBusy:
    """The training thread's figures over ``span`` seconds, ``waited`` of them in ``batches`` fetches: its CPU and its
    wait for a CPU then and now (the wait None where the OS does not say), its CPU in the fetches where read. Outside
    the fetches it computes: on a CPU or waiting for one (CPU time outside the wait is at most the wall time there),
    so the wait for a CPU outside is that wall time less its CPU there, and the rest of its wait for a CPU was in the
    fetches."""
    run = max(now[0] - then[0], 0.0)
    queued = None if now[1] is None or then[1] is None else max(now[1] - then[1], 0.0)
    used = run + (queued or 0.0)
    low, high = min(max(used - (span - waited), 0.0), waited), min(used, waited)
    took, taking = None, None
    if fetch_cpu is not None and batches > 0:
        took = fetch_cpu * 1000 / batches
        if queued is not None:
            queued_outside = max((span - waited) - (run - fetch_cpu), 0.0)
            not_queued = waited - min(max(queued - queued_outside, 0.0), waited - fetch_cpu)
            taking = min(fetch_cpu / not_queued, 1.0) if not_queued > 0 else None
    return WaitBusy(low / waited, high / waited, waited, span, cpu_ms_per_batch=took, taking=taking)
