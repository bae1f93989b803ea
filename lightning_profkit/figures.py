"""A profiled window's host-step figures, named by their unit (``_us``, ``_ms``, ``_share``, ``_bytes``, ``_mb``),
shared by both sides of the package (imports no numpy, no torch). Definitions: docs/metrics.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Sequence

from lightning_profkit.idle_causes import share_name

MB = 10**6  # bytes: the MB of every figure and argument named *_mb


@dataclass(frozen=True)
class MemoryPeak:
    allocated_bytes: int
    reserved_bytes: int


@dataclass(frozen=True)
class HostFigures:
    """A window's figures; a figure the trace cannot support is None (no steps, no GPU activity)."""

    steps: int = 0  # host ProfilerStep spans
    step_time_us: Optional[float] = None  # their summed duration
    data_wait_us: Optional[float] = None
    data_wait_share: Optional[float] = None
    blocking_sync_us: Optional[float] = None
    blocking_sync_share: Optional[float] = None
    blocking_sync_us_by_call: dict[str, float] = field(default_factory=dict)
    gpu_busy_share: Optional[float] = None
    gpu_idle_share: Optional[float] = None
    # the idle share by what the training process was doing (idle_causes.CAUSES): they sum to gpu_idle_share
    gpu_idle_by_cause: dict[str, float] = field(default_factory=dict)
    peak_memory: dict[str, MemoryPeak] = field(default_factory=dict)  # per device "type:id"

    def per_step(self) -> dict[str, float]:
        """The flat figures that windows and runs are compared by, under the names the logged window metrics
        (``profkit/window/<name>``) and ``profkit``'s tables use; those the trace cannot support are left out."""
        out: dict[str, float] = {}
        if self.steps and self.step_time_us is not None:
            out["host_step_ms"] = self.step_time_us / self.steps / 1000
            out["data_wait_share"] = self.data_wait_share or 0.0
        if self.steps and self.blocking_sync_us is not None:
            out["blocking_sync_ms_per_step"] = self.blocking_sync_us / self.steps / 1000
            for call, us in self.blocking_sync_us_by_call.items():
                out[f"sync_ms_per_step/{call}"] = us / self.steps / 1000
        if self.gpu_idle_share is not None:
            out["gpu_idle_share"] = self.gpu_idle_share
        out.update((share_name(cause), share) for cause, share in self.gpu_idle_by_cause.items())
        for device, peak in self.peak_memory.items():
            out[f"peak_memory_mb/{device}"] = peak.allocated_bytes / MB
        return out

    def to_json(self) -> dict[str, Any]:
        """As JSON values (``dataclasses.asdict`` without its deep copies: a trace may name many devices)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["blocking_sync_us_by_call"] = dict(self.blocking_sync_us_by_call)
        out["gpu_idle_by_cause"] = dict(self.gpu_idle_by_cause)
        out["peak_memory"] = {device: dict(vars(peak)) for device, peak in self.peak_memory.items()}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "HostFigures":
        peaks = {device: MemoryPeak(**peak) for device, peak in (data.get("peak_memory") or {}).items()}
        return cls(**{**data, "peak_memory": peaks})


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of a non-empty sequence, interpolated as numpy's default: the one definition of the
    epoch's p90 step time and the ranks' p90 (numpy's first quantile imports numpy.ma: 10 ms in a fit)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
