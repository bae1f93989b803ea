"""One torch.profiler session per window: created when a window begins, gone when it ends; outside a window no
session exists and nothing is paid. Its ``ProfilerStep#N`` markers carry the fit's steps (docs/choosing-steps.md).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Callable, Iterator, Optional

import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from lightning_profkit.internals import profiler_running, release, start_at
from lightning_profkit.monitor.profiling.selection import Selection, StepList, WithCaptures

_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


PLANNED_SCAN = 100_000  # steps looked ahead for the end of a window cut short


KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"  # read by kineto once a process, when its first profiler session starts
QUIET_LEVEL = "6"  # above every line kineto prints: USDT (5 on torch 2.13+), STAGE (4 on 2.3), errors ("no GPU")
_kineto_started = False


@contextmanager
def quiet_kineto(enabled: bool = True) -> Iterator[None]:
    """Around the first profiler start of this process: kineto (torch's profiler library) then reads its log level
    once, and prints nothing for the rest of the process (its ``USDT:`` lines at every start and stop, ``STAGE:``
    lines on torch 2.3, a CUDA build's ``gpuGetDeviceCount failed`` on a machine without a GPU). The environment is
    as it was once the call returns; a ``KINETO_LOG_LEVEL`` the user set is left alone."""
    global _kineto_started
    if not enabled or _kineto_started or KINETO_LOG_LEVEL in os.environ:
        _kineto_started = True
        yield
        return
    os.environ[KINETO_LOG_LEVEL] = QUIET_LEVEL
    try:
        yield
    finally:
        _kineto_started = True
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
    """What every window of a fit records with: torch.profiler's ``activities`` and ``options``, where each session's
    results go (``on_trace_ready(session, prof)``), whether kineto starts quiet (:func:`quiet_kineto`), and the trace's
    size budget in bytes of JSON (None: none)."""

    activities: list[ProfilerActivity]
    options: dict[str, Any]
    on_trace_ready: Callable[["WindowSession", Any], None]
    quiet: bool = True
    max_bytes: Optional[int] = None


class WindowSession:
    """Drives one ``torch.profiler.profile`` through warm-up and recording of one window.

    Call :meth:`step` at every step boundary inside the window; it returns False once the window has
    been recorded and handed to the recording's ``on_trace_ready``. :meth:`finish` ends it early (epoch end, error) and
    still hands over whatever was recorded. ``spent_s``: seconds the calling thread spent in the session's
    own calls (start, each step boundary, stop and the hand-over), not in the profiled steps.

    ``estimate_bytes``: the trace's JSON size so far, estimated as ``bytes_per_step`` (the JSON per recorded step
    of the fit's latest written window of the same kind; None before one) times the steps recorded. At a step
    boundary where one more recorded step would take the estimate past the recording's ``max_bytes``, with steps
    still to record, the window ends there, keeping the steps recorded (one at least), and ``planned_last`` is the
    step it would have recorded to.
    """

    def __init__(self, selection: Selection, step: int, batch_idx: int, warmup: int, recording: Recording,
                 bytes_per_step: Optional[float] = None) -> None:
        start = perf_counter()
        self.first_step, self.first_active = step, step + warmup
        self.offset = step - batch_idx  # global step of the epoch's batch 0
        self.last_recorded: Optional[int] = None
        self.recording, self.bytes_per_step = recording, bytes_per_step
        self.planned_last: Optional[int] = None
        self._schedule = schedule = window_schedule(selection, self.first_active, step - batch_idx)
        self.profiler = torch.profiler.profile(
            activities=recording.activities, schedule=schedule, on_trace_ready=self._ready, **recording.options
        )
        self.step_now = step  # the step the profile is in (its ProfilerStep#<step>)
        start_at(self.profiler, step, schedule(step))
        with quiet_kineto(self.recording.quiet):
            self.profiler.start()
        self.spent_s = perf_counter() - start

    def _ready(self, prof: torch.profiler.profile) -> None:
        self.recording.on_trace_ready(self, prof)

    def _note_recording(self) -> None:
        """At the end of a step: note it if it was recorded."""
        if self.profiler.current_action in _RECORDING:
            self.last_recorded = self.step_now

    @property
    def recorded_steps(self) -> int:
        """Steps recorded so far: ``first_active`` to ``last_recorded``."""
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
        last = self.step_now
        for _ in range(PLANNED_SCAN):  # a filter true at every step would never end the scan
            if self._schedule(last + 1) not in _RECORDING:
                break
            last += 1
        self.planned_last = last
        return True

    def step(self) -> bool:
        """Close the current step and open the next; False when the window is complete."""
        start = perf_counter()
        try:
            self._note_recording()
            if not self._over_budget():
                self.profiler.step()
                self.step_now += 1
                if self.profiler.current_action != ProfilerAction.NONE:
                    return True
            self.profiler.stop()
            self._release()
            return False
        finally:
            self.spent_s += perf_counter() - start

    def finish(self, ran_current: bool = True) -> None:
        """End the session now, keeping what was recorded so far; ``ran_current=False``: the step the profiler
        is in has not run yet (validation starts between two steps), so it is not counted as recorded."""
        start = perf_counter()
        if ran_current:
            self._note_recording()
        try:
            self.profiler.stop()
        finally:
            self._release()
            self.spent_s += perf_counter() - start

    def _release(self) -> None:
        # freed as soon as the writer is done with it rather than at some later pass of the garbage collector
        release(self.profiler)


class _Windows:
    """What both kinds of windows keep: the open session, the seconds each ended window spent in its session's calls,
    and the last step of a window ended early (``max_trace_mb``), before which none opens again."""

    def __init__(self, open_session: Callable[[Selection, int, int, int], Optional[WindowSession]]) -> None:
        self._open = open_session
        self.session: Optional[WindowSession] = None
        self.spent: list[float] = []  # ended windows: seconds of each in its session's calls
        self._cut_through = -1

    def _stepped(self) -> bool:
        """Step the open session; False (and the session let go) when its window is complete."""
        assert self.session is not None
        if self.session.step():
            return True
        self.spent.append(self.session.spent_s)
        if self.session.planned_last is not None:
            self._cut_through = self.session.planned_last
        self.session = None
        return False

    def stop(self, ran_current: bool = True) -> None:
        """End the open session now, keeping what it recorded (see :meth:`WindowSession.finish`)."""
        session, self.session = self.session, None
        if session is not None:
            try:
                session.finish(ran_current)
            finally:
                self.spent.append(session.spent_s)


class WindowRunner(_Windows):
    """Decides at each step boundary whether to start, advance or end a window's session.

    ``open_session(selection, step, batch_idx, warmup)`` creates the session (or returns None to skip, e.g.
    when another profiler is running; see :func:`session_opener`). Windows never span epochs: one still open at an
    epoch's last batch is ended there with what it recorded.
    """

    def __init__(self, selection: Selection, open_session: Callable[[Selection, int, int, int], Optional[WindowSession]]
                 ) -> None:
        super().__init__(open_session)
        self.selection = WithCaptures(selection)
        self.profiled: list[tuple[int, int]] = []  # this epoch's windows: first and last step with a session
        self._paused = False  # a window ended by validation, to go on after it

    def epoch_start(self, next_step: int, next_batch_idx: int, num_batches: Optional[int]) -> None:
        self.stop()
        self.profiled, self.spent, self._cut_through, self._paused = [], [], -1, False  # windows never span epochs
        self.selection = self.selection.for_epoch(num_batches)
        self._maybe_open(next_step, next_batch_idx)

    def capture(self, first: int, last: int, next_step: int) -> None:
        """Record steps ``first``-``last`` (from :func:`~lightning_profkit.monitor.profiling.selection.capture_steps`),
        the next step being ``next_step``. Takes effect when no session is open at the next step boundary (an open
        window finishes first)."""
        self.selection = self.selection.add(first, last, next_step)

    def step_end(self, step: int, batch_idx: int, last_in_epoch: bool, stopping: Callable[[], bool] = bool) -> None:
        """``stopping()`` says whether training ends after this step (max_steps, should_stop); it is asked
        only when a session is open or would open, so that no step that never runs gets recorded."""
        if self.session is not None:
            self._note_profiled(self.session.first_step, step)
            if last_in_epoch or stopping():
                self.stop()
                return
            self._stepped()
        if self.session is None and not last_in_epoch:
            self._maybe_open(step + 1, batch_idx + 1, stopping)

    def next_step_end(self, step: int, batch_idx: int, horizon: int = 1000) -> int:
        """The first step from ``step`` on at whose end :meth:`step_end` has work: every step of an open
        session, else the step before the next session starts. Where no window begins within ``horizon``
        steps, a step before any could, to be asked again then; so the caller need not call
        :meth:`step_end` at the other steps."""
        if self.session is not None:
            return step
        warmup = self.selection.warmup
        horizon = max(horizon, warmup + 2)
        first = self.selection.next_active(step + 1, batch_idx + 1, horizon)
        if first is None:  # none starts before step + 1 + horizon, so no session before step + horizon - warmup
            return step + horizon - warmup - 1
        return max(step, first - 1 - warmup)

    def _note_profiled(self, first: int, step: int) -> None:
        """The open session's window runs from ``first`` to at least ``step``."""
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
        if paused and self.session is None:
            self._maybe_open(next_step, next_batch_idx)
        return paused

    def _maybe_open(self, step: int, batch_idx: int, stopping: Callable[[], bool] = bool) -> None:
        warmup = self.selection.warmup_before(step, batch_idx) if step > self._cut_through else None
        if warmup is not None and not stopping():
            self.session = self._open(self.selection, step, batch_idx, warmup)


class ValidationWindows(_Windows):
    """Selected batches of each validation run (its first dataloader), recorded in windows of their own: a
    :class:`StepList` over the run's batch indices, a session opened at a batch's start and stepped at its end,
    whatever is open ended when the run ends. Steps here are batch indices (``ProfilerStep#<batch_idx>``);
    :attr:`spent` holds the windows ended since the caller last emptied it."""

    def __init__(self, batches: StepList, open_session: Callable[[Selection, int, int, int], Optional[WindowSession]]) -> None:
        super().__init__(open_session)
        self.batches = batches

    def run_start(self) -> None:
        self.stop()
        self._cut_through = -1

    def batch_start(self, batch_idx: int) -> None:
        if self.session is None and batch_idx > self._cut_through:
            warmup = self.batches.warmup_before(batch_idx, batch_idx)
            if warmup is not None:
                self.session = self._open(self.batches, batch_idx, batch_idx, warmup)

    def batch_end(self) -> None:
        if self.session is not None:
            self._stepped()


def profiler_activities(names: Optional[list[str]], on_cuda: bool) -> list[ProfilerActivity]:
    """The activities asked for (``"cpu"``, ``"cuda"``); by default CPU, plus CUDA for a model on a CUDA device."""
    if names is not None:
        return [{"cpu": ProfilerActivity.CPU, "cuda": ProfilerActivity.CUDA}[str(a).lower()] for a in names]
    return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_cuda else [ProfilerActivity.CPU]


def session_opener(
    recording: Recording,
    report: Callable[..., None],
    bytes_per_step: Callable[[], Optional[float]] = lambda: None,
    room: Callable[[], Optional[str]] = lambda: None,
) -> Callable[[Selection, int, int, int], Optional[WindowSession]]:
    """What :class:`WindowRunner` calls to open a session: none while another torch.profiler session runs
    (torch allows one at a time; ``report`` is told), nor while ``room()`` says why the trace would not fit
    (told to ``report(why, "disk_full")``). ``bytes_per_step()``: what the size estimate of a window opened now
    counts a recorded step (see :class:`WindowSession`)."""

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
