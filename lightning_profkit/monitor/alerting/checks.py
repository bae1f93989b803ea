"""The rolling data-wait checks: each block's figures, and when they make an alert (docs/alerts.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

# TensorFlow's input-pipeline analyzer calls a step "highly input-bound" above 20% of its time waiting
# for input; torch-tb-profiler suggests more workers from 5%, which ordinary well-fed loaders reach.
DEFAULT_ALERT_THRESHOLD = 0.2


@dataclass(frozen=True)
class BlockFigures:
    """One rank's figures for a rolling check, as exchanged across ranks."""

    wait_s: float  # data wait in the block
    train_s: float  # training time in the block
    requested: float  # capture steps asked for from outside (0: none)


@dataclass
class AlertRule:
    """Patience and cooldown bookkeeping; :meth:`check` says whether this check starts an alert."""

    threshold: float
    patience: int
    cooldown: int
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

    SAVED = ("streak", "in_episode", "last_alert_step", "alerts")  # what a checkpoint keeps

    def state_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.SAVED}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in self.SAVED:
            if key in state:
                setattr(self, key, state[key])


class RollingChecks:
    """One callback's rolling checks: when the next is due, its block, the alert rule, the capture budget and the
    steps asked for from outside; a state loaded before a fit starts is applied when it does."""

    def __init__(self, threshold: Optional[float], patience: int, cooldown: int, window: int, max_captures: int) -> None:
        self.threshold, self.patience, self.cooldown = threshold, patience, cooldown
        self.window, self.max_captures = window, max_captures
        self.rule: Optional[AlertRule] = None
        self.captures_left = max_captures
        self.check_at = float("inf")  # the step at whose end the next check runs (inf: before the first epoch)
        # the block: its figures before this epoch's part, and where that part began (time, the epoch's fetch total)
        self.carry, self.t0, self.fetch0 = (0.0, 0.0), 0.0, 0.0
        # (first step, epoch, the step of its batch 0) of the epochs since the block began
        self.epochs: list[tuple[int, int, int]] = []
        self.requested = 0  # steps asked for from outside, for the next exchange
        self.episode_in_epoch = False
        self.fitting = False
        self._resume: Optional[dict[str, Any]] = None

    def start_fit(self) -> None:
        self.rule = AlertRule(self.threshold, self.patience, self.cooldown) if self.threshold else None
        self.captures_left = self.max_captures
        self.check_at, self.carry, self.requested = float("inf"), (0.0, 0.0), 0
        self.epochs = []
        self.fitting = True
        self._apply_resume()

    def end_fit(self) -> None:
        self.fitting = False

    def state_dict(self) -> dict[str, Any]:
        return {"alert": self.rule.state_dict() if self.rule is not None else None, "captures_left": self.captures_left}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resume = dict(state)
        if self.fitting:  # the fit has started (strategies that restore after setup)
            self._apply_resume()

    def _apply_resume(self) -> None:
        state, self._resume = self._resume or {}, None
        if self.rule is not None and state.get("alert"):
            self.rule.load_state_dict(state["alert"])
        if isinstance(state.get("captures_left"), int):
            self.captures_left = state["captures_left"]

    def epoch_start(self, now: float, first_step: int, epoch: int, offset: Optional[int] = None) -> None:
        """Epoch ``epoch`` begins at ``first_step``; ``offset``: the step of its batch 0 (``first_step`` unless it
        resumes inside the epoch)."""
        self.t0, self.fetch0 = now, 0.0  # the fit restarts its fetch timer here; a block runs on across epochs
        if self.check_at == float("inf"):
            self.check_at = first_step + self.window - 1
        self.epochs.append((first_step, epoch, first_step if offset is None else offset))
        self.episode_in_epoch = False

    def epoch_end(self, now: float, fetch_s: float, validation_spans: Sequence[tuple[float, float]]) -> None:
        self.carry = self._so_far(now, fetch_s, validation_spans)

    def _so_far(self, now: float, fetch_s: float, spans: Sequence[tuple[float, float]]) -> tuple[float, float]:
        """(data wait, training time) of the block up to ``now``, validation runs left out."""
        validation = sum(b - a for a, b in spans if a >= self.t0)
        return self.carry[0] + fetch_s - self.fetch0, self.carry[1] + now - self.t0 - validation

    def due(self, step: int) -> bool:
        return step >= self.check_at

    def take_block(self, now: float, fetch_s: float, validation_spans: Sequence[tuple[float, float]],
                   step: int) -> BlockFigures:
        """This rank's figures for the check at ``step``, and a new block from ``now``."""
        fetch, train = self._so_far(now, fetch_s, validation_spans)
        self.carry, self.t0, self.fetch0 = (0.0, 0.0), now, fetch_s
        self.check_at = step + self.window
        self.epochs = self.epochs[-1:]  # the epoch the next block begins in (or one that starts after it)
        requested, self.requested = self.requested, 0
        return BlockFigures(fetch, train, float(requested))

    def span(self, step: int) -> str:
        """What the check at ``step`` measures, before :meth:`take_block`, by epoch and batch in it: "epoch 1,
        batches 20-39", or "epoch 0 batch 30 to epoch 1 batch 9"."""
        first = int(self.check_at) - self.window + 1  # each block is `window` steps, ending at check_at
        # the epochs holding a step of first..step: those starting by `step`, less those before the one holding `first`
        starts = [(s, e, o) for s, e, o in self.epochs if s <= step]
        inside = [(e, o) for i, (s, e, o) in enumerate(starts) if i + 1 == len(starts) or starts[i + 1][0] > first]
        if not inside:
            return f"the fit's steps {first}-{step}"
        (epoch, offset), (last_epoch, last_offset) = inside[0], inside[-1]
        a, b = max(first - offset, 0), step - last_offset
        if epoch == last_epoch:
            return f"epoch {epoch}, batches {a}-{b}"
        return f"epoch {epoch} batch {a} to epoch {last_epoch} batch {b}"

    @staticmethod
    def worst(rows: Sequence[BlockFigures]) -> Optional[tuple[float, int]]:
        """The highest data-wait ratio among the ranks' blocks, and its rank; None when no rank trained."""
        ratios = [(row.wait_s / row.train_s, rank) for rank, row in enumerate(rows) if row.train_s > 0]
        return max(ratios) if ratios else None

    def judge(self, ratio: float, step: int) -> bool:
        """Feed one check to the rule (the fit judges only where alerts are on); True when it starts an alert."""
        assert self.rule is not None
        fired = self.rule.check(ratio, step)
        self.episode_in_epoch |= self.rule.in_episode
        return fired

    def spend_capture(self) -> bool:
        """Take one window from the capture budget; False when it is spent."""
        if self.captures_left <= 0:
            return False
        self.captures_left -= 1
        return True
