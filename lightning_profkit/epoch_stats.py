"""Per-epoch figures from fetch timings and step times, and their reduction across ranks. Pure."""

from __future__ import annotations

import math
from typing import Optional, Sequence

from lightning_profkit.fetch_timer import FetchStats

PREFIX = "profkit/"
# the order of values exchanged between ranks; every rank sends all of them (NaN = absent)
EPOCH_KEYS = (
    "data_wait_ratio",
    "data_wait_s",
    "train_s",
    "step_time_ms_mean",
    "step_time_ms_p90",
    "dataloader_startup_s",
    "samples_per_s",
    "val_data_wait_ratio",
    "peak_memory_mb",
    "gpu_idle_ratio",
)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (as numpy's default) of a non-empty sequence."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def epoch_figures(
    fetch: FetchStats,
    epoch_start: float,
    epoch_end: float,
    validation_s: float,
    batch_size: Optional[int],
    peak_memory_bytes: Optional[int],
    gpu_idle_ratio: Optional[float] = None,
) -> dict[str, float]:
    """Figures of one epoch on one rank; a figure that cannot be known is left out.

    Training time is the epoch's wall time less the validation runs inside it; the data-wait ratio is the
    time spent inside the DataLoader's ``next()`` over that training time.
    """
    train_s = max(epoch_end - epoch_start - validation_s, 0.0)
    out: dict[str, float] = {"train_s": train_s, "data_wait_s": fetch.train_s}
    if train_s > 0:
        out["data_wait_ratio"] = fetch.train_s / train_s
        if batch_size and fetch.train_count:
            out["samples_per_s"] = fetch.train_count * batch_size / train_s
    step_times = fetch.step_times
    if step_times:
        out["step_time_ms_mean"] = 1000 * sum(step_times) / len(step_times)
        out["step_time_ms_p90"] = 1000 * percentile(step_times, 0.9)
    if fetch.first_fetch is not None:
        out["dataloader_startup_s"] = max(fetch.first_fetch - epoch_start, 0.0)
    if validation_s > 0 and fetch.val_count:
        out["val_data_wait_ratio"] = fetch.val_s / validation_s
    if peak_memory_bytes is not None:
        out["peak_memory_mb"] = peak_memory_bytes / 2**20
    if gpu_idle_ratio is not None:
        out["gpu_idle_ratio"] = gpu_idle_ratio
    return out


def to_vector(figures: dict[str, float]) -> list[float]:
    return [figures.get(k, math.nan) for k in EPOCH_KEYS]


# reduced by the maximum over ranks, not the mean: the rank that runs out of memory is the one with the most
MAX_KEYS = frozenset({"peak_memory_mb"})


def reduce_ranks(rows: Sequence[Sequence[float]]) -> dict[str, float]:
    """Per-rank vectors (``EPOCH_KEYS`` order) to logged metrics: the mean over ranks that have a value
    (the maximum for ``MAX_KEYS``); with several ranks also the data-wait maximum and the rank that has it."""
    out: dict[str, float] = {}
    for i, key in enumerate(EPOCH_KEYS):
        present = [row[i] for row in rows if not math.isnan(row[i])]
        if present:
            out[PREFIX + key] = max(present) if key in MAX_KEYS else sum(present) / len(present)
    if len(rows) > 1:
        waits = [(row[0], rank) for rank, row in enumerate(rows) if not math.isnan(row[0])]
        if waits:
            worst, rank = max(waits)
            out[PREFIX + "data_wait_ratio_max"] = worst
            out[PREFIX + "data_wait_worst_rank"] = float(rank)
    return out


def window_metrics(figures: dict) -> dict[str, float]:
    """Logged metrics of one profiled window (from :func:`trace_metrics.window_figures`)."""
    out: dict[str, float] = {}
    if "dataloader_frac" in figures:
        out[PREFIX + "window/data_wait_share"] = figures["dataloader_frac"]
        out[PREFIX + "window/blocking_sync_ms"] = figures["blocking_sync_calls_us_in_steps"] / 1000
        out[PREFIX + "window/step_time_ms"] = figures["host_step_time_us"] / 1000 / max(figures["n_host_steps"], 1)
    if "gpu_idle_frac_window" in figures:
        out[PREFIX + "window/gpu_idle_ratio"] = figures["gpu_idle_frac_window"]
    for device, peak in figures.get("peak_memory_bytes", {}).items():
        if not device.startswith("0:"):  # device type 0 is the CPU
            out[PREFIX + f"window/peak_memory_mb/{device}"] = peak["Total Allocated"] / 2**20
    for name, us in figures.get("blocking_sync_us_by_name", {}).items():
        if us:
            out[PREFIX + f"window/sync_ms/{name}"] = us / 1000
    return out
