"""Exact DataLoader wait and step times, timed in the ``fit`` loops' fetch pair, where Lightning itself times each
fetch (docs/metrics.md; design notes: docs/how-it-works.md)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable, Optional

from lightning_profkit.internals import (FETCH_PAIR, LOADER_SETUP, fetch_pair, has_loader_setup, lightnings_fetch_pair,
                                        moved)

STEP_CHUNK = 1024


@dataclass(slots=True)
class FetchStats:
    """Fetch counters of the current epoch (seconds from ``time.perf_counter``)."""

    train_s: float = 0.0
    cpu_s: float = 0.0  # the training thread's CPU in its training fetches (where the timer reads it)
    cpu0: float = 0.0  # that CPU as the current fetch began
    first_wait: float = 0.0  # the wait of the epoch's first training fetch (workers starting, their first batch)
    train_count: int = 0
    val_s: float = 0.0
    val_count: int = 0
    first_fetch: Optional[float] = None  # start of the epoch's first training fetch
    t0: float = 0.0  # start of the fetch under way, training or validation (one at a time)
    step_start: Optional[float] = None  # first fetch of the current step
    steps_done: int = -1  # Lightning's count of completed steps at that fetch
    # Seconds per finished step: appended to a list, and moved to an array (8 bytes a step) every
    # STEP_CHUNK steps. Inside a real step an array's append took about 2 µs, a list's a few tenths
    # (measured): the array's conversion code is cold there, the list's is what Python runs all the time.
    recent_steps: list[float] = field(default_factory=list)
    _older_steps: array = field(default_factory=lambda: array("d"))

    @property
    def step_times(self) -> array:
        """Seconds of each finished step of the epoch."""
        self.keep_steps()
        return self._older_steps

    def keep_steps(self) -> None:
        """Move the recent step times to the compact array."""
        self._older_steps.extend(self.recent_steps)
        self.recent_steps.clear()

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` (a validation run after the current step) out of the step's time."""
        if self.step_start is not None:
            self.step_start += seconds

    def end_step(self, now: float, steps_done: int) -> None:
        """Close the current step at ``now`` (the epoch's end) if it has completed."""
        if self.step_start is not None and steps_done != self.steps_done:
            self.recent_steps.append(now - self.step_start)
            self.step_start = None


def _own(loop: Any, name: str) -> Any:
    """What ``loop`` itself holds under ``name`` (None where it has just its class's method). Read through
    ``getattr``: reading the object's ``__dict__`` would turn its attributes into a plain dict, which
    makes every later attribute read of Lightning's on that loop about twice as slow (CPython 3.11)."""
    found = getattr(loop, name, None)
    if getattr(found, "__self__", None) is loop and getattr(found, "__func__", None) is getattr(type(loop), name, None):
        return None
    return found


def _restore(loop: Any, name: str, before: Any, ours: Any) -> None:
    """Give ``loop`` back ``before`` (None: its class's method) under ``name``, where it still holds ``ours``."""
    if _own(loop, name) == ours:
        if before is None:
            delattr(loop, name)
        else:
            setattr(loop, name, before)


class FetchTimer:
    """Times the training and validation fetches of ``trainer.fit`` into ``stats``, between
    :meth:`install` and :meth:`uninstall`."""

    __slots__ = ("stats", "_trainer", "_train_loop", "_val_loop", "_progress", "_action", "_saved", "_own_pair",
                 "_val_pair", "_on_due", "_due", "_due_at", "_idle", "cpu_clock")

    def __init__(self, trainer: Any) -> None:
        self.stats = FetchStats()
        self._trainer = trainer
        train = self._train_loop = trainer.fit_loop.epoch_loop
        val = self._val_loop = train.val_loop
        self._progress = train.batch_progress.total  # Lightning's tracker of completed steps
        self._action = f"[{type(train).__name__}].train_dataloader_next"  # as Lightning names it
        train_pair, val_pair = fetch_pair(train), fetch_pair(val)
        assert train_pair is not None and val_pair is not None
        overridden = any(_own(train, name) is not None for name in FETCH_PAIR)
        self._own_pair = train_pair if overridden or not lightnings_fetch_pair(train) else None  # None: Lightning's
        self._val_pair = val_pair
        profiler = trainer.profiler  # by class name: lightning.pytorch's and pytorch_lightning's alike
        self._idle = profiler if type(profiler).__name__ == "PassThroughProfiler" else None  # its calls do nothing
        self._saved: list[tuple[Any, str, Any, Callable[[], None]]] = []
        self._on_due: Callable[[], None] = lambda: None  # not called before wake(): due at no step
        # the training thread's CPU seconds so far (time.thread_time), read around each training fetch where set
        self.cpu_clock: Optional[Callable[[], float]] = None
        self._due = self._due_at = float("inf")

    def install(self) -> "FetchTimer":
        """On the loops' fetch pair (:func:`require_fetch_pair`: checked at ``setup``)."""
        train, val = self._train_loop, self._val_loop
        for loop, name, ours in ((train, FETCH_PAIR[0], self._train_before), (train, FETCH_PAIR[1], self._train_after),
                                 (val, FETCH_PAIR[0], self._val_before), (val, FETCH_PAIR[1], self._val_after)):
            self._saved.append((loop, name, _own(loop, name), ours))
            setattr(loop, name, ours)
        return self

    def uninstall(self) -> None:
        """Give the loops back what they had (where what they have now is still ours)."""
        for saved in reversed(self._saved):
            _restore(*saved)
        self._saved = []

    def reset(self) -> FetchStats:
        """Start new counters (each epoch); returns the finished ones."""
        done, self.stats = self.stats, FetchStats()
        return done

    def wake(self, step: float, at: float, on_due: Callable[[], None]) -> None:
        """Call ``on_due()`` at each training fetch of step ``step`` or later, or at or after ``at``
        (``perf_counter`` seconds), until the next call of this method."""
        self._due, self._due_at, self._on_due = step, at, on_due

    def _train_before(self) -> None:
        if self._own_pair is None:
            profiler = self._trainer.profiler
            if profiler is not self._idle:  # Lightning's default profiler: its start() and stop() do nothing
                profiler.start(self._action)
        else:
            self._own_pair[0]()
        s = self.stats
        t0 = perf_counter()
        done = self._progress.completed  # the step being fetched for is step `done` (from 0)
        if done != s.steps_done:  # its first fetch: the step before it ends here
            if s.step_start is not None:
                recent = s.recent_steps
                recent.append(t0 - s.step_start)
                if len(recent) >= STEP_CHUNK:
                    s.keep_steps()
            elif s.first_fetch is None:
                s.first_fetch = t0
            s.step_start = t0
            s.steps_done = done
        if done >= self._due or t0 >= self._due_at:
            self._on_due()
        clock = self.cpu_clock
        if clock is not None:
            s.cpu0 = clock()
        s.t0 = perf_counter()  # the wait starts here: the bookkeeping above, and on_due's work, are not in it

    def _train_after(self) -> None:
        s = self.stats
        waited = perf_counter() - s.t0
        s.train_s += waited
        clock = self.cpu_clock
        if clock is not None:
            s.cpu_s += clock() - s.cpu0
        if not s.train_count:
            s.first_wait = waited
        s.train_count += 1
        if self._own_pair is None:
            profiler = self._trainer.profiler
            if profiler is not self._idle:
                profiler.stop(self._action)
        else:
            self._own_pair[1]()

    def _val_before(self) -> None:
        self._val_pair[0]()
        self.stats.t0 = perf_counter()

    def _val_after(self) -> None:
        s = self.stats
        s.val_s += perf_counter() - s.t0
        s.val_count += 1
        self._val_pair[1]()


class LoaderSetupTimer:
    """Times the fit loop's ``setup_data`` into ``seconds``: where Lightning makes the training DataLoader and its
    first iterator, which starts epoch 0's workers before ``on_train_start``."""

    def __init__(self, fit_loop: Any) -> None:
        self.seconds = 0.0
        self._loop = fit_loop
        self._before: Any = None

    def install(self, say: Callable[[str], None]) -> "LoaderSetupTimer":
        """On the loop; where the installed Lightning's fit loop has no such method, nothing is timed (said)."""
        if not has_loader_setup(self._loop):
            say(moved("lightning", LOADER_SETUP, "epoch 0's DataLoader start-up before training is not counted"))
            return self
        self._before = _own(self._loop, LOADER_SETUP)
        setattr(self._loop, LOADER_SETUP, self._timed)
        return self

    def uninstall(self) -> None:
        """Give the loop back what it had (where what it has now is still ours)."""
        _restore(self._loop, LOADER_SETUP, self._before, self._timed)

    def _timed(self) -> None:
        setup = self._before or getattr(type(self._loop), LOADER_SETUP).__get__(self._loop)
        start = perf_counter()
        try:
            setup()
        finally:
            self.seconds += perf_counter() - start


def require_fetch_pair(trainer: Any) -> None:
    """Raise at ``setup`` where the installed Lightning's fit loops have no fetch pair, where the timer goes."""
    loop = trainer.fit_loop.epoch_loop
    if fetch_pair(loop) is None or fetch_pair(loop.val_loop) is None:
        packages = [c.__module__.split(".")[0] for c in type(trainer).__mro__]  # a user's subclass: its base's
        package = next((p for p in packages if p in ("lightning", "pytorch_lightning")), "lightning")
        raise RuntimeError(moved(package, FETCH_PAIR[0], "PerformanceMonitor times each DataLoader fetch there "
                                 "and needs a Lightning 2.5 or later that has it"))


def uninstall_stale(trainer: Any) -> None:
    """At ``setup``: take off the fit loops the timer that a copy of a trainer made mid-fit carries (no fit of its
    own takes it off)."""
    stale = getattr(_own(trainer.fit_loop.epoch_loop, FETCH_PAIR[0]), "__self__", None)
    if isinstance(stale, FetchTimer):
        stale.uninstall()
