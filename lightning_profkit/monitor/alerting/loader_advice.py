"""An alert's advice in a running fit, from how busy the worst rank's DataLoader workers and training thread were
(docs/alerts.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional, Sequence

from lightning_profkit.monitor.alerting.advice import LoaderFacts, data_wait_advice, tensors_in
from lightning_profkit.monitor.exchange import exchange_named, figures_of, made_from, names_of
from lightning_profkit.monitor.timing.fetch_timer import FetchStats
from lightning_profkit.monitor.timing.loader_busy import LoaderBusy, LoaderWatch, WaitBusy, WorkersBusy


class LoaderAdvice:
    """``loader()`` reads the training DataLoader's settings, ``workers()`` its workers' pids; ``report(message,
    key)`` is told when either fails. Not ``watching`` (no alerts in this fit), marks read nothing."""

    def __init__(self, report: Callable[..., None], watching: bool = True) -> None:
        self.report, self.watching = report, watching
        self.loader: Callable[[], LoaderFacts] = LoaderFacts
        self.workers: Callable[[], Sequence[int]] = tuple
        self.tensors: Optional[int] = None  # in a batch of the fit, counted once (see :meth:`see`)
        self._seen = False
        self.watch = LoaderWatch()
        self.busy = LoaderBusy()  # since the mark before the latest check, once read
        # the fit's finished epochs: their data wait, fetches and the training thread's CPU in them
        self.waited_s, self.fetched, self.fetch_cpu_s = 0.0, 0, 0.0
        self._unread: Optional[tuple[float, float, int, float]] = None  # the latest check's figures, CPU not read yet

    def epoch_done(self, stats: FetchStats) -> None:
        """An epoch's fetches are counted (the timer starts new counters)."""
        self.waited_s += stats.train_s
        self.fetched += stats.train_count
        self.fetch_cpu_s += stats.cpu_s

    def see(self, batch: Any) -> None:
        """Count the tensors of a batch, once a fit (a loader keeps its batches' shape); no batch is kept."""
        if not self.watching or self._seen or batch is None:
            return
        self._seen = True
        try:
            self.tensors = tensors_in(batch)
        except Exception:  # a user's batch object: its count is unknown, the advice goes on without it
            self.tensors = None

    def mark(self, now: float, stats: FetchStats) -> None:
        """A rolling check (or an epoch's start or end) at ``now``; the CPU is read where the watch is due, else only
        if an alert asks for advice."""
        if not self.watching:
            return
        self._unread = (now, self.waited_s + stats.train_s, self.fetched + stats.train_count,
                        self.fetch_cpu_s + stats.cpu_s)
        if self.watch.due(now):
            self._read()

    def _read(self) -> None:
        """How busy the loading was from the watch's mark to the latest check."""
        at, self._unread = self._unread, None
        if at is None:
            return
        try:
            self.busy = self.watch.busy(self.workers(), *at)
        except Exception as err:
            self.report(f"reading the DataLoader's CPU failed:\n  {err!r}", "advice")

    def advice(self, group: Any, worst_rank: Optional[int], startup_s: Optional[float], train_s: float) -> list[str]:
        """What to try, from how busy the worst rank's loading was (an exchange in ``group``: every rank calls it)."""
        self._read()
        busy = self.busy
        if group is not None:
            rank = worst_rank or 0
            mine = {**figures_of(busy.workers, "workers."), **figures_of(busy.training, "training.")}
            row = exchange_named(group, mine, names_of(WorkersBusy, "workers.") + names_of(WaitBusy, "training."))[rank]
            busy = LoaderBusy(made_from(WorkersBusy, row, "workers.", rank=rank),
                              made_from(WaitBusy, row, "training.", rank=rank))
        try:
            facts = self.loader()
            if self.tensors is not None:
                facts = replace(facts, tensors_per_batch=self.tensors)
            return data_wait_advice(facts, startup_s, train_s, busy)
        except Exception as err:
            self.report(f"advice failed:\n  {err!r}", "advice")
            return []
