"""Which training steps get profiled: ``is_active(step, batch_idx)``, ``step`` counting the fit's batches from 0 across
epochs, ``batch_idx`` within the epoch (docs/choosing-steps.md)."""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

StepRanges = Union[str, Sequence[Union[int, str, Sequence[int]]]]

_RANGE = re.compile(r"^\s*(-?\d+)\s*(?:-\s*(-?\d+)\s*)?$")

SHOWN_RANGES = 6  # the step ranges a line names; the others are counted


class Selection:
    """Base of all selections: a predicate over steps plus where windows begin."""

    warmup: int

    def is_active(self, step: int, batch_idx: int) -> bool:
        raise NotImplementedError

    def for_epoch(self, num_batches: Optional[int]) -> "Selection":
        """The selection to use in an epoch of ``num_batches`` batches (None: unknown length)."""
        return self

    def warmup_before(self, step: int, batch_idx: int) -> Optional[int]:
        """The warm-up steps of a session that should start at this step (``warmup`` before its first active step,
        or what is left of them), or None."""
        first = self.next_active(step, batch_idx, self.warmup + 1)
        return None if first is None else first - step

    def next_active(self, step: int, batch_idx: int, horizon: int) -> Optional[int]:
        """The first active step in ``[step, step + horizon)``, or None (a scan here; O(1) in the selections below)."""
        for k in range(horizon):
            if self.is_active(step + k, batch_idx + k):
                return step + k
        return None

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class EpochWindow(Selection):
    """One window in every epoch: skip ``skip_first`` batches, warm up ``warmup``, record ``active``; moved earlier or
    shortened to fit a short epoch (docs/choosing-steps.md)."""

    skip_first: int
    warmup: int
    active: int
    _start: Optional[int] = None  # effective first warm-up batch in the current epoch
    _asked: Optional[tuple[int, int]] = None  # (warmup, active) asked, where this epoch's are fewer
    _length: Optional[int] = None  # the epoch's batches, where known

    def for_epoch(self, num_batches: Optional[int]) -> "EpochWindow":
        warmup, active = self._asked or (self.warmup, self.active)
        if num_batches is None:
            return EpochWindow(self.skip_first, warmup, active, self.skip_first)
        fitted_warmup = warmup if num_batches > warmup else 0  # a warm-up needs a recorded batch after it
        fitted_active = max(0, min(active, num_batches - fitted_warmup))
        start = min(self.skip_first, num_batches - fitted_warmup - fitted_active)
        shorter = (fitted_warmup, fitted_active) != (warmup, active)
        return EpochWindow(self.skip_first, fitted_warmup, fitted_active, start,
                           (warmup, active) if shorter else None, num_batches)

    @property
    def _first(self) -> int:
        """The epoch's first recorded batch."""
        return (self.skip_first if self._start is None else self._start) + self.warmup

    def is_active(self, step: int, batch_idx: int) -> bool:
        return self._first <= batch_idx < self._first + self.active

    def next_active(self, step: int, batch_idx: int, horizon: int) -> Optional[int]:
        b = max(batch_idx, self._first)
        return _within(step + b - batch_idx, step, horizon) if b < self._first + self.active else None

    def describe(self) -> str:
        first, last = self._first, self._first + self.active - 1
        if self.active == 0:
            return "no batches (an epoch has 0 batches)"
        batches = f"batch {first}" if first == last else f"batches {first}-{last}"
        warmup = f"after {_count(self.warmup, 'warm-up batch')}" if self.warmup else "no warm-up"
        if self._asked is not None:
            return (f"{batches} of every epoch ({warmup}; an epoch has {_count(self._length or 0, 'batch')}, fewer "
                    f"than warmup + active = {sum(self._asked)})")
        if self._start is not None and self._start < self.skip_first:
            return (f"{batches} of every epoch ({warmup}; earlier than skip_first={self.skip_first}, to fit an "
                    f"epoch of {self._length} batches)")
        return f"{batches} of every epoch ({warmup})"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es")  # a batch, a warm-up batch


@dataclass(frozen=True)
class StepList(Selection):
    """Explicit global step ranges, inclusive, e.g. ``"100-102,500-502"`` or ``[[100, 102], 500]``."""

    ranges: tuple[tuple[int, int], ...]
    warmup: int

    def is_active(self, step: int, batch_idx: int) -> bool:
        return self.next_active(step, batch_idx, 1) == step

    def next_active(self, step: int, batch_idx: int, horizon: int) -> Optional[int]:
        i = bisect.bisect_right(self.ranges, (step, math.inf)) - 1  # the last range starting at or before ``step``
        if i >= 0 and step <= self.ranges[i][1]:
            return _within(step, step, horizon)
        return _within(self.ranges[i + 1][0], step, horizon) if i + 1 < len(self.ranges) else None

    def describe(self) -> str:
        ranges = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges]
        shown = ",".join(ranges[:SHOWN_RANGES])
        more = f" and {len(ranges) - SHOWN_RANGES} more ranges" if len(ranges) > SHOWN_RANGES else ""
        return f"the fit's steps {shown}{more}"


@dataclass(frozen=True)
class EveryNSteps(Selection):
    """``active`` steps starting at every multiple of ``every_n_steps`` (steps n, 2n, 3n, ...)."""

    every_n_steps: int
    warmup: int
    active: int

    def is_active(self, step: int, batch_idx: int) -> bool:
        return step >= self.every_n_steps and step % self.every_n_steps < self.active

    def next_active(self, step: int, batch_idx: int, horizon: int) -> Optional[int]:
        n = self.every_n_steps
        return _within(step if self.is_active(step, batch_idx) else (step // n + 1) * n, step, horizon)

    def describe(self) -> str:
        last = f" to N+{self.active - 1}" if self.active > 1 else ""
        return f"the fit's steps N{last}, for every multiple N of {self.every_n_steps}"


@dataclass(frozen=True)
class StepFilter(Selection):
    """Any user predicate ``step_filter(step) -> bool``."""

    step_filter: Callable[[int], bool]
    warmup: int

    def is_active(self, step: int, batch_idx: int) -> bool:
        return step >= 0 and bool(self.step_filter(step))

    def describe(self) -> str:
        return f"the fit's steps where {getattr(self.step_filter, '__name__', 'step_filter')}(step) is true"


@dataclass(frozen=True)
class NoSteps(Selection):
    """No step is recorded (``profile=False``): metrics only."""

    warmup: int = 0

    def is_active(self, step: int, batch_idx: int) -> bool:
        return False

    def next_active(self, step: int, batch_idx: int, horizon: int) -> Optional[int]:
        return None

    def describe(self) -> str:
        return "no steps"


@dataclass(frozen=True)
class WithCaptures(Selection):
    """The schedule's selection plus captures asked for while training (after an alert, or from outside)."""

    base: Selection
    ranges: tuple[tuple[int, int], ...] = ()

    @property
    def warmup(self) -> int:  # type: ignore[override]
        return self.base.warmup

    def is_active(self, step: int, batch_idx: int) -> bool:
        return self.base.is_active(step, batch_idx) or any(lo <= step <= hi for lo, hi in self.ranges)

    def next_active(self, step: int, batch_idx: int, horizon: int) -> Optional[int]:
        found = [self.base.next_active(step, batch_idx, horizon)]
        found += [_within(max(lo, step), step, horizon) for lo, hi in self.ranges if hi >= step]
        return min((a for a in found if a is not None), default=None)

    def for_epoch(self, num_batches: Optional[int]) -> "WithCaptures":
        return WithCaptures(self.base.for_epoch(num_batches), self.ranges)

    def add(self, first: int, last: int, now: int) -> "WithCaptures":
        """With the capture ``first..last`` added and the ones that ended before ``now`` dropped."""
        kept = tuple(r for r in self.ranges if r[1] >= now)
        return WithCaptures(self.base, kept + ((first, last),))


def capture_steps(after: int, active: int, warmup: int, last_step: Optional[int]) -> Optional[tuple[int, int]]:
    """The steps a capture asked for at the end of step ``after`` records: ``active`` steps after ``warmup``, or at
    once where the fit's ``last_step`` would come first, cut there; None when the fit ends at ``after``."""
    first = after + 1 + warmup
    if last_step is not None and first + active - 1 > last_step:
        first = after + 1
    last = first + active - 1 if last_step is None else min(first + active - 1, last_step)
    return (first, last) if first <= last else None


def _within(candidate: int, step: int, horizon: int) -> Optional[int]:
    return candidate if candidate < step + horizon else None


def parse_step_ranges(steps: StepRanges, name: str = "steps") -> tuple[tuple[int, int], ...]:
    """Parse ``"100-102,500"`` or ``[[100, 102], 500, "7-9"]`` into sorted, merged inclusive ranges; errors
    name the argument ``name``."""
    items: list = steps.split(",") if isinstance(steps, str) else list(steps)
    if not items or (isinstance(steps, str) and not steps.strip()):
        raise ValueError(f"`{name}` must name at least one step or range, got {steps!r}")
    ranges = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            lo, hi = item, item
        elif isinstance(item, str):
            m = _RANGE.match(item)
            if not m:
                raise ValueError(f"`{name}` has an invalid range {item!r}: expected 'N' or 'A-B'")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        elif isinstance(item, Sequence) and len(item) == 2 and all(isinstance(v, int) for v in item):
            lo, hi = item
        else:
            raise ValueError(f"`{name}` has an invalid entry {item!r}: expected N, 'A-B' or [A, B]")
        if lo < 0 or hi < 0:
            raise ValueError(f"`{name}` must not be negative, got {item!r}")
        if hi < lo:
            raise ValueError(f"`{name}` has a reversed range {item!r}")
        ranges.append((lo, hi))
    ranges.sort()
    merged = [ranges[0]]
    for lo, hi in ranges[1:]:
        if lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)
