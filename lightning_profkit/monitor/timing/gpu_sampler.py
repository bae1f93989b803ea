"""Whole-epoch GPU idle, ``1 - mean utilization`` of NVML's samples, which :class:`UtilizationSampler` drains about
once a second on a background thread. No other clock is compared with NVML's: an epoch's boundaries are *marks*, the
newest sample's own timestamp. What the figure says: docs/metrics.md (GPU idle, two ways)."""

from __future__ import annotations

import threading
from array import array
from typing import Callable, Optional, Sequence

# read(after) -> samples (timestamp in NVML's clock, utilization in percent) newer than ``after``
SampleReader = Callable[[int], Sequence[tuple[int, float]]]


class UtilizationSampler:
    """Polls ``read`` every ``period_s`` on a daemon thread and keeps the samples since :meth:`clear`."""

    def __init__(self, read: SampleReader, period_s: float = 1.0) -> None:
        self._read = read
        self._period = period_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last = 0  # the newest sample's timestamp seen so far, in NVML's clock
        self.timestamps = array("d")
        self.values = array("d")
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="profkit-nvml", daemon=True)

    def start(self) -> "UtilizationSampler":
        """Skip what the driver buffered before now, then sample on the thread."""
        self.clear()
        self._thread.start()
        return self

    def mark(self) -> float:
        """Now, in NVML's clock: the newest sample's timestamp, after reading what is buffered."""
        if self.error is None:
            try:
                self.poll()
            except Exception as err:  # the figure is left out; the caller may say why
                self.error = err
        return float(self._last)

    def clear(self) -> float:
        """Forget the samples taken so far (at an epoch start); returns :meth:`mark`."""
        now = self.mark()
        with self._lock:
            self.timestamps = array("d")
            self.values = array("d")
        return now

    def poll(self) -> None:
        """Read the samples the driver has buffered since the previous poll."""
        with self._lock:
            for ts, value in self._read(self._last):
                if ts > self._last:
                    self._last = ts
                self.timestamps.append(ts)
                self.values.append(value)

    def idle_ratio(self, start: float, end: float, excluded: Sequence[tuple[float, float]] = ()) -> Optional[float]:
        """``1 - mean(utilization)/100`` over the samples between marks ``start`` and ``end`` (``(start, end]``)
        outside the ``(lo, hi]`` intervals in ``excluded`` (validation runs inside the epoch); None when no sample
        falls there."""
        with self._lock:
            kept = [value for ts, value in zip(self.timestamps, self.values)
                    if start < ts <= end and not any(lo < ts <= hi for lo, hi in excluded)]
        if not kept:
            return None
        return min(max(1.0 - sum(kept) / len(kept) / 100.0, 0.0), 1.0)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self.poll()
            except Exception as err:  # NVML gone (driver reset, device lost): stop sampling
                self.error = err
                return


def nvml_reader(uuid: str) -> tuple[Optional[SampleReader], str]:
    """An NVML utilization reader for the CUDA device with this UUID (``torch.cuda.get_device_properties(d).uuid``),
    or None and why. The UUID names the same GPU to CUDA and to NVML whatever ``CUDA_VISIBLE_DEVICES``,
    ``CUDA_DEVICE_ORDER`` or MIG do to their numbering; a device NVML cannot find by it is not sampled."""
    try:
        import pynvml
    except ImportError:
        return None, "install nvidia-ml-py (pip install nvidia-ml-py) for the epoch-wide GPU idle ratio"
    try:
        pynvml.nvmlInit()
    except Exception as err:
        return None, f"NVML is not usable ({err}); the epoch-wide GPU idle ratio is not logged"
    names = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]
    handle, errors = None, []
    for name in names:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(name)
            break
        except Exception as err:
            errors.append(f"{name}: {err}")
    if handle is None:
        return None, f"NVML finds no device with this GPU's UUID ({'; '.join(errors)}); the epoch-wide GPU idle ratio is not logged"

    def read(after: int) -> list[tuple[int, float]]:
        try:
            _, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, after)
        except pynvml.NVMLError_NotFound:  # no sample newer than ``after`` yet
            return []
        return [(s.timeStamp, s.sampleValue.uiVal) for s in samples]

    return read, ""
