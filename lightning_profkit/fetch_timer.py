"""Exact DataLoader wait, timed where Lightning itself times each fetch.

Lightning wraps every fetch of a batch in ``trainer.profiler.start/stop("[...].train_dataloader_next")``
(validation: ``val_next``) and reads ``trainer.profiler`` anew at each fetch. :class:`FetchTimer` stands
in for the trainer's profiler, adds up fetch time, and forwards everything else to the user's profiler,
whose behaviour and report stay unchanged. Hooks go through ``profile()``, which is the user's own bound
method: the per-hook cost is nil; only ``start``/``stop`` (fetches, manual optimizer steps) pass through
here, with one suffix test each (about 2 µs a fetch).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, Optional


class FetchStats:
    """Fetch counters of the current epoch (seconds from ``time.perf_counter``)."""

    __slots__ = ("train_s", "train_count", "val_s", "val_count", "fetch_started", "first_fetch", "t0")

    def __init__(self) -> None:
        self.train_s = 0.0
        self.train_count = 0
        self.val_s = 0.0
        self.val_count = 0
        self.fetch_started: Optional[float] = None  # start of the latest training fetch
        self.first_fetch: Optional[float] = None  # start of the epoch's first training fetch
        self.t0 = 0.0


class FetchTimer:
    """Forwarding proxy around ``trainer.profiler`` that accumulates fetch time in ``stats``."""

    __slots__ = ("_inner", "_start", "_stop", "profile", "stats")

    def __init__(self, inner: Any) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_start", inner.start)
        object.__setattr__(self, "_stop", inner.stop)
        object.__setattr__(self, "profile", inner.profile)  # hooks: straight to the user's profiler
        object.__setattr__(self, "stats", FetchStats())

    def reset(self) -> FetchStats:
        """Start new counters (each epoch); returns the finished ones."""
        done = self.stats
        object.__setattr__(self, "stats", FetchStats())
        return done

    def start(self, action_name: str) -> None:
        if action_name.endswith("_next"):
            s = self.stats
            s.t0 = t0 = perf_counter()
            if action_name.endswith("train_dataloader_next"):
                s.fetch_started = t0
                if s.first_fetch is None:
                    s.first_fetch = t0
        self._start(action_name)

    def stop(self, action_name: str) -> None:
        self._stop(action_name)
        if action_name.endswith("_next"):
            s = self.stats
            if action_name.endswith("train_dataloader_next"):
                s.train_s += perf_counter() - s.t0
                s.train_count += 1
            elif action_name.endswith("val_next"):
                s.val_s += perf_counter() - s.t0
                s.val_count += 1

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance checks see the user's profiler
        return type(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    @property
    def inner(self) -> Any:
        return self._inner


def install(trainer: Any) -> FetchTimer:
    """Put a FetchTimer in front of ``trainer.profiler`` (once)."""
    if type(trainer.profiler) is FetchTimer:
        return trainer.profiler
    timer = FetchTimer(trainer.profiler)
    trainer.profiler = timer
    return timer


def uninstall(trainer: Any, timer: Optional[FetchTimer]) -> None:
    """Give the trainer its own profiler back."""
    if timer is not None and trainer.profiler is timer:
        trainer.profiler = timer.inner
