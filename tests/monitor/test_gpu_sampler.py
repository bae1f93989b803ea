"""NVML sampling: the idle-ratio arithmetic, the background thread, and NVML's absence on this machine."""

import time

import pynvml
import pytest

from lightning_profkit.monitor.timing.gpu_sampler import UtilizationSampler, nvml_reader


def test_idle_ratio_over_the_epoch_leaves_out_validation():
    sampler = UtilizationSampler(lambda after: [(10, 100), (20, 50), (30, 0), (40, 0), (50, 100), (60, 100)])
    sampler.poll()  # the samples read, no thread started
    assert sampler.idle_ratio(0, 60) == pytest.approx(1 - 350 / 600)
    assert sampler.idle_ratio(0, 60, excluded=[(25, 45)]) == pytest.approx(1 - 350 / 400)
    assert sampler.idle_ratio(10, 20) == pytest.approx(0.5)  # (start, end]: a mark's own sample is before it
    assert sampler.idle_ratio(60, 70) is None  # no sample: absent, not zero
    assert UtilizationSampler(lambda after: []).idle_ratio(0, 1) is None


def boot_clock_us():
    """A clock like the one NVML has been seen to stamp samples with on Linux: time since boot, not
    ``time.time()`` (whose µs are about 1.8e15 today; these are far smaller)."""
    return int(time.monotonic() * 1e6)


class DriverBuffer:
    """Stands in for the driver's sample buffer (there is no GPU here): one sample per ``tick``, stamped
    with ``clock``, utilization 0 while ``idle`` is set, else 80; ``read`` returns the samples newer than asked."""

    def __init__(self, clock=boot_clock_us):
        self.samples, self.idle, self.clock = [], False, clock

    def tick(self):
        self.samples.append((self.clock() + len(self.samples), 0 if self.idle else 80))

    def read(self, after):
        return [s for s in self.samples if s[0] > after]


@pytest.mark.parametrize("clock", [boot_clock_us, lambda: int(time.time() * 1e6)], ids=["boot clock", "wall clock"])
def test_epochs_are_placed_by_nvml_timestamps_whatever_its_clock(clock):
    buf = DriverBuffer(clock)
    for _ in range(5):  # buffered before the fit: not part of any epoch
        buf.tick()
    sampler = UtilizationSampler(buf.read, period_s=0.01).start()
    try:
        start = sampler.clear()  # epoch start
        for _ in range(10):
            buf.tick()
            time.sleep(0.002)
        lo = sampler.mark()  # a validation run: its samples are left out
        buf.idle = True
        for _ in range(10):
            buf.tick()
        hi = sampler.mark()
        buf.idle = False
        for _ in range(10):
            buf.tick()
        ratio = sampler.idle_ratio(start, sampler.mark(), [(lo, hi)])
    finally:
        sampler.close()
    assert ratio == pytest.approx(0.2)  # 80% busy outside validation
    assert sampler.error is None and len(sampler.values) == 30


def test_background_thread_drains_the_buffer_and_clear_starts_an_epoch():
    buf = DriverBuffer()
    sampler = UtilizationSampler(buf.read, period_s=0.01).start()
    try:
        for _ in range(20):
            buf.tick()
            time.sleep(0.005)
        deadline = time.time() + 5
        while len(sampler.values) < 20 and time.time() < deadline:
            time.sleep(0.01)
        assert len(sampler.values) == 20  # each sample read once, by the thread alone
        start = sampler.clear()
        buf.idle = True
        for _ in range(10):
            buf.tick()
            time.sleep(0.005)
        assert sampler.idle_ratio(start, sampler.mark()) == pytest.approx(1.0)
        assert sampler.error is None
    finally:
        sampler.close()
    assert not sampler._thread.is_alive()


def test_a_failing_reader_stops_sampling_and_keeps_the_error():
    def broken(after_us):
        raise RuntimeError("GPU is lost")

    sampler = UtilizationSampler(broken, period_s=0.01).start()
    time.sleep(0.1)
    assert isinstance(sampler.error, RuntimeError)
    assert sampler.idle_ratio(0, sampler.mark()) is None
    sampler.close()


def test_nvml_reader_explains_why_it_is_unavailable_without_a_gpu():
    read, why = nvml_reader("58d0a0b2-0000-0000-0000-000000000000")
    if read is not None:
        pytest.skip("this machine has a usable NVML")
    assert "NVML" in why


class NvmlDevices:
    """pynvml's look-ups for a machine with two GPUs (NVML itself cannot run here: no driver)."""

    by_uuid = {"GPU-aaaa": "handle of the GPU aaaa", "MIG-cccc": "handle of MIG instance cccc"}

    def __init__(self, monkeypatch):
        self.sampled = []
        monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", self.handle_by_uuid)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: f"handle of index {i}")
        monkeypatch.setattr(pynvml, "nvmlDeviceGetSamples", self.samples)

    def handle_by_uuid(self, uuid):
        if uuid not in self.by_uuid:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self.by_uuid[uuid]

    def samples(self, handle, kind, after):
        self.sampled.append(handle)
        return kind, []


@pytest.mark.parametrize("uuid, handle", [("aaaa", "handle of the GPU aaaa"), ("GPU-aaaa", "handle of the GPU aaaa"),
                                          ("cccc", "handle of MIG instance cccc")])
def test_nvml_device_is_the_one_with_the_gpus_uuid(monkeypatch, uuid, handle):
    nvml = NvmlDevices(monkeypatch)
    read, why = nvml_reader(uuid)
    assert read is not None and read(0) == [] and nvml.sampled == [handle]


def test_a_gpu_nvml_cannot_find_is_not_sampled_rather_than_another_one(monkeypatch):
    """No fallback to a device index, which names another GPU under MIG or a non-PCI CUDA_DEVICE_ORDER."""
    NvmlDevices(monkeypatch)
    read, why = nvml_reader("bbbb")
    assert read is None and "GPU-bbbb" in why and "not logged" in why
