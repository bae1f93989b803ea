"""One torch.profiler session per window, none outside a window, and the training and validation windows' runners
(docs/choosing-steps.md)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Any, Callable, Iterator, Optional

import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from lightning_profkit.internals import profiler_running, release, start_at
from lightning_profkit.monitor.profiling.selection import Selection, WithCaptures

_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
PLANNED_SCAN = 100_000  # steps looked ahead for the end of a window cut short
KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"  # read by kineto once a process, when its first profiler session starts
QUIET_LEVEL = "6"  # above every line kineto prints: USDT (5 on torch 2.13+), STAGE (4 on 2.3), errors ("no GPU")
_kineto_started = False


@contextmanager
def quiet_kineto(enabled: bool = True) -> Iterator[None]:
    """Around the first profiler start of this process, where kineto reads its log level once: ``QUIET_LEVEL``, the
    environment as it was afterwards; a ``KINETO_LOG_LEVEL`` the user set is left alone (docs/choosing-steps.md)."""
    global _kineto_started
    quiet = enabled and not _kineto_started and KINETO_LOG_LEVEL not in os.environ
    if quiet:
        os.environ[KINETO_LOG_LEVEL] = QUIET_LEVEL
    try:
        yield
    finally:
        _kineto_started = True
        if quiet:
            os.environ.pop(KINETO_LOG_LEVEL, None)


def window_schedule(selection: Selection, first_active: int, offset: int) -> Callable[[int], ProfilerAction]:
    """torch.profiler schedule for one window: warm up until ``first_active``, record the active run."""

    def schedule(step: int) -> ProfilerAction:
        batch_idx = step - offset
        if selection.is_active(step, batch_idx):
            if selection.is_active(step + 1, batch_idx + 1):
                return ProfilerAction.RECORD
            return ProfilerAction.RECORD_AND_SAVE
        return ProfilerAction.WARMUP if step < first_active else ProfilerAction.NONE

    return schedule


@dataclass(frozen=True)
class Recording:
    """What every window of a fit records with; ``max_bytes``: the trace's budget of JSON (None: none)."""

    activities: list[ProfilerActivity]
    options: dict[str, Any]
    on_trace_ready: Callable[["WindowSession", Any], None]
    quiet: bool = True
    max_bytes: Optional[int] = None


class WindowSession:
    """One ``torch.profiler.profile`` through one window's warm-up and recording; ``spent_s``: seconds in its own
    calls; ``planned_last``: the step a window ended early by ``max_bytes`` would have recorded to."""

    def __init__(self, selection: Selection, step: int, batch_idx: int, warmup: int, recording: Recording,
                 bytes_per_step: Optional[float] = None) -> None:
        start = perf_counter()
        self.first_step, self.first_active = step, step + warmup
        self.offset = step - batch_idx  # global step of the epoch's batch 0
        self.last_recorded: Optional[int] = None
        self.recording, self.bytes_per_step = recording, bytes_per_step
        self.planned_last: Optional[int] = None
        self._schedule = schedule = window_schedule(selection, self.first_active, self.offset)
        ready = partial(recording.on_trace_ready, self)
        self.profiler = torch.profiler.profile(activities=recording.activities, schedule=schedule, on_trace_ready=ready,
                                               **recording.options)
        self.step_now = step  # the step the profile is in (its ProfilerStep#<step>)
        start_at(self.profiler, step, schedule(step))
        with quiet_kineto(self.recording.quiet):
            self.profiler.start()
        self.spent_s = perf_counter() - start

    def _note_recording(self) -> None:
        if self.profiler.current_action in _RECORDING:
            self.last_recorded = self.step_now

    @property
    def recorded_steps(self) -> int:
        return 0 if self.last_recorded is None else self.last_recorded - self.first_active + 1

    @property
    def estimate_bytes(self) -> Optional[float]:
        return None if self.bytes_per_step is None else self.bytes_per_step * self.recorded_steps

    def _over_budget(self) -> bool:
        """Steps are left to record, and one more would take the estimate past the recording's ``max_bytes``."""
        limit, per_step = self.recording.max_bytes, self.bytes_per_step
        if (limit is None or per_step is None or self.profiler.current_action != ProfilerAction.RECORD
                or (self.recorded_steps + 1) * per_step <= limit):
            return False
        ahead = range(self.step_now + 1, self.step_now + 1 + PLANNED_SCAN)  # a filter may be true at every step
        self.planned_last = next((s for s in ahead if self._schedule(s) not in _RECORDING), ahead.stop) - 1
        return True

    def step(self) -> bool:
        """Close the current step and open the next; False when the window is complete, to :meth:`finish` then."""
        start = perf_counter()
        self._note_recording()
        over_budget = self._over_budget()
        if not over_budget:
            self.profiler.step()
            self.step_now += 1
        self.spent_s += perf_counter() - start
        return not over_budget and self.profiler.current_action != ProfilerAction.NONE

    def finish(self, ran_current: bool = True) -> None:
        """End the session now, keeping what was recorded so far; ``ran_current=False``: the step the profiler
        is in has not run yet (validation starts between two steps), so it is not counted as recorded."""
        start = perf_counter()
        if ran_current:
            self._note_recording()
        try:
            self.profiler.stop()
        finally:
            release(self.profiler)  # freed once the writer is done with it, not at a later garbage collection
            self.spent_s += perf_counter() - start


Opener = Callable[[Selection, int, int, int], Optional[WindowSession]]  # (selection, step, batch_idx, warmup)


class _Windows:
    """What both kinds of windows keep: their selection, the open session, the seconds each ended window spent in its
    session's calls, and the last step of a window ended early (``max_trace_mb``), before which none opens again."""

    def __init__(self, selection: Selection, open_session: Opener) -> None:
        self.selection, self._open = selection, open_session
        self.session: Optional[WindowSession] = None
        self.spent: list[float] = []  # ended windows: seconds of each in its session's calls
        self._cut_through = -1

    def _step(self) -> None:
        assert self.session is not None
        if not self.session.step():
            if self.session.planned_last is not None:
                self._cut_through = self.session.planned_last
            self.stop()

    def stop(self, ran_current: bool = True) -> None:
        """End the open session now, keeping what it recorded (see :meth:`WindowSession.finish`)."""
        session, self.session = self.session, None
        if session is not None:
            try:
                session.finish(ran_current)
            finally:
                self.spent.append(session.spent_s)

    def _maybe_open(self, step: int, batch_idx: int, stopping: Callable[[], bool] = bool) -> None:
        """Open a session where a window begins at ``step``, past the one ended early."""
        warmup = self.selection.warmup_before(step, batch_idx) if step > self._cut_through else None
        if warmup is not None and not stopping():
            self.session = self._open(self.selection, step, batch_idx, warmup)


class WindowRunner(_Windows):
    """Decides at each step boundary whether to start, advance or end a training window's session (opened by
    ``open_session``, which may skip it); a window still open at an epoch's last batch ends there."""

    selection: WithCaptures

    def __init__(self, selection: Selection, open_session: Opener) -> None:
        super().__init__(WithCaptures(selection), open_session)
        self.profiled: list[tuple[int, int]] = []  # this epoch's windows: first and last step with a session
        self._paused = False  # a window ended by validation, to go on after it

    def epoch_start(self, next_step: int, next_batch_idx: int, num_batches: Optional[int]) -> None:
        self.stop()
        self.profiled, self.spent, self._cut_through, self._paused = [], [], -1, False  # windows never span epochs
        self.selection = self.selection.for_epoch(num_batches)
        self._maybe_open(next_step, next_batch_idx)

    def capture(self, first: int, last: int, next_step: int) -> None:
        """Record steps ``first``-``last`` too, the next step being ``next_step`` (once no window is open)."""
        self.selection = self.selection.add(first, last, next_step)

    def step_end(self, step: int, batch_idx: int, last_in_epoch: bool, stopping: Callable[[], bool] = bool) -> None:
        """``stopping()`` says whether training ends after this step (max_steps, should_stop); it is asked
        only when a session is open or would open, so that no step that never runs gets recorded."""
        if self.session is not None:
            self._note_profiled(self.session.first_step, step)
            if last_in_epoch or stopping():
                self.stop()
                return
            self._step()
        if self.session is None and not last_in_epoch:
            self._maybe_open(step + 1, batch_idx + 1, stopping)

    def next_step_end(self, step: int, batch_idx: int, horizon: int = 1000) -> int:
        """The first step from ``step`` on at whose end :meth:`step_end` has work (where no window begins within
        ``horizon`` steps, one before any could: to be asked again then)."""
        if self.session is not None:
            return step
        warmup = self.selection.warmup
        horizon = max(horizon, warmup + 2)
        first = self.selection.next_active(step + 1, batch_idx + 1, horizon)
        if first is None:  # none starts before step + 1 + horizon, so no session before step + horizon - warmup
            return step + horizon - warmup - 1
        return max(step, first - 1 - warmup)

    def _note_profiled(self, first: int, step: int) -> None:
        if self.profiled and self.profiled[-1][0] == first:
            self.profiled[-1] = (first, step)
        else:
            self.profiled.append((first, step))

    def pause(self) -> None:
        """Validation begins inside the epoch, between two steps: the open window ends there (the step the
        profiler is in has not run), and :meth:`resume` goes on with it after validation."""
        if self.session is not None:
            self.stop(ran_current=False)
            self._paused = True

    def resume(self, next_step: int, next_batch_idx: int) -> bool:
        """After validation: the steps still to come of the window :meth:`pause` ended get a window of their own
        from ``next_step`` on. Returns whether one was paused."""
        paused, self._paused = self._paused, False
        if paused:
            self._maybe_open(next_step, next_batch_idx)
        return paused


class ValidationWindows(_Windows):
    """The selected batches of each validation run (its first dataloader's, by batch index: a ``StepList``) in windows
    of their own; a session opens at a batch's start and steps at its end."""

    def run_start(self) -> None:
        self.stop()
        self._cut_through = -1

    def batch_start(self, batch_idx: int) -> None:
        if self.session is None:
            self._maybe_open(batch_idx, batch_idx)

    def batch_end(self) -> None:
        if self.session is not None:
            self._step()


def profiler_activities(names: Optional[list[str]], on_cuda: bool) -> list[ProfilerActivity]:
    """The activities asked for (``"cpu"``, ``"cuda"``); by default CPU, plus CUDA for a model on a CUDA device."""
    if names is not None:
        return [{"cpu": ProfilerActivity.CPU, "cuda": ProfilerActivity.CUDA}[str(a).lower()] for a in names]
    return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_cuda else [ProfilerActivity.CPU]


def session_opener(recording: Recording, report: Callable[..., None], bytes_per_step: Callable[[], Optional[float]],
                   room: Callable[[], Optional[str]]) -> Opener:
    """What opens a window's session: none while another torch.profiler session runs, nor while ``room()`` says why
    the trace would not fit (``report`` is told); ``bytes_per_step()`` for its size estimate."""

    def open_session(selection: Selection, step: int, batch_idx: int, warmup: int) -> Optional[WindowSession]:
        if profiler_running():
            report("another torch.profiler session is running; this window is skipped")
            return None
        no_room = room()
        if no_room is not None:
            report(no_room, "disk_full")
            return None
        return WindowSession(selection, step, batch_idx, warmup, recording, bytes_per_step())

    return open_session
