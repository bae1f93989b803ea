"""A window's figures: per-step values in the units their names say, figures the trace cannot support left out,
and the same figures back from their JSON."""

import json

import pytest

from lightning_profkit.figures import HostFigures, MemoryPeak


def test_per_step_figures_say_their_units_and_leave_out_what_the_trace_lacks():
    figures = HostFigures(steps=4, step_time_us=40_000.0, data_wait_us=10_000.0, data_wait_share=0.25,
                          blocking_sync_us=2_000.0, blocking_sync_us_by_call={"cudaStreamSynchronize": 2_000.0},
                          gpu_idle_share=0.5, peak_memory={"1:0": MemoryPeak(3_000_000, 4_000_000)})
    assert figures.per_step() == {"host_step_ms": 10.0, "data_wait_share": 0.25, "blocking_sync_ms_per_step": 0.5,
                                  "sync_ms_per_step/cudaStreamSynchronize": 0.5, "gpu_idle_share": 0.5,
                                  "peak_memory_mb/1:0": 3.0}
    assert HostFigures(steps=4, step_time_us=40_000.0).per_step() == {"host_step_ms": 10.0, "data_wait_share": 0.0}
    assert HostFigures().per_step() == {}  # no steps, no GPU: nothing, not zeros


def test_figures_come_back_from_their_json():
    figures = HostFigures(steps=2, step_time_us=5.0, peak_memory={"1:0": MemoryPeak(1, 2)})
    assert HostFigures.from_json(json.loads(json.dumps(figures.to_json()))) == figures


def test_the_one_percentile_is_numpys_default():
    """The epoch's p90 step time and the ranks' p90 are this one definition: numpy's linear interpolation."""
    import random

    import numpy as np

    from lightning_profkit.figures import percentile

    rng = random.Random(7)
    for n in (1, 2, 3, 10, 1024):
        values = [rng.random() * 100 for _ in range(n)]
        for q in (0.0, 0.5, 0.9, 1.0):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, 100 * q)))
