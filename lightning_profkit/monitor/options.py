"""PerformanceMonitor's arguments, checked once at construction, in one style: a ``ValueError`` that names the
argument and says what it takes. Then read-only."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Iterable, Optional, Sequence

from lightning_profkit.alerts import DataWaitAlert
from lightning_profkit.monitor.alerting.checks import DEFAULT_ALERT_THRESHOLD, RollingChecks
from lightning_profkit.monitor.profiling.selection import (EpochWindow, EveryNSteps, NoSteps, Selection, StepFilter,
                                                           StepList, StepRanges, parse_step_ranges)

ACTIVITIES = ("cpu", "cuda")
ALERT_ACTIONS = ("warn", "stop", "raise")
PROFILER_OPTIONS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")
FLAGS = ("profile", *PROFILER_OPTIONS, "quiet", "log_metrics", "capture_on_alert")
WHOLE = {"skip_first": 0, "warmup": 0, "active": 1, "alert_window": 1, "alert_patience": 1, "alert_cooldown": 0,
         "max_captures": 0}  # integer arguments and their least value


def _whole(least: int) -> Callable[[Any], bool]:
    return lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= least


def _number(ok: Callable[[float], bool]) -> Callable[[Any], bool]:
    return lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and ok(v)


# every argument checked alone: its test, whether None passes, and what it must be
CHECKS: dict[str, tuple[Callable[[Any], bool], bool, str]] = {
    **dict.fromkeys(FLAGS, (lambda v: isinstance(v, bool), False, "True or False")),
    **{name: (_whole(least), False, f"an integer >= {least}") for name, least in WHOLE.items()},
    "every_n_steps": (_whole(1), True, "an integer >= 1"),
    "keep_last_windows": (_whole(1), True, "an integer >= 1 or None"),
    "flush_timeout": (_number(lambda v: v >= 0), False, "a number of seconds >= 0"),
    "alert_threshold": (_number(lambda v: 0 < v < 1), True, "a ratio between 0 and 1 (or None to turn alerts off)"),
    "max_trace_mb": (_number(lambda v: v > 0), True, "megabytes of trace JSON > 0 (or None for no limit)"),
    "step_filter": (callable, True, "callable"),
    "on_alert": (callable, True, "callable"),
    "alert_action": (ALERT_ACTIONS.__contains__, False, f"one of {', '.join(map(repr, ALERT_ACTIONS))}"),
    "activities": (lambda v: not isinstance(v, str) and v and all(str(a).lower() in ACTIVITIES for a in v), True,
                   "a list of 'cpu' and/or 'cuda'"),
    "ranks": (lambda v: not isinstance(v, (str, bytes)) and v and all(isinstance(r, int) and r >= 0 for r in v), True,
              "a non-empty list of ranks >= 0"),
    "dirpath": (lambda v: isinstance(v, (str, os.PathLike)), True, "a folder path"),
}


MAX_LISTED = 1_000_000  # items of `ranks` or `activities` read

# a window's trace JSON, MB: TensorBoard's PyTorch Profiler tab shows an empty view above about 500 MB
# (pytorch/kineto#805); Perfetto's UI runs out of browser memory at about 2 GB
DEFAULT_MAX_TRACE_MB = 500.0


@dataclass(frozen=True)
class Options:
    """Every argument of :class:`~lightning_profkit.PerformanceMonitor`, checked (its signature holds the defaults)."""

    profile: bool
    skip_first: int
    warmup: int
    active: int
    steps: Optional[StepRanges]
    every_n_steps: Optional[int]
    step_filter: Optional[Callable[[int], bool]]
    ranks: Optional[Sequence[int]]
    dirpath: Optional[str]
    activities: Optional[Sequence[str]]
    record_shapes: bool
    profile_memory: bool
    with_stack: bool
    with_flops: bool
    with_modules: bool
    quiet: bool
    flush_timeout: float
    log_metrics: bool
    alert_threshold: Optional[float]
    alert_window: int
    alert_patience: int
    alert_cooldown: int
    alert_action: str
    on_alert: Optional[Callable[[DataWaitAlert], Any]]
    capture_on_alert: bool
    max_captures: int
    keep_last_windows: Optional[int]
    max_trace_mb: Optional[float]
    validation_batches: Optional[StepRanges]
    storage_options: Optional[dict[str, Any]] = field(repr=False)  # may hold credentials

    def __post_init__(self) -> None:
        for name in ("ranks", "activities"):  # a generator (read once) or an array: kept as a tuple of its first items
            value = getattr(self, name)
            if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
                items = tuple(islice(value, MAX_LISTED + 1))
                if len(items) > MAX_LISTED:
                    raise ValueError(f"`{name}` must be {CHECKS[name][2]}, got more than {MAX_LISTED} items")
                object.__setattr__(self, name, items)
        for name, (ok, optional, wants) in CHECKS.items():
            value = getattr(self, name)
            if not (optional and value is None or ok(value)):
                raise ValueError(f"`{name}` must be {wants}, got {value!r}")
        self._check_steps()
        if self.ranks is not None:
            object.__setattr__(self, "ranks", tuple(sorted(set(self.ranks))))
        if self.storage_options is not None:
            options = self.storage_options
            try:
                plain = isinstance(options, dict) and all(isinstance(k, str) for k in options) and json.dumps(options)
            except (TypeError, ValueError):
                plain = False
            if not plain:  # it reaches the store's processes as JSON; its values are not shown
                raise ValueError("`storage_options` must be a dict of str keys and JSON values (strings, numbers, "
                                 f"lists, dicts), got a {type(options).__name__} that is not")
            object.__setattr__(self, "storage_options", dict(options))
        if self.dirpath is not None:
            object.__setattr__(self, "dirpath", os.fspath(self.dirpath))

    def _check_steps(self) -> None:
        """The ways of choosing steps: one at most, none without profiling, each parsed."""
        chosen = [n for n in ("steps", "every_n_steps", "step_filter") if getattr(self, n) is not None]
        if len(chosen) > 1:
            raise ValueError(f"Pass at most one of `steps`, `every_n_steps`, `step_filter`; got {', '.join(chosen)}")
        if not self.profile and (chosen or self.validation_batches is not None):
            given = chosen[0] if chosen else "validation_batches"
            raise ValueError(f"`profile=False` records no windows; do not pass `{given}` with it")
        for name in ("steps", "validation_batches"):
            if getattr(self, name) is not None:  # raises naming the argument
                object.__setattr__(self, name, parse_step_ranges(getattr(self, name), name))
        if self.every_n_steps is not None and self.warmup + self.active > self.every_n_steps:
            raise ValueError(f"`every_n_steps` ({self.every_n_steps}) must be at least `warmup` + `active` "
                             f"({self.warmup + self.active})")

    def selection(self) -> Selection:
        """The steps these options select."""
        if not self.profile:
            return NoSteps()
        if self.steps is not None:
            return StepList(self.steps, self.warmup)  # type: ignore[arg-type]  # parsed in __post_init__
        if self.every_n_steps is not None:
            return EveryNSteps(self.every_n_steps, self.warmup, self.active)
        if self.step_filter is not None:
            return StepFilter(self.step_filter, self.warmup)
        return EpochWindow(self.skip_first, self.warmup, self.active)

    def checks(self) -> RollingChecks:
        """The rolling checks and alert rule these options set."""
        return RollingChecks(self.alert_threshold, self.alert_patience, self.alert_cooldown, self.alert_window,
                             self.max_captures)

    def validation_selection(self) -> Optional[StepList]:
        """The validation batches these options select, by their index in each validation run."""
        if self.validation_batches is None:
            return None
        return StepList(self.validation_batches, self.warmup)  # type: ignore[arg-type]  # parsed in __post_init__

    def profiler_options(self) -> dict[str, bool]:
        """The options passed through to ``torch.profiler.profile``."""
        return {name: getattr(self, name) for name in PROFILER_OPTIONS}

    def profiles_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def plan(self, trace_dir: str, epoch_length: Optional[int], disabled: bool = False) -> list[str]:
        """The lines that say what a fit of ``epoch_length`` batches an epoch records, and where (``disabled``: this
        rank was to profile and cannot, as a warning said)."""
        if not self.profile:
            ways = "after an alert or when asked" if self.capture_on_alert and self.alert_threshold else "when asked"
            later = f"; up to {self.max_captures} windows {ways} (profkit capture)" if self.max_captures else ""
            return [f"metrics only (profile=False){later}", f"traces -> {trace_dir}"]
        ranks = "all ranks" if self.ranks is None else f"ranks {','.join(map(str, self.ranks))}"
        what = self.selection().for_epoch(epoch_length).describe()
        return [f"profiling {what} on {ranks}{': disabled, see the warning' if disabled else ''}", f"traces -> {trace_dir}"]
