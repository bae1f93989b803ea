"""One fit's machinery on one rank, with no Lightning: each hook makes one call on :class:`FitRun` and applies the
:class:`Outcome` it returns. Design notes: docs/how-it-works.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter, thread_time
from typing import Any, Callable, Optional, Sequence

import torch

from lightning_profkit import capture_request
from lightning_profkit.alerts import DataWaitAlert, DataWaitAlertError
from lightning_profkit.figures import MB
from lightning_profkit.internals import kineto_results, moved
from lightning_profkit.metric_names import EXCHANGED, PREFIX
from lightning_profkit.monitor.alerting.advice import LoaderAdvice, LoaderFacts
from lightning_profkit.monitor.alerting.checks import BlockFigures, RollingChecks
from lightning_profkit.monitor.alerting.delivery import AlertDelivery
from lightning_profkit.monitor.exchange import (close_group, exchange_group, exchange_named, figures_of, made_from,
                                                names_of)
from lightning_profkit.monitor.options import Options
from lightning_profkit.monitor.profiling.selection import capture_steps
from lightning_profkit.monitor.profiling.windows import (Recording, ValidationWindows, WindowRunner, WindowSession,
                                                         profiler_activities, session_opener)
from lightning_profkit.monitor.timing.epoch_figures import reduce_ranks, rolling_metrics
from lightning_profkit.monitor.timing.fetch_timer import FetchTimer
from lightning_profkit.monitor.timing.measure import EpochMeasure
from lightning_profkit.monitor.writing.output import TraceOutput, cut_message
from lightning_profkit.notices import warn

INF = float("inf")
OWNER_CHECK_S = 10.0  # seconds of training between checks that the callback is still among the trainer's callbacks


@dataclass
class Outcome:
    """What the trainer does after a call: ``metrics`` to log (``(step, {name: value})``, rank zero), the epoch's
    figures for Lightning's callbacks to read (``callback_metrics``, every rank), ``lines`` to print on rank zero,
    whether to ``stop`` training, and an alert to ``raise_`` (``alert_action="raise"``)."""

    metrics: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    callback_metrics: dict[str, float] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    stop: bool = False
    raise_: Optional[DataWaitAlertError] = None


@dataclass(frozen=True)
class Rank:
    """Where this process stands among the fit's processes."""

    rank: int = 0
    world_size: int = 1
    processes_per_node: int = 1

    @property
    def is_zero(self) -> bool:
        return self.rank == 0


class FitRun:
    """One fit on one rank; ``checks``, ``traces`` and ``alerts`` are the monitor's, kept across its fits.
    ``other_profiler``: Lightning's PyTorchProfiler holds torch's one profiler session; ``report(message, key)`` warns
    once per kind of problem; ``to_loggers(alert)`` writes an alert where the loggers show text; ``wake()`` asks the
    trainer to call :meth:`step_end` at the end of the step now beginning."""

    def __init__(self, options: Options, checks: RollingChecks, traces: list[str], alerts: list[DataWaitAlert],
                 trace_dir: str, report: Callable[..., None], *, rank: Rank = Rank(), other_profiler: bool = False,
                 fit_loop: Any = None, to_loggers: Callable[[DataWaitAlert], None] = lambda alert: None,
                 wake: Callable[[], None] = lambda: None, clock: Callable[[], float] = perf_counter) -> None:
        self.options, self.trace_dir, self.rank = options, trace_dir, rank
        self.checks, self.traces, self.alerts = checks, traces, alerts
        self.report, self.wake, self.clock = report, wake, clock
        self.delivery = AlertDelivery(options.on_alert, self.report, to_loggers, to_user=rank.is_zero)
        self.group = exchange_group(rank.world_size)
        self.profiling = options.profiles_rank(rank.rank) and not other_profiler  # windows may open; off after errors
        self.checks.start_fit()
        if other_profiler and options.profiles_rank(rank.rank) and rank.is_zero:
            warn("PerformanceMonitor: no windows in this run: the Trainer's PyTorchProfiler holds torch's one profiler "
                 "session", UserWarning)
        self.timer: Optional[FetchTimer] = None
        self.measure = EpochMeasure(self.report, fit_loop)
        self.output: Optional[TraceOutput] = None
        self.runner: Optional[WindowRunner] = None  # the training windows, from training's start where recorded
        self.validation_windows: Optional[ValidationWindows] = None
        self.due = INF  # the next step at whose end the windows have work
        self.last_step: Optional[int] = None  # the fit's last step, where the Trainer knows it
        self.live: Optional[capture_request.LiveRun] = None
        self.advice = LoaderAdvice(self.report, watching=self.checks.rule is not None)
        self.epoch = 0
        self.epoch_first_step = 0
        self.epoch_offset = 0
        self.epoch_length: Optional[int] = None  # batches in the running epoch, where known
        self.log_step = 0  # the latest step we were called at, on the axis metrics are logged on
        self.validation_after = 0  # the training step the running validation follows
        self.step_ms: Optional[float] = None  # the last epoch's step_time_ms_mean (over ranks), for the end-of-fit line

    # ------------------------------------------------------------------ arming and closing
    def arm(self, timer: FetchTimer, on_cuda: bool, batch_size: Optional[int],
            loader: Callable[[], LoaderFacts], workers: Callable[[], Sequence[int]]) -> None:
        """Training starts (or starts again after loops that ran without us); ``loader()`` and ``workers()`` read
        the training DataLoader's settings and its workers' pids for the advice."""
        o = self.options
        output = self.output = TraceOutput(self.trace_dir, self.rank.rank, self.rank.world_size, o, self.report)
        self.timer, self.advice.loader, self.advice.workers = timer, loader, workers  # armed: an output is there
        timer.cpu_clock = thread_time if self.advice.watching else None
        self.measure.arm(on_cuda, batch_size)
        if self.profiling:
            activities = profiler_activities(o.activities, on_cuda)
            limit = None if o.max_trace_mb is None else int(o.max_trace_mb * MB)

            def opener(validating: bool = False) -> Callable:
                submit = lambda session, prof: self._submit(session, prof, validating)  # noqa: E731
                recording = Recording(activities, o.profiler_options(), submit, o.quiet, limit)
                per_step = lambda: output.bytes_per_step.get(validating)  # noqa: E731
                return session_opener(recording, self.report, per_step, output.room)

            self.runner = WindowRunner(o.selection(), opener())
            batches = o.validation_selection()
            if batches is not None:
                self.validation_windows = ValidationWindows(batches, opener(True))
        if self.rank.is_zero and o.max_captures:  # requests for a run on a store are taken on its staging folder
            self.live = capture_request.LiveRun(output.local_dir)
            if output.remote:  # the finalizing process announces the run there and brings requests in
                output.announce(self.live.run)

    def disarm(self, wait: bool = True) -> Outcome:
        """End the machinery (waiting up to ``flush_timeout`` for the writer, with ``wait``); safe to call again. The
        windows written meanwhile come back to be logged."""
        out = Outcome()
        self._stop_windows()
        if self.timer is not None:
            self.timer.uninstall()
            self.timer = None
        self.measure.close()
        if self.output is not None:
            timeout = self.options.flush_timeout if wait else 0.0
            left, unsent = self.output.close(timeout)
            if left and wait:
                self.report(f"{len(left)} windows not written within flush_timeout={timeout:g} s are lost; a longer "
                            "flush_timeout waits for them" + "".join(f"\n  - {name}" for name in left))
            if unsent:
                staging = self.output.local_dir
                kept = "".join(f"\n  - {path}" for path in unsent)
                self.report(f"{len(unsent)} profiler trace(s) could not be uploaded; they are kept on this machine"
                            f"{kept}\n  Upload them later: profkit upload {staging} {self.trace_dir}", "unsent")
            self._take_written(out)
            if self.live is not None:  # made with the output (see arm); its marker goes before the staging folder
                self.live.end()
                self.live = None
            self.output.remove_staging()
        return out

    def fail(self, where: str, err: BaseException) -> None:
        """An error inside the callback: profiling is off for the rest of the fit; the hooks still run, so that
        every rank keeps taking part in the same exchanges."""
        self.profiling = False
        self.report(f"profiling is off for the rest of this run after an error in `{where}`:\n  {err!r}")
        self._stop_windows()

    def close(self, wait: bool = True) -> None:
        """The fit is over (teardown, or an exception): nothing of it is left running."""
        self.disarm(wait)
        close_group(self.group)
        self.checks.end_fit()

    # ------------------------------------------------------------------ epochs and steps
    def epoch_start(self, epoch: int, step: int, batch_idx: int, epoch_length: Optional[int]) -> None:
        """Epoch ``epoch`` begins at ``step`` (its batch ``batch_idx``: 0, or more when resuming inside it)."""
        assert self.timer is not None
        self.epoch = epoch
        self.advice.epoch_done(self.timer.reset())
        now = self.clock()
        self.measure.epoch_start(now)
        self.epoch_offset = step - batch_idx  # the fit's step of the epoch's batch 0
        self.checks.epoch_start(now, step, epoch, self.epoch_offset)
        self.advice.mark(now, self.timer.stats)  # the epoch's first check measures from here
        self.epoch_first_step = step
        self.epoch_length = epoch_length
        if self.validation_windows is not None:
            self.validation_windows.spent = []  # this epoch's validation windows
        if self.runner is not None:
            self.runner.epoch_start(step, batch_idx, epoch_length)
            self.due = self.runner.next_step_end(step, batch_idx)
        if self.recording:
            self.measure.cpu_waits.mark(now)
        self._schedule()

    def step_end(self, step: int, batch_idx: int, last_in_epoch: bool, stopping: Callable[[], bool], log_step: int,
                 batch: Any = None) -> Outcome:
        """The end of a step we were woken for (``stopping()``: training ends after it; ``log_step``: its value on
        the logging axis; ``batch``: its batch, whose tensors the advice counts once)."""
        out = Outcome()
        now = self.clock()
        self.log_step = log_step
        if self.checks.due(step):
            self.advice.see(batch)
            self._rolling_check(out, now, step)  # every rank at the same step: it may exchange figures
        if self.live is not None and now >= self.live.next_poll:
            steps, lines = capture_request.requested_steps(self.live, now, self.options.active, self.report)
            out.lines += lines
            if steps and self.rank.world_size > 1:
                self.checks.requested = steps  # all ranks start it together at the next rolling check
            elif steps:
                out.lines += self._requested(step, steps)
        if self.output is not None and self.output.has_written:
            self._take_written(out)
        if step >= self.due and self.runner is not None:
            was = self.recording
            try:
                self.runner.step_end(step, batch_idx, last_in_epoch, stopping)
                self.due = self.runner.next_step_end(step + 1, batch_idx + 1)
                if was != self.recording:
                    self.measure.cpu_waits.mark(now)
            except Exception as err:
                self.fail("on_train_batch_end", err)
        self._schedule()
        return out

    def _requested(self, step: int, steps: int) -> list[str]:
        """Record ``steps`` steps after ``step``, as asked from outside (``profkit capture``); the line that says
        where, by epoch and batch."""
        window = self._capture(step, steps)
        if window is None:
            return []
        first, length = window[0] - self.epoch_offset, self.epoch_length
        where = (f"from batch {first} of epoch {self.epoch}" if length is None or first < length
                 else f"from batch {first - length} of epoch {self.epoch + 1}")
        return [f"recording {window[1] - window[0] + 1} steps {where} (requested from outside)"]

    def validation_start(self, after_step: int, log_step: int) -> None:
        """A validation run begins after training step ``after_step`` (``log_step`` on the logging axis): no
        validation inside a training window."""
        self.validation_after = max(after_step, 0)
        self.log_step = log_step
        self.measure.validation_start(self.clock())  # the sanity check's, before training, is dropped at epoch_start
        if self.runner is not None:  # the window it interrupts ends
            self.runner.pause()
        if self.validation_windows is not None:
            self.validation_windows.run_start()

    def validation_end(self, step: int, batch_idx: int) -> None:
        """The validation run ended; training goes on at ``step`` (batch ``batch_idx``)."""
        seconds = self.measure.validation_end(self.clock())
        if seconds and self.timer is not None:
            self.timer.stats.exclude(seconds)
        if self.validation_windows is not None:
            self.validation_windows.stop()
        if self.runner is not None and self.runner.resume(step, batch_idx):  # in the window it ended
            self.due = self.runner.next_step_end(step, batch_idx)
        self._schedule()

    def epoch_end(self, step: int, completed: int, log_step: int) -> Outcome:
        """The epoch ended after ``step`` (``completed`` steps in all); its figures are logged at ``log_step``."""
        out = Outcome()
        end = self.clock()
        self.log_step = log_step
        runner, validation = self.runner, self.validation_windows
        if runner is not None:
            runner.stop()
        profiled = runner.profiled if runner else []  # first and last step of each window
        spent = (runner.spent if runner else []) + (validation.spent if validation else [])
        if self.timer is None:  # not armed
            return out
        self.timer.stats.end_step(end, completed)
        self.checks.epoch_end(end, self.timer.stats.train_s, self.measure.validation)
        if self.options.log_metrics or self.checks.rule is not None:
            # every rank takes part in the same collective here, whatever happened to its profiling
            total = self.output.helper_cpu_s  # read now, not at the last window
            mine = self.measure.figures(self.timer.stats, end, self.epoch_first_step, profiled, spent, total)
            metrics = reduce_ranks(exchange_named(self.group, mine, EXCHANGED))  # over gloo: the device is untouched
            notice = self.measure.after_window(metrics.get(PREFIX + "overhead/after_window_ratio"))
            if notice and self.rank.is_zero:
                self.report(notice, "after_window")
            self.step_ms = metrics.get(PREFIX + "step_time_ms_mean", self.step_ms)
            if self.checks.rule is not None:
                self.advice.mark(end, self.timer.stats)
                ratio = metrics.get(PREFIX + "data_wait_ratio_max", metrics.get(PREFIX + "data_wait_ratio"))
                if ratio is not None:
                    worst = metrics.get(PREFIX + "data_wait_worst_rank")
                    self._judge(out, ratio, None if worst is None else int(worst), f"epoch {self.epoch}", step)
                metrics[PREFIX + "data_wait_alert"] = float(self.checks.episode_in_epoch)
                metrics[PREFIX + "data_wait_alerts"] = float(self.checks.rule.alerts)
            if self.options.log_metrics:
                out.callback_metrics = metrics  # the same on every rank: reduced over them
            if self.options.log_metrics and metrics and self.rank.is_zero:
                out.metrics.append((log_step, {**metrics, "epoch": float(self.epoch)}))
            self._take_written(out)
        return out

    def end(self) -> Outcome:
        """Training ended: the traces still being written are waited for, and rank zero gets the end-of-fit line
        (with the cross-rank verdict: an exchange, on every rank)."""
        out = self.disarm()
        output, self.output = self.output, None
        summaries = output.summaries if output is not None else []
        slowest = slowest_rank(self.group, summaries) if self.group is not None and self.options.profile else None
        line = output.fit_line() if output is not None and self.rank.is_zero else None
        if line is not None:
            count, lines = line
            out.lines += [f"last {count} window{'s' if count > 1 else ''} of rank 0: {lines[0]}", *lines[1:]]
            out.lines += [slowest] if slowest else []
            out.lines += [f"every step of the last epoch: {self.step_ms:.1f} ms on average"] if self.step_ms else []
            out.lines.append(f"more: profkit summary {self.trace_dir}")
        total = output.helper_cpu_s if output is not None else None  # closed: the writer's whole fit
        if total is not None and self.rank.is_zero:
            after = max(total - self.measure.helper_cpu_s, 0.0)
            out.lines.append(f"writing traces took {total:.3f} s of CPU beside training on rank 0, {after:.3f} s of it "
                             "after the last epoch")
        return out

    # ------------------------------------------------------------------ the windows and the step scheduler
    @property
    def recording(self) -> bool:
        """Whether a training window's session is open."""
        return self.runner is not None and self.runner.session is not None

    def _capture(self, step: int, steps: int) -> Optional[tuple[int, int]]:
        """Record ``steps`` steps after ``step``, spending one of the fit's captures; the steps, or None where this
        rank records none, the budget is spent or the fit ends at ``step``."""
        if self.runner is None:
            return None
        window = capture_steps(step, steps, self.runner.selection.warmup, self.last_step)
        if window is None:
            return None
        if not self.checks.spend_capture():
            self.report(f"no more captures: `max_captures={self.checks.max_captures}` windows were recorded", "budget")
            return None
        self.runner.capture(*window, step + 1)
        self.due = min(self.due, step)  # the runner opens it at this step's end
        return window

    def _stop_windows(self) -> None:
        """End the training and validation windows' sessions, keeping what they recorded; none opens again."""
        stopping = (self.runner, self.validation_windows)
        self.runner = self.validation_windows = None
        self.due = INF
        for windows in filter(None, stopping):
            try:
                windows.stop()
            except Exception as err:  # the windows have let go of the session already
                self.report(f"stopping the profiler failed:\n  {err!r}")

    def _schedule(self) -> None:
        """Have the fetch timer wake us at the next step with work at its end: a window's, a rolling check's, or
        the next capture-request poll (or ownership check)."""
        if self.timer is not None:
            due = min(self.due, self.checks.check_at)
            at = self.clock() + OWNER_CHECK_S
            if self.live is not None:
                at = min(at, self.live.next_poll)
            self.timer.wake(due, at, self.wake)

    def _submit(self, session: WindowSession, prof: Any, validation: bool) -> None:
        """The finished ``session``'s results to the output (``validation``: of the run after training step
        :attr:`validation_after`)."""
        results = kineto_results(prof)
        if results is None:
            self.report(moved("torch", "profile.profiler.kineto_results", "no window is written"), "kineto_results")
            return
        if session.last_recorded is None:
            return
        first, last, off = session.first_active, session.last_recorded, session.offset  # off: the step of batch 0
        # CUDA among the activities on a CUDA model: a trace without GPU activity lost it
        gpu = self.measure.on_cuda and torch.profiler.ProfilerActivity.CUDA in session.recording.activities
        notes: dict[str, Any] = {"log_step": self.log_step, **({"gpu": True} if gpu else {})}
        if session.estimate_bytes is not None:
            notes["estimated_mb"] = round(session.estimate_bytes / 1e6, 3)
        if session.planned_last is not None:  # the message counts batches as the window's folder does
            notes["cut"] = {"reason": "max_trace_mb", "max_trace_mb": self.options.max_trace_mb,
                            "planned_steps": [first, session.planned_last]}
            said = cut_message(self.options, first - off, last - off, session.planned_last - off,
                               session.estimate_bytes, validation)
            self.report(said, "max_trace_mb")
        self.output.submit(results, self.epoch, first, last, off, notes,
                           validation_after=self.validation_after if validation else None,
                           after_batch=max(self.validation_after - self.epoch_offset, 0))

    # ------------------------------------------------------------------ metrics, alerts and captures
    def _rolling_check(self, out: Outcome, now: float, step: int) -> None:
        """This block's data wait on every rank (exchanged off the device), then the rule."""
        assert self.timer is not None
        checked = self.checks.span(step)
        self.advice.mark(now, self.timer.stats)
        mine = self.checks.take_block(now, self.timer.stats.train_s, self.measure.validation, step)
        exchanged = exchange_named(self.group, figures_of(mine), names_of(BlockFigures))
        rows = [made_from(BlockFigures, row) for row in exchanged]
        asked = int(max(row.requested for row in rows))
        if asked:
            out.lines += self._requested(step, asked)
        if self.options.log_metrics and self.rank.is_zero:  # the curve grows while a long epoch runs
            metrics = rolling_metrics(rows, self.options.alert_window)
            if metrics:
                out.metrics.append((self.log_step, metrics))
        worst = self.checks.worst(rows)
        if self.checks.rule is not None and worst is not None:
            self._judge(out, worst[0], worst[1] if len(rows) > 1 else None, checked, step)

    def _judge(self, out: Outcome, ratio: float, worst_rank: Optional[int], checked: str, step: int) -> None:
        """Feed one check to the rule; on an alert, act on it (every rank decides alike)."""
        if not self.checks.judge(ratio, step):
            return
        assert self.checks.rule is not None and self.timer is not None  # called from the checks of an armed fit
        stats, measure = self.timer.stats, self.measure
        startup = (stats.first_fetch - measure.start + measure.startup_before_s + stats.first_wait
                   if stats.first_fetch else None)
        advice = self.advice.advice(self.group, worst_rank, startup, self.clock() - measure.start)  # an exchange
        o = self.options
        recording = None
        if o.alert_action == "warn" and o.capture_on_alert:
            recording = self._capture(step, o.active)
            if recording is None and self.last_step is not None and step >= self.last_step:
                out.lines.append("data-wait alert at the fit's last step: no steps are left to record for it")
        alert = DataWaitAlert(ratio, self.checks.rule.threshold, self.epoch, step, checked, worst_rank, advice,
                              log_step=self.log_step, recording=recording)
        self.alerts.append(alert)
        out.stop = o.alert_action == "stop"
        if o.alert_action == "raise":
            out.raise_ = DataWaitAlertError(alert)
        self.delivery.send(alert)

    def _take_written(self, out: Outcome) -> None:
        """The windows written since the last look: listed among the traces (less those retention deleted), named
        to the alerts recorded for, and their metrics logged."""
        done, removed, logged = self.output.take()
        self.traces[:] = [p for p in self.traces + [w.path for w in done] if p not in removed]
        for window in done:
            if not window.validation:  # the trace of the alerts before it
                for alert, named in self.delivery.window_written(window.path, window.first):
                    self.alerts[:] = [named if a is alert else a for a in self.alerts]
        out.metrics += logged


def slowest_rank(group: Any, summaries: list[dict[str, Any]]) -> Optional[str]:
    """On every rank (an exchange): the verdict over the ranks' newest windows, for rank zero's line."""
    from lightning_profkit.trace.ranks import RankFigures, rank_figures, verdict

    mine = rank_figures(summaries)
    rows = exchange_named(group, figures_of(mine[0]) if mine else {}, names_of(RankFigures))
    found = verdict([f for f in (made_from(RankFigures, row) for row in rows) if f is not None])  # None: no windows
    return found.headline if found is not None else None
