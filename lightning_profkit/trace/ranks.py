"""Which rank holds the others back, and why: docs/profkit.md (Which rank is slow). Pure (no numpy): the callback
computes its rank's figures from its window summaries at the end of ``fit``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import median
from typing import Any, Optional, Sequence

from lightning_profkit.figures import HostFigures, percentile
from lightning_profkit.idle_causes import CAUSES, largest, share_name
from lightning_profkit.trace.headline import percent

# the parts of a step (torch-tb-profiler's categories) that are a rank's own work, and what each is called
PARTS = {"data": ("DataLoader",), "host": ("CpuOp", "Runtime", "Other"), "compute": ("Kernel", "Memcpy", "Memset")}
REASONS = {"data": "waits on data (the DataLoader)", "host": "spends more time on the host (CPU operators, launches)",
           "compute": "computes more (GPU kernels and copies)"}
SHORT_REASONS = {"data": "waits on data", "host": "spends more on the host", "compute": "computes more"}
BALANCED_SHARE = 0.05  # own work within this share of the step time of each other: no straggler


@dataclass(frozen=True)
class RankFigures:
    """A rank's means over its traces, per step in milliseconds (None: no GPU in its traces)."""

    rank: int
    traces: int
    step_time_ms: float
    own_ms_per_step: float  # the step less communication
    data_ms_per_step: float
    host_ms_per_step: float
    compute_ms_per_step: float
    communication_ms_per_step: float
    gpu_idle_share: Optional[float] = None
    blocking_sync_ms_per_step: Optional[float] = None
    gpu_idle_by_cause: Optional[dict[str, float]] = None  # the idle share by what the rank's process was doing

    @property
    def gpu_idle_largest(self) -> Optional[str]:
        """The cause of most of the rank's GPU idle time, with its share: ``data_wait 33.4%``."""
        cause = largest(self.gpu_idle_by_cause or {})
        return None if cause is None else f"{cause} {percent(self.gpu_idle_by_cause[cause])}"  # type: ignore[index]

    def part(self, name: str) -> float:
        return getattr(self, f"{name}_ms_per_step")


def rank_figures(summaries: Sequence[dict[str, Any]]) -> list[RankFigures]:
    """Each rank's figures from trace summaries (:func:`~lightning_profkit.trace.summary.summarize_trace`); traces
    without a rank or a step breakdown are left out."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for s in summaries:
        if s.get("rank") is not None and s.get("step_breakdown"):
            by_rank.setdefault(s["rank"], []).append(s)
    return [_figures(rank, traces) for rank, traces in sorted(by_rank.items())]


def _figures(rank: int, traces: list[dict[str, Any]]) -> RankFigures:
    def mean_ms(*roles: str) -> float:
        return sum(sum(t["step_breakdown"]["avg"][r] for r in roles) for t in traces) / len(traces) / 1000

    hosts = [HostFigures.from_json(t.get("host") or {}).per_step() for t in traces]

    def mean_of(key: str) -> Optional[float]:
        values = [h[key] for h in hosts if h.get(key) is not None]
        return sum(values) / len(values) if values else None

    step, communication = mean_ms("Total"), mean_ms("Communication")
    idle = {cause: share for cause in CAUSES if (share := mean_of(share_name(cause))) is not None}
    return RankFigures(rank, len(traces), step, step - communication, *(mean_ms(*roles) for roles in PARTS.values()),
                       communication, mean_of("gpu_idle_share"), mean_of("blocking_sync_ms_per_step"), idle or None)


@dataclass(frozen=True)
class Verdict:
    slowest: int
    fastest: int
    step_time_spread: float  # slowest / fastest step time
    own_time_spread: float  # most / least own work per step
    reason: Optional[str]  # a key of PARTS; None: the ranks are balanced
    excess_ms_per_step: float  # the slowest rank's lead in that part over the other ranks' median
    waiting: dict[int, float]  # rank: its communication per step beyond the slowest rank's, ms
    line: str
    own_ms_per_step: dict[str, float]  # the distribution over the ranks: median, p90, max
    outliers: dict[int, float]  # rank: its own work per step beyond the median, where it is outside the balance, ms

    @property
    def headline(self) -> str:
        """The verdict in one short line."""
        own = self.own_ms_per_step["max"]
        if self.reason is None:
            return f"no straggler: every rank's own work a step is within {100 * BALANCED_SHARE:.0f}% of the step time"
        return (f"straggler: rank {self.slowest}, {own:.2f} ms of own work a step ({self.own_time_spread:.2f}x rank "
                f"{self.fastest}): it {SHORT_REASONS[self.reason]}")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "headline": self.headline,
                "waiting": [{"rank": r, "extra_communication_ms_per_step": ms} for r, ms in self.waiting.items()],
                "outliers": [{"rank": r, "own_ms_per_step_over_median": ms} for r, ms in self.outliers.items()]}


NAMED_WAITING = 5  # the waiting ranks (and the outliers) the verdict line names, those that wait (or exceed) most


def named(ranks: dict[int, float]) -> str:
    """The ``NAMED_WAITING`` ranks with the most ms, and how many others (with their range): a line, not a list of a
    thousand ranks (all of them are in the JSON)."""
    most = sorted(ranks.items(), key=lambda kv: (-kv[1], kv[0]))
    names = ", ".join(f"{r} (+{ms:.2f} ms)" for r, ms in most[:NAMED_WAITING])
    if len(most) > NAMED_WAITING:
        rest = [ms for _, ms in most[NAMED_WAITING:]]
        names += f" and {len(rest)} more (+{min(rest):.2f} to +{max(rest):.2f} ms)"
    return f"rank{'s' if len(most) > 1 else ''} {names}"


def verdict(ranks: Sequence[RankFigures]) -> Optional[Verdict]:
    """The slowest rank and why, over two or more ranks; None for fewer."""
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r.own_ms_per_step)
    fast = min(ranks, key=lambda r: r.own_ms_per_step)
    others = [r for r in ranks if r is not slow]
    step_spread = max(r.step_time_ms for r in ranks) / max(min(r.step_time_ms for r in ranks), 1e-9)
    own_spread = slow.own_ms_per_step / max(fast.own_ms_per_step, 1e-9)
    excess = {name: slow.part(name) - median(r.part(name) for r in others) for name in PARTS}
    reason = max(excess, key=lambda name: excess[name])
    lead = slow.own_ms_per_step - fast.own_ms_per_step
    own = [r.own_ms_per_step for r in ranks]
    spread = {"median": median(own), "p90": percentile(own, 0.9), "max": max(own)}
    if lead < BALANCED_SHARE * slow.step_time_ms or excess[reason] <= 0:
        line = (f"no straggler: the ranks' own work per step is within {100 * BALANCED_SHARE:.0f}% of the step time "
                f"({fast.own_ms_per_step:.2f}-{slow.own_ms_per_step:.2f} ms; rank {slow.rank} has the most)")
        return Verdict(slow.rank, fast.rank, step_spread, own_spread, None, 0.0, {}, line, spread, {})
    outliers = {r.rank: r.own_ms_per_step - spread["median"] for r in ranks
                if r.own_ms_per_step - spread["median"] > BALANCED_SHARE * slow.step_time_ms}
    waiting = {r.rank: r.communication_ms_per_step - slow.communication_ms_per_step for r in others
               if r.communication_ms_per_step - slow.communication_ms_per_step > BALANCED_SHARE * slow.step_time_ms}
    line = (f"rank {slow.rank} is the slowest: {slow.own_ms_per_step:.2f} ms of its own work per step against "
            f"{fast.own_ms_per_step:.2f} ms on rank {fast.rank} ({own_spread:.2f}x); it {REASONS[reason]}, "
            f"{excess[reason]:+.2f} ms per step over the other ranks' median")
    line += (f"; own work per step over {len(ranks)} ranks: median {spread['median']:.2f}, p90 {spread['p90']:.2f}, "
             f"max {spread['max']:.2f} ms; above the median by more than {100 * BALANCED_SHARE:.0f}% of the step: "
             f"{named(outliers)}")
    if waiting:
        line += f"; waiting for it in communication each step: {named(waiting)}"
    return Verdict(slow.rank, fast.rank, step_spread, own_spread, reason, excess[reason], waiting, line, spread,
                   outliers)


SHOWN_RANKS = 16  # up to this many ranks each has a row in the terminal and the report; beyond, a few (see shown)


def ranks_to_show(section: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The per-rank rows of ``section`` (:func:`ranks_section`) to show and how many are left out: every rank up to
    ``SHOWN_RANKS``; beyond, the slowest, the outliers the verdict names, the median rank and the fastest (the JSON
    keeps every rank)."""
    rows = section["per_rank"]
    if len(rows) <= SHOWN_RANKS:
        return rows, 0
    found = section["verdict"]
    middle = sorted(rows, key=lambda r: r["own_ms_per_step"])[len(rows) // 2]["rank"]
    outliers = [o["rank"] for o in sorted(found.get("outliers", []), key=lambda o: -o["own_ms_per_step_over_median"])]
    wanted = {found["slowest"], *outliers[:NAMED_WAITING], middle, found["fastest"]}
    picked = sorted((r for r in rows if r["rank"] in wanted), key=lambda r: -r["own_ms_per_step"])
    return picked, len(rows) - len(picked)


def ranks_section(summaries: Sequence[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """``profkit summary``'s ``ranks``: per-rank figures and the verdict, when some window holds several ranks."""
    ranked = {(s.get("window") or "", s["rank"]) for s in summaries if s.get("rank") is not None}
    if len(ranked) == len({window for window, _ in ranked}):  # no window holds several ranks
        return None
    figures = rank_figures(summaries)
    found = verdict(figures)
    if found is None:
        return None
    return {"per_rank": [asdict(f) for f in figures], "verdict": found.to_json()}
