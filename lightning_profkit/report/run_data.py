"""What a run left on disk, for its report: the per-epoch ``profkit/`` metrics and the alerts, from the
logger's files (CSVLogger's ``metrics.csv`` or TensorBoard event files, whichever the run has)."""

from __future__ import annotations

import csv
import glob
import io
import itertools
import math
import os
import struct
from dataclasses import dataclass, field, fields
from typing import Any, Iterator, Optional

from google.protobuf.message import DecodeError

from lightning_profkit.metric_names import PREFIX
from lightning_profkit.opener import FileRefused, open_regular, read_regular

ALERT_TAG = "profkit/alerts/text_summary"  # what add_text("profkit/alerts") writes


@dataclass(slots=True)
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


EPOCH_METRICS = tuple(f.name for f in fields(Epoch))[2:]  # each logged as profkit/<name>

@dataclass
class Alert:
    step: int
    markdown: str  # as TensorBoard's Text tab shows it


@dataclass
class RunData:
    source: Optional[str]  # the file the metrics came from
    epochs: list[Epoch] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # a line for each file that could not be read: its path, why

    @property
    def alert_count(self) -> int:
        """The alerts: their texts (TensorBoard), else the fit's count, else (older runs) the runs of flagged epochs."""
        counts = [e.data_wait_alerts for e in self.epochs if e.data_wait_alerts is not None]
        if self.alerts or counts:
            return len(self.alerts) or int(max(counts))
        return sum(1 for flagged, _ in itertools.groupby(bool(e.data_wait_alert) for e in self.epochs) if flagged)


def _number(text: Any) -> Optional[float]:
    """A finite number from a logger's file, or None (absent, empty, NaN or infinite)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and abs(value) <= LARGEST else None


LARGEST = 1e15  # a logged figure beyond this is none a fit logs (a ratio, ms, s): absent, as NaN is
METRICS_BYTES = 16 * 10**6  # a CSVLogger's metrics.csv read at most (a row every 50 steps of 4 million steps)
MOST_EPOCHS = 100_000  # epochs read from a logger's files at most, the first ones
EVENTS_BYTES = 10 * 10**6  # a TensorBoard event file read at most (5 values every 50 steps of 1.5 million steps)
_RECORD = struct.Struct("<Q")
_OUR_TAGS = PREFIX.encode()


def from_csv(path: str) -> RunData:
    """Epochs from a CSVLogger's ``metrics.csv``: the rows that carry ``profkit/data_wait_ratio``."""
    data = RunData(path)
    with io.TextIOWrapper(open_regular(path, METRICS_BYTES), newline="", errors="replace") as f:
        rows = csv.reader(f)
        column = {name: i for i, name in enumerate(next(rows, []))}
        wanted = [column.get(name, -1) for name in ("epoch", "step", *(PREFIX + k for k in EPOCH_METRICS))]
        ratio = wanted[2]
        if ratio < 0:
            return data
        for row in rows:
            if len(row) <= ratio or not row[ratio]:  # the user's own rows: no ratio of ours
                continue
            epoch, step, *values = [_number(row[i]) if 0 <= i < len(row) else None for i in wanted]
            if values[0] is None:
                continue
            if len(data.epochs) == MOST_EPOCHS:
                data.left_out.append(f"{path}: the epochs after the first {MOST_EPOCHS:,}")
                break
            data.epochs.append(Epoch(int(epoch) if epoch is not None else len(data.epochs), int(step or 0), *values))
    return data


def _value(value: Any) -> Optional[float]:
    """A summary value's number (a scalar, or a scalar tensor of floats), or None."""
    if value.HasField("simple_value"):
        return value.simple_value
    tensor = value.tensor
    return (list(tensor.float_val) or list(tensor.double_val) or [None])[0]


def _events_of_ours(text: bytes) -> Iterator[Any]:
    """The events of the TensorBoard event file ``text`` that name our metrics or the epoch, the others not decoded;
    a record cut short at the end (a file still being written) is left out."""
    from tensorboard.compat.proto.event_pb2 import Event

    at = 0
    while at + 12 <= len(text):  # TFRecord: length (8 bytes), its CRC (4), the record, its CRC (4)
        start = at + 12
        end = start + _RECORD.unpack_from(text, at)[0]
        at = end + 4
        if at > len(text):
            return
        if text.find(_OUR_TAGS, start, end) >= 0 or text.find(b"epoch", start, end) >= 0:
            yield Event.FromString(text[start:end])


def from_events(folder: str, files: list[str]) -> RunData:
    """Epochs and alerts from the TensorBoard event ``files`` in ``folder``, read in order (one that is not read is
    named in ``left_out``)."""
    data = RunData(folder)
    scalars: dict[str, dict[int, tuple[float, float]]] = {}  # tag: step: (wall time, value), the last of a step
    epochs: dict[int, list[tuple[float, float]]] = {}  # step: (wall time, value), each logged
    for path in files:
        try:
            for event in _events_of_ours(read_regular(path, EVENTS_BYTES)):
                for value in event.summary.value:
                    if value.tag == ALERT_TAG and value.tensor.string_val:
                        data.alerts.append(Alert(event.step, value.tensor.string_val[0].decode("utf-8", "replace")))
                    elif value.tag == "epoch" and (number := _value(value)) is not None:
                        epochs.setdefault(event.step, []).append((event.wall_time, number))
                    elif value.tag.startswith(PREFIX) and (number := _value(value)) is not None:
                        scalars.setdefault(value.tag, {})[event.step] = (event.wall_time, number)
        except FileRefused as err:
            data.left_out.append(str(err))
        except OSError as err:
            data.left_out.append(f"{path}: {err.strerror or err}")
        except DecodeError:  # protobuf's: a record that is not an event
            data.left_out.append(f"{path}: not a TensorBoard event file (a record that is not an event)")
    # `epoch` is logged by every stage (a test run after the fit too, at the fit's last step): ours is the one
    # written with our figures, the nearest in time at the same step
    ours = scalars.get(PREFIX + "data_wait_ratio", {})
    if len(ours) > MOST_EPOCHS:
        data.left_out.append(f"{folder}: the epochs after the first {MOST_EPOCHS:,}")
    tables = [scalars.get(PREFIX + m, {}) for m in EPOCH_METRICS]
    for k, step in enumerate(sorted(ours)[:MOST_EPOCHS]):
        values = [_number(table[step][1]) if step in table else None for table in tables]
        if values[0] is None:  # not a number: no epoch of ours, as in a CSV file
            continue
        same = epochs.get(step)
        epoch = _number(min(same, key=lambda e: abs(e[0] - ours[step][0]))[1]) if same else None
        data.epochs.append(Epoch(k if epoch is None else int(epoch), step, *values))
    return data


def read_run(run_dir: str) -> RunData:
    """The run's metrics: from its TensorBoard event files (they also hold the alerts), else ``metrics.csv``; a file
    that cannot be read is named in ``left_out``."""
    files = sorted(glob.glob(os.path.join(glob.escape(run_dir), "events.out.tfevents.*")))
    if files:
        return from_events(run_dir, files)
    path = os.path.join(run_dir, "metrics.csv")
    if not os.path.lexists(path):
        return RunData(None)
    try:
        return from_csv(path)
    except FileRefused as err:
        return RunData(None, left_out=[str(err)])
    except OSError as err:
        return RunData(None, left_out=[f"{path}: {err.strerror or err}"])
    except csv.Error as err:  # a field over the csv module's limit, a NUL byte
        return RunData(None, left_out=[f"{path}: not a CSVLogger's metrics file ({err})"])
