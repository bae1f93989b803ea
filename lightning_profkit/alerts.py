"""When to raise a data-wait alert: threshold, patience and cooldown over a stream of checks. Pure.

A *check* is one measured data-wait ratio: a block of ``alert_window`` training steps, or a whole epoch.
An *episode* begins when ``patience`` consecutive checks are over the threshold and ends at the first
check under it. One episode gives at most one alert, and no alert follows another within ``cooldown``
steps, so a slow stretch, or a ratio that flickers around the threshold, is reported once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

# TensorFlow's input-pipeline analyzer calls a step "highly input-bound" above 20% of its time waiting
# for input; torch-tb-profiler suggests more workers from 5%, which ordinary well-fed loaders reach.
DEFAULT_THRESHOLD = 0.2
ACTIONS = ("warn", "stop", "raise")


@dataclass
class DataWaitAlert:
    """What an alert hands to ``on_alert`` and prints: the figures, the advice and where the trace is."""

    ratio: float  # data-wait ratio of the check that fired (the worst rank's, with several ranks)
    threshold: float
    epoch: int
    step: int  # global step at which the check fired
    checked: str  # what was measured: "steps A-B" (a rolling check) or "epoch E"
    worst_rank: Optional[int] = None  # with several ranks
    advice: list[str] = field(default_factory=list)
    trace_dir: Optional[str] = None  # the window captured after the alert, when one was

    @property
    def message(self) -> str:
        rank = f" on rank {self.worst_rank}, the worst of the ranks," if self.worst_rank is not None else ""
        where = self.checked if self.checked.startswith("epoch") else f"{self.checked} (epoch {self.epoch})"
        lines = [
            f"{self.ratio:.0%} of the training time of {where} was spent waiting for the DataLoader{rank} "
            f"(alert threshold {self.threshold:.0%})."
        ]
        lines += [f"  - {line}" for line in self.advice]
        if self.trace_dir:
            lines.append(f"  Trace of the steps after the alert: {self.trace_dir}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"message": self.message}


class DataWaitAlertError(RuntimeError):
    """Raised by ``PerformanceMonitor(alert_action="raise")``; the alert is in ``.alert``."""

    def __init__(self, alert: DataWaitAlert) -> None:
        super().__init__(alert.message)
        self.alert = alert


@dataclass
class AlertRule:
    """Patience and cooldown bookkeeping; :meth:`check` says whether this check starts an alert."""

    threshold: float = DEFAULT_THRESHOLD
    patience: int = 2
    cooldown: int = 1000
    streak: int = 0
    in_episode: bool = False
    last_alert_step: Optional[int] = None
    alerts: int = 0

    def check(self, ratio: float, step: int) -> bool:
        if ratio <= self.threshold:
            self.streak = 0
            self.in_episode = False
            return False
        self.streak += 1
        if self.in_episode or self.streak < self.patience:
            return False
        self.in_episode = True
        if self.last_alert_step is not None and step - self.last_alert_step < self.cooldown:
            return False  # a new episode too soon after the previous alert: stays silent
        self.last_alert_step = step
        self.alerts += 1
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"streak": self.streak, "in_episode": self.in_episode, "last_alert_step": self.last_alert_step,
                "alerts": self.alerts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("streak", "in_episode", "last_alert_step", "alerts"):
            if key in state:
                setattr(self, key, state[key])


def validate(threshold: Optional[float], window: int, patience: int, cooldown: int, action: str) -> None:
    """Raise ValueError naming the first bad alert argument."""
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 < threshold < 1):
        raise ValueError(f"`alert_threshold` must be a ratio between 0 and 1 (or None to turn alerts off), got {threshold!r}")
    for name, value, low in (("alert_window", window, 1), ("alert_patience", patience, 1), ("alert_cooldown", cooldown, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"`{name}` must be an integer >= {low}, got {value!r}")
    if action not in ACTIONS:
        raise ValueError(f"`alert_action` must be one of {', '.join(map(repr, ACTIONS))}, got {action!r}")


class CheckBlock:
    """Data wait and training time of the rolling check's current block of steps, from clock readings and
    the running total of fetch seconds. A block runs on across an epoch's end: what it had then is carried
    into the next epoch. Validation runs inside the block are left out of its training time."""

    def __init__(self) -> None:
        self.start(0.0, 0.0)

    def start(self, now: float, fetch_s: float, carry: tuple[float, float] = (0.0, 0.0)) -> None:
        """A new block from ``now``, when the fetch total is ``fetch_s``, holding ``carry`` already."""
        self.t0, self.fetch0, self.carry = now, fetch_s, carry

    def so_far(self, now: float, fetch_s: float, validation_spans: Sequence[tuple[float, float]]) -> tuple[float, float]:
        """(data wait, training time) of the block up to ``now``."""
        validation = sum(b - a for a, b in validation_spans if a >= self.t0)
        return self.carry[0] + fetch_s - self.fetch0, self.carry[1] + now - self.t0 - validation
