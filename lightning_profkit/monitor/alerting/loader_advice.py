"""An alert's advice in a running fit: how busy the DataLoader's workers and the training thread were between
rolling checks (read at most once a second, and at an alert), the worst rank's figures taken from every rank, and
what to try from them."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from lightning_profkit.monitor.alerting.advice import LoaderFacts, data_wait_advice
from lightning_profkit.monitor.exchange import exchange_named, figures_of, made_from, names_of
from lightning_profkit.monitor.timing.fetch_timer import FetchStats
from lightning_profkit.monitor.timing.loader_busy import LoaderBusy, LoaderWatch, WaitBusy, WorkersBusy


UNMADE = object()


class LoaderAdvice:
    """``loader()`` reads the training DataLoader's settings; ``workers()`` the pids of its worker processes now;
    ``report(message, key)`` is told when either fails (training goes on, with less advice). Not ``watching`` (no
    alerts in this fit), marks read nothing."""

    def __init__(self, report: Callable[..., None], watching: bool = True) -> None:
        self.report, self.watching = report, watching
        self.loader: Callable[[], LoaderFacts] = LoaderFacts
        self.workers: Callable[[], Sequence[int]] = tuple
        self.ready: Callable[[], Optional[Callable[[], bool]]] = lambda: None  # see internals.batch_ready
        self.watch = LoaderWatch()
        self.busy = LoaderBusy()  # since the mark before the latest check, once read
        self.waited_s = self.ready_s = 0.0  # the data wait of the fit's finished epochs, and its part with a batch ready
        self._unread: Optional[tuple[float, float, float, bool]] = None  # the latest check's figures, CPU not read yet
        self._probe: Any = UNMADE  # this epoch's batch-ready probe (None: its loader has none), once made

    def epoch_done(self, stats: FetchStats) -> None:
        """An epoch's fetches are counted (the timer starts new counters)."""
        self.waited_s += stats.train_s
        self.ready_s += stats.ready_s

    def mark(self, now: float, stats: FetchStats, asked: bool = False,
             epoch_start: bool = False) -> Optional[Callable[[], bool]]:
        """A rolling check (or an epoch's start or end, ``epoch_start``) at ``now``, on the epoch's fetches so far
        (``asked`` at each whether a batch was ready). The CPU is read now where the watch takes a new mark (at most
        once in its ``min_seconds``), else only if an alert asks for advice. Returns what each fetch asks from now on:
        from a rolling check on, whether a batch is ready (at an epoch's start or end the loader's next iterator is
        not made yet)."""
        if not self.watching:
            return None
        self._unread = (now, self.waited_s + stats.train_s, self.ready_s + stats.ready_s, asked)
        if self.watch.due(now):
            self._read()
        if epoch_start:
            self._probe = UNMADE
            return None
        if self._probe is UNMADE:
            try:
                self._probe = self.ready()
            except Exception as err:
                self._probe = None
                self.report(f"reading the DataLoader's CPU failed:\n  {err!r}", "advice")
        return self._probe

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
            return data_wait_advice(self.loader(), startup_s, train_s, busy)
        except Exception as err:
            self.report(f"advice failed:\n  {err!r}", "advice")
            return []
