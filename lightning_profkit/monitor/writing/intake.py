"""The windows' traces on their way: a finished profiler session handed to the trace output with its labels, and
each written window taken back: listed, named to the alerts recorded for, checked, and its figures logged."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from lightning_profkit.internals import kineto_results, moved
from lightning_profkit.monitor.alerting.advice import gpu_idle_notice
from lightning_profkit.monitor.alerting.checks import DEFAULT_ALERT_THRESHOLD
from lightning_profkit.monitor.exchange import exchange_named, figures_of, made_from, names_of
from lightning_profkit.monitor.options import Options
from lightning_profkit.monitor.profiling.windows import (FIRST_JSON_PER_BYTE, FIRST_JSON_PER_BYTE_WITH_STACK,
                                                         WindowSession, learned_json_per_byte)
from lightning_profkit.monitor.timing.epoch_figures import window_metrics
from lightning_profkit.monitor.writing.output import TraceOutput, WrittenWindow

HEAVY = ("with_stack", "record_shapes", "profile_memory", "with_modules")  # options that make traces large


def cut_message(options: Options, first: int, last: int, planned_last: int, estimated_bytes: Optional[float]) -> str:
    """What to say of a window of steps ``first``-``planned_last`` ended early by ``max_trace_mb`` after ``last``."""
    heavy = [name for name in HEAVY if getattr(options, name)]
    lines = [f"a window ended early: its trace would pass max_trace_mb={options.max_trace_mb:g}",
             f"steps {first}-{planned_last} planned, {first}-{last} recorded, about "
             f"{(estimated_bytes or 0) / 1e6:.0f} MB of JSON (estimated from the profiler's memory)",
             f"to record whole windows: raise max_trace_mb or record fewer steps (active={options.active}, steps=)"]
    lines += [f"or turn off {', '.join(heavy)}"] if heavy else []
    return "\n  - ".join(lines)


class TraceIntake:
    """One fit's traces on one rank, through ``output``; ``report(message, key)`` warns once per kind of problem."""

    def __init__(self, output: TraceOutput, options: Options, to_user: bool, report: Callable[..., None]) -> None:
        self.output, self.options, self.to_user, self.report = output, options, to_user, report
        self.json_per_byte = FIRST_JSON_PER_BYTE_WITH_STACK if options.with_stack else FIRST_JSON_PER_BYTE
        self.gpu_profiled = False  # CUDA among the activities on a CUDA model: a trace without GPU activity lost it

    def room(self) -> Optional[str]:
        """Why a window's trace would not fit where it goes now, or None."""
        try:
            return self.output.room()
        except OSError:  # the folder cannot be looked at: the window's write will say why
            return None

    def submit(self, session: WindowSession, prof: Any, epoch: int, log_step: int,
               validation_after: Optional[int] = None) -> None:
        """The finished ``session``'s results to be written (``validation_after``: the training step a validation
        window followed)."""
        results = kineto_results(prof)
        if results is None:
            self.report(moved("torch", "profile.profiler.kineto_results", "no window is written"), "kineto_results")
            return
        if session.last_recorded is None:
            return
        first, last = session.first_active, session.last_recorded
        notes: dict[str, Any] = {"log_step": log_step, **({"gpu": True} if self.gpu_profiled else {})}
        if validation_after is not None:
            self.output.submit(results, epoch, first, last, 0, notes,
                               validation_after=validation_after)
            return
        if session.estimate_bytes is not None:
            notes.update(estimated_mb=round(session.estimate_bytes / 1e6, 3), memory_growth_bytes=session.growth_bytes)
        if session.planned_last is not None:
            notes["cut"] = {"reason": "max_trace_mb", "max_trace_mb": self.options.max_trace_mb,
                            "planned_steps": [first, session.planned_last]}
            said = cut_message(self.options, first, last, session.planned_last, session.estimate_bytes)
            self.report(said, "max_trace_mb")
        self.output.submit(results, epoch, first, last, session.offset, notes)

    def take(self) -> tuple[list[WrittenWindow], set[str], list[tuple[int, dict[str, float]]]]:
        """The windows written since the last look, the paths retention deleted, and the metrics to log of each
        window (rank zero); what a trace lacks is said."""
        done, removed = self.output.take_written()
        for window in done:  # on every rank: what a trace lacks; the size estimate's factor from the latest window
            if window.problems:
                lacks = "".join(f"\n  - {problem}" for problem in window.problems)
                self.report(f"a trace lacks what its window recorded; profkit summary and report show it:\n  {window.path}"
                            f"{lacks}", "integrity")
            if window.json_bytes and window.growth_bytes:
                self.json_per_byte = learned_json_per_byte(window.json_bytes, window.growth_bytes)
        if not self.to_user:
            return done, removed, []
        threshold = self.options.alert_threshold or DEFAULT_ALERT_THRESHOLD
        logged = []
        for window in done:
            notice = None if window.validation else gpu_idle_notice(window.figures, os.path.dirname(window.path), threshold)
            if notice:
                self.report(notice, "gpu_idle")
            metrics = window_metrics(window.figures, window.validation) if self.options.log_metrics else {}
            if metrics:
                logged.append((window.log_step, metrics))
        return done, removed, logged


def slowest_rank(group: Any, summaries: list[dict[str, Any]]) -> Optional[str]:
    """On every rank (an exchange): the verdict over the ranks' newest windows, for rank zero's line."""
    from lightning_profkit.trace.ranks import RankFigures, rank_figures, verdict

    mine = rank_figures(summaries)
    rows = exchange_named(group, figures_of(mine[0]) if mine else {}, names_of(RankFigures))
    found = verdict([f for f in (made_from(RankFigures, row) for row in rows) if f is not None])  # None: no windows
    return found.headline if found is not None else None
