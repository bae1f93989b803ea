"""Whole-epoch GPU idle from NVML utilization samples, collected on a background thread.

NVML's "GPU utilization" sample is the share of a short sampling period (1/6 s to 1 s, depending on
the product) during which at least one kernel was running. The driver keeps a small buffer of recent
samples; :class:`UtilizationSampler` drains it about once a second, away from the training thread,
and :func:`idle_ratio` turns the samples of an epoch into ``1 - mean utilization``. It is a sampled
figure: it says how often the GPU had *no* kernel running, not how busy the kernels kept it, and
periods shorter than NVML's sampling period are blurred. The profiled windows give the exact figure.
"""

from __future__ import annotations

import threading
import time
from array import array
from typing import Callable, Optional, Sequence

# read(after_us) -> samples (timestamp in µs of wall-clock time, utilization in percent) newer than after_us
SampleReader = Callable[[int], Sequence[tuple[int, float]]]


def idle_ratio(
    timestamps: Sequence[float], values: Sequence[float], start_us: float, end_us: float,
    excluded: Sequence[tuple[float, float]] = (),
) -> Optional[float]:
    """``1 - mean(utilization)/100`` over the samples in ``[start_us, end_us]`` outside ``excluded``
    intervals (validation runs inside the epoch); None when no sample falls there."""
    total, count = 0.0, 0
    for ts, value in zip(timestamps, values):
        if start_us <= ts <= end_us and not any(lo <= ts <= hi for lo, hi in excluded):
            total += value
            count += 1
    if not count:
        return None
    return min(max(1.0 - total / count / 100.0, 0.0), 1.0)


def now_us() -> float:
    """Wall-clock time in µs, the clock NVML stamps its samples with."""
    return time.time() * 1e6


class UtilizationSampler:
    """Polls ``read`` every ``period_s`` on a daemon thread and keeps the samples since :meth:`clear`."""

    def __init__(self, read: SampleReader, period_s: float = 1.0) -> None:
        self._read = read
        self._period = period_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last = 0
        self.timestamps = array("d")
        self.values = array("d")
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="profkit-nvml", daemon=True)

    def start(self) -> "UtilizationSampler":
        self._last = int(now_us())
        self._thread.start()
        return self

    def clear(self) -> None:
        """Forget the samples taken so far (at an epoch start)."""
        with self._lock:
            self.timestamps = array("d")
            self.values = array("d")

    def poll(self) -> None:
        """Read the samples the driver has buffered since the previous poll."""
        with self._lock:
            for ts, value in self._read(self._last):
                if ts > self._last:
                    self._last = ts
                self.timestamps.append(ts)
                self.values.append(value)

    def idle_ratio(self, start_us: float, end_us: float, excluded: Sequence[tuple[float, float]] = ()) -> Optional[float]:
        """Poll once more, then the idle ratio of ``[start_us, end_us]`` (see :func:`idle_ratio`)."""
        if self.error is None:
            try:
                self.poll()
            except Exception as err:  # the figure is left out; the caller may say why
                self.error = err
        with self._lock:
            return idle_ratio(self.timestamps, self.values, start_us, end_us, excluded)

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


def nvml_reader(device_index: int) -> tuple[Optional[SampleReader], str]:
    """An NVML utilization reader for CUDA device ``device_index`` (as torch numbers it), or None and why."""
    try:
        import pynvml
    except ImportError:
        return None, "install nvidia-ml-py (`pip install lightning_profkit[nvml]`) for the epoch-wide GPU idle ratio"
    try:
        pynvml.nvmlInit()
        try:
            import torch.cuda

            index = torch.cuda._get_nvml_device_index(device_index)  # honours CUDA_VISIBLE_DEVICES
        except Exception:
            index = device_index
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as err:
        return None, f"NVML is not usable ({err}); the epoch-wide GPU idle ratio is not logged"

    def read(after_us: int) -> list[tuple[int, float]]:
        try:
            _, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, after_us)
        except pynvml.NVMLError_NotFound:  # no sample newer than after_us yet
            return []
        return [(s.timeStamp, s.sampleValue.uiVal) for s in samples]

    return read, ""
