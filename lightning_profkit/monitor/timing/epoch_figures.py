"""Per-epoch figures from fetch timings and step times, and their reduction across ranks. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from lightning_profkit.figures import MB, HostFigures, percentile
from lightning_profkit.metric_names import EXCHANGED, LARGEST, PREFIX
from lightning_profkit.monitor.timing.fetch_timer import FetchStats

if TYPE_CHECKING:
    from lightning_profkit.monitor.alerting.checks import BlockFigures

def epoch_figures(fetch: FetchStats, epoch_start: float, epoch_end: float, validation_s: float,
                  batch_size: Optional[int], peak_memory_bytes: Optional[int], gpu_idle_ratio: Optional[float] = None,
                  startup_before_s: float = 0.0) -> dict[str, float]:
    """Figures of one epoch on one rank (docs/metrics.md); a figure that cannot be known is left out.
    ``startup_before_s``: the loader's start-up before ``epoch_start`` (epoch 0's, in Lightning's ``setup_data``)."""
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
        out["dataloader_startup_s"] = max(fetch.first_fetch - epoch_start, 0.0) + startup_before_s
    if validation_s > 0 and fetch.val_count:
        out["val_data_wait_ratio"] = fetch.val_s / validation_s
    if peak_memory_bytes is not None:
        out["peak_memory_mb"] = peak_memory_bytes / MB
    if gpu_idle_ratio is not None:
        out["gpu_idle_ratio"] = gpu_idle_ratio
    return out


def reduce_ranks(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """Every rank's epoch figures (by name, in rank order) to logged metrics: the mean over ranks that have a value
    (the maximum for ``LARGEST``); with several ranks also the data-wait maximum and the rank that has it."""
    out: dict[str, float] = {}
    for key in EXCHANGED:
        present = [row[key] for row in rows if key in row]
        if present:
            out[PREFIX + key] = max(present) if key in LARGEST else sum(present) / len(present)
    if len(rows) > 1:
        waits = [(row["data_wait_ratio"], rank) for rank, row in enumerate(rows) if "data_wait_ratio" in row]
        if waits:
            worst, rank = max(waits)
            out[PREFIX + "data_wait_ratio_max"] = worst
            out[PREFIX + "data_wait_worst_rank"] = float(rank)
    return out


def rolling_metrics(rows: Sequence[BlockFigures], steps: int) -> dict[str, float]:
    """Logged metrics of one rolling check, from the ranks' blocks of ``steps`` steps: ``profkit/rolling/
    data_wait_ratio`` and ``step_time_ms``, means over the ranks that trained, and with several ranks
    ``data_wait_ratio_max``, the check's own figure."""
    trained = [(row.wait_s, row.train_s) for row in rows if row.train_s > 0]
    if not trained:
        return {}
    ratios = [wait / train for wait, train in trained]
    out = {f"{PREFIX}rolling/data_wait_ratio": sum(ratios) / len(ratios),
           f"{PREFIX}rolling/step_time_ms": 1000 * sum(train for _, train in trained) / len(trained) / steps}
    if len(rows) > 1:
        out[f"{PREFIX}rolling/data_wait_ratio_max"] = max(ratios)
    return out


def window_metrics(figures: HostFigures, validation: bool = False) -> dict[str, float]:
    """Logged metrics of one profiled window: ``profkit/window/<name>`` (``profkit/val_window/<name>`` for a
    validation window) for each of its figures (:meth:`~lightning_profkit.figures.HostFigures.per_step`),
    leaving out CPU memory and calls that never blocked."""
    kind = "val_window" if validation else "window"
    return {
        f"{PREFIX}{kind}/{name}": value for name, value in figures.per_step().items()
        if not name.startswith("peak_memory_mb/0:") and not (name.startswith("sync_ms_per_step/") and not value)
    }

