"""A finished profiler session handed to the trace output with its labels, and each written window taken back:
checked, its figures logged (docs/traces-and-storage.md)."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from lightning_profkit.figures import MB
from lightning_profkit.internals import kineto_results, moved
from lightning_profkit.monitor.alerting.advice import gpu_idle_notice
from lightning_profkit.monitor.alerting.checks import DEFAULT_ALERT_THRESHOLD
from lightning_profkit.monitor.exchange import exchange_named, figures_of, made_from, names_of
from lightning_profkit.monitor.options import Options
from lightning_profkit.monitor.profiling.windows import WindowSession
from lightning_profkit.monitor.timing.epoch_figures import window_metrics
from lightning_profkit.monitor.writing.output import TraceOutput, WrittenWindow

HEAVY = ("with_stack", "record_shapes", "profile_memory", "with_modules")  # options that make traces large


def fewer(options: Options, validation: bool = False) -> list[str]:
    """How to keep a window's trace under ``max_trace_mb``: record less, or turn off the options that make it large."""
    less = (f"record fewer batches (validation_batches={options.validation_batches})" if validation
            else f"record fewer steps (active={options.active}, steps=)")
    heavy = [name for name in HEAVY if getattr(options, name)]
    lines = [f"to record whole windows: raise max_trace_mb or {less}"]
    return lines + ([f"or turn off {', '.join(heavy)}"] if heavy else [])


def cut_message(options: Options, first: int, last: int, planned_last: int, estimated_bytes: Optional[float],
                validation: bool = False) -> str:
    """What to say of a window of batches ``first``-``planned_last`` ended early by ``max_trace_mb`` after ``last``."""
    lines = [f"a window ended early: its trace would pass max_trace_mb={options.max_trace_mb:g}",
             f"batches {first}-{planned_last} planned, {first}-{last} recorded, about {(estimated_bytes or 0) / 1e6:.0f}"
             " MB of JSON (estimated from the JSON a step of the latest written window of its kind)"]
    return "\n  - ".join(lines + fewer(options, validation))


def over_message(options: Options, window: WrittenWindow) -> str:
    """What to say of a written ``window`` whose JSON passed ``max_trace_mb``."""
    assert window.json_bytes is not None
    steps = "batches" if window.validation else "steps"
    each = window.json_bytes / window.steps
    lines = [f"a window's trace passed max_trace_mb={options.max_trace_mb:g}: {window.json_bytes / 1e6:.1f} MB of JSON "
             f"for {window.steps} {steps}", window.path,
             f"nothing estimates a fit's first window of each kind (training, validation), and a window keeps one of its "
             f"{steps} at least; the next windows of its kind are estimated at {each / 1e6:.2f} MB a step"
             + (" (over max_trace_mb: one step each)" if each > options.max_trace_mb * MB else "")]
    return "\n  - ".join(lines + fewer(options, window.validation))


class TraceIntake:
    """One fit's traces on one rank, through ``output``; ``report(message, key)`` warns once per kind of problem."""

    def __init__(self, output: TraceOutput, options: Options, to_user: bool, report: Callable[..., None]) -> None:
        self.output, self.options, self.to_user, self.report = output, options, to_user, report
        self.bytes_per_step: dict[bool, float] = {}  # by validation: JSON a step of the latest written window of a kind
        self.gpu_profiled = False  # CUDA among the activities on a CUDA model: a trace without GPU activity lost it

    def submit(self, session: WindowSession, prof: Any, epoch: int, log_step: int,
               validation_after: Optional[int] = None, after_batch: int = 0) -> None:
        """The finished ``session``'s results to be written (a validation window's: ``validation_after`` and
        ``after_batch`` as :meth:`TraceOutput.submit` has them)."""
        results = kineto_results(prof)
        if results is None:
            self.report(moved("torch", "profile.profiler.kineto_results", "no window is written"), "kineto_results")
            return
        if session.last_recorded is None:
            return
        first, last = session.first_active, session.last_recorded
        notes: dict[str, Any] = {"log_step": log_step, **({"gpu": True} if self.gpu_profiled else {})}
        if session.estimate_bytes is not None:
            notes["estimated_mb"] = round(session.estimate_bytes / 1e6, 3)
        if session.planned_last is not None:
            notes["cut"] = {"reason": "max_trace_mb", "max_trace_mb": self.options.max_trace_mb,
                            "planned_steps": [first, session.planned_last]}
            off = session.offset  # the fit's step of batch 0: the message counts as the window's folder does
            said = cut_message(self.options, first - off, last - off, session.planned_last - off, session.estimate_bytes,
                               validation_after is not None)
            self.report(said, "max_trace_mb")
        self.output.submit(results, epoch, first, last, session.offset, notes, validation_after=validation_after,
                           after_batch=after_batch)

    def take(self) -> tuple[list[WrittenWindow], set[str], list[tuple[int, dict[str, float]]]]:
        """The windows written since the last look, the paths retention deleted, and the metrics to log (rank zero)."""
        done, removed = self.output.take_written()
        for window in done:  # on every rank: what a trace lacks; the size estimate from the latest window of a kind
            if window.problems:
                lacks = "".join(f"\n  - {problem}" for problem in window.problems)
                self.report(f"a trace lacks what its window recorded; profkit summary and report show it:\n  {window.path}"
                            f"{lacks}", "integrity")
            if window.json_bytes:
                self.bytes_per_step[window.validation] = window.json_bytes / window.steps
                limit = self.options.max_trace_mb
                if limit is not None and window.json_bytes > limit * MB:
                    self.report(over_message(self.options, window), "max_trace_mb_over")
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
