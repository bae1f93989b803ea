"""NVML sampling: the idle-ratio arithmetic, the background thread, and NVML's absence on this machine."""

import time

import pytest

from lightning_profkit.gpu_sampler import UtilizationSampler, idle_ratio, now_us, nvml_reader


def test_idle_ratio_over_the_epoch_leaves_out_validation():
    ts = [10, 20, 30, 40, 50, 60]
    util = [100, 50, 0, 0, 100, 100]
    assert idle_ratio(ts, util, 10, 60) == pytest.approx(1 - 350 / 600)
    assert idle_ratio(ts, util, 10, 60, excluded=[(25, 45)]) == pytest.approx(1 - 350 / 400)
    assert idle_ratio(ts, util, 20, 20) == pytest.approx(0.5)
    assert idle_ratio(ts, util, 61, 70) is None  # no sample: absent, not zero
    assert idle_ratio([], [], 0, 1) is None


class DriverBuffer:
    """Stands in for the driver's sample buffer (there is no GPU here): one sample every 5 ms,
    utilization 0 while ``idle`` is set, else 80; ``read`` returns the samples newer than asked."""

    def __init__(self):
        self.samples, self.idle = [], False

    def tick(self):
        self.samples.append((int(now_us()), 0 if self.idle else 80))

    def read(self, after_us):
        return [s for s in self.samples if s[0] > after_us]


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
        sampler.clear()
        start = now_us()
        buf.idle = True
        for _ in range(10):
            buf.tick()
            time.sleep(0.005)
        assert sampler.idle_ratio(start, now_us()) == pytest.approx(1.0)
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
    assert sampler.idle_ratio(0, now_us()) is None
    sampler.close()


def test_nvml_reader_explains_why_it_is_unavailable_without_a_gpu():
    pytest.importorskip("pynvml")
    read, why = nvml_reader(0)
    if read is not None:
        pytest.skip("this machine has a usable NVML")
    assert "NVML" in why
