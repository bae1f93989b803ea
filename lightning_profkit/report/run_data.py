"""What a run left on disk, for its report: the per-epoch ``profkit/`` metrics and the alerts, from the
logger's files (CSVLogger's ``metrics.csv`` or TensorBoard event files, whichever the run has)."""

from __future__ import annotations

import csv
import glob
import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_profkit.metric_names import PREFIX

EPOCH_METRICS = ("data_wait_ratio", "gpu_idle_ratio", "step_time_ms_mean", "step_time_ms_p90", "data_wait_alert",
                 "data_wait_alerts", "data_wait_ratio_max", "data_wait_worst_rank")
ALERT_TAG = "profkit/alerts/text_summary"  # what add_text("profkit/alerts") writes


@dataclass
class Epoch:
    """One epoch's logged figures (None where the run did not log one: GPU idle on CPU, for instance)."""

    epoch: int
    step: int
    data_wait_ratio: Optional[float] = None
    gpu_idle_ratio: Optional[float] = None
    step_time_ms_mean: Optional[float] = None
    step_time_ms_p90: Optional[float] = None
    data_wait_alert: Optional[float] = None
    data_wait_alerts: Optional[float] = None  # the fit's alerts so far
    data_wait_ratio_max: Optional[float] = None  # with several ranks: the worst rank's, the figure alerts read
    data_wait_worst_rank: Optional[float] = None


@dataclass
class Alert:
    step: int
    markdown: str  # as TensorBoard's Text tab shows it


@dataclass
class RunData:
    source: Optional[str]  # the file the metrics came from
    epochs: list[Epoch] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)

    @property
    def alert_count(self) -> int:
        """The alerts: their texts (TensorBoard), else the fit's count of them, else (runs logged before the count)
        the episodes, runs of epochs flagged one after the other."""
        counts = [e.data_wait_alerts for e in self.epochs if e.data_wait_alerts is not None]
        if self.alerts or counts:
            return len(self.alerts) or int(max(counts))
        flags = [bool(e.data_wait_alert) for e in self.epochs]
        return sum(1 for i, f in enumerate(flags) if f and (i == 0 or not flags[i - 1]))


def _number(text: Any) -> Optional[float]:
    """A finite number from a logger's file, or None (absent, empty, NaN or infinite)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def from_csv(path: str) -> RunData:
    """Epochs from a CSVLogger's ``metrics.csv``: the rows that carry ``profkit/data_wait_ratio``."""
    data = RunData(path)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            ratio = _number(row.get(PREFIX + "data_wait_ratio", ""))
            if ratio is None:
                continue
            values = {k: _number(row.get(PREFIX + k, "")) for k in EPOCH_METRICS}
            epoch = _number(row.get("epoch", ""))
            data.epochs.append(Epoch(int(epoch) if epoch is not None else len(data.epochs),
                                     int(_number(row.get("step", "")) or 0), **values))
    return data


def from_events(folder: str) -> RunData:
    """Epochs and alerts from the TensorBoard event files in ``folder``."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    events = ea.EventAccumulator(folder, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    events.Reload()
    tags = events.Tags()
    scalars = {t: {e.step: e.value for e in events.Scalars(t)} for t in tags.get("scalars", []) if t.startswith(PREFIX)}
    # `epoch` is logged by every stage (a test run after the fit too, at the fit's last step): ours is the one
    # written with our figures, the nearest in time at the same step
    epochs: dict[int, list] = {}
    for e in events.Scalars("epoch") if "epoch" in tags.get("scalars", []) else []:
        epochs.setdefault(e.step, []).append(e)
    data = RunData(folder)
    ratio = PREFIX + "data_wait_ratio"
    ours = {e.step: e for e in events.Scalars(ratio)} if ratio in scalars else {}  # the last one of a step
    for k, step in enumerate(sorted(ours)):
        values = {m: _number(scalars.get(PREFIX + m, {}).get(step)) for m in EPOCH_METRICS}
        if values["data_wait_ratio"] is None:  # not a number: no epoch of ours, as in a CSV file
            continue
        same = epochs.get(step)
        epoch = _number(min(same, key=lambda e: abs(e.wall_time - ours[step].wall_time)).value) if same else None
        data.epochs.append(Epoch(k if epoch is None else int(epoch), step, **values))
    if ALERT_TAG in tags.get("tensors", []):
        for e in events.Tensors(ALERT_TAG):
            text = e.tensor_proto.string_val[0].decode("utf-8", "replace") if e.tensor_proto.string_val else ""
            data.alerts.append(Alert(e.step, text))
    return data


def read_run(run_dir: str) -> RunData:
    """The run's metrics: TensorBoard event files where there are any (they also hold the alerts), else
    ``metrics.csv``; an empty RunData for a run that logged neither."""
    if glob.glob(os.path.join(glob.escape(run_dir), "events.out.tfevents.*")):
        return from_events(run_dir)
    path = os.path.join(run_dir, "metrics.csv")
    return from_csv(path) if os.path.isfile(path) else RunData(None)
