"""One list of every logged metric (lightning_profkit/metric_names.py): what the code logs is in it, everything
in it is logged by some path of the code (the Metrics page's table is made from it: tests/test_docs.py)."""

import math

import pytest
from lightning_profkit.figures import HostFigures, MemoryPeak
from lightning_profkit.metric_names import EXCHANGED, METRICS, PREFIX, find
from lightning_profkit.monitor.alerting.checks import BlockFigures
from lightning_profkit.monitor.timing.epoch_figures import reduce_ranks, rolling_metrics, window_metrics
from lightning_profkit.report.run_data import EPOCH_METRICS

EVERY_FIGURE = HostFigures(steps=2, step_time_us=10.0, data_wait_us=1.0, data_wait_share=0.1, blocking_sync_us=2.0,
                           blocking_sync_share=0.2, blocking_sync_us_by_call={"cudaStreamSynchronize": 2.0},
                           gpu_busy_share=0.5, gpu_idle_share=0.5,
                           gpu_idle_by_cause={"data_wait": 0.2, "blocking_sync": 0.1, "cpu_ops": 0.15, "other": 0.05},
                           peak_memory={"cuda:0": MemoryPeak(2**20, 2**21)})


def every_logged_name():
    """What each path of the code logs, with every figure present: two ranks' epoch and rolling figures, and a
    training and a validation window with every figure."""
    names = set(reduce_ranks([dict.fromkeys(EXCHANGED, 1.0), dict.fromkeys(EXCHANGED, 2.0)]))
    names |= {PREFIX + "data_wait_alert", PREFIX + "data_wait_alerts"}  # set by the fit once the rule has judged the epoch
    names |= set(rolling_metrics([BlockFigures(1.0, 2.0, 0.0), BlockFigures(1.5, 2.0, 0.0)], 10))
    names |= set(window_metrics(EVERY_FIGURE)) | set(window_metrics(EVERY_FIGURE, validation=True))
    return names


def test_everything_logged_is_listed_and_everything_listed_is_logged():
    logged = every_logged_name()
    assert all(name.startswith(PREFIX) for name in logged)
    for name in logged:
        find(name)  # KeyError: logged, not listed
    assert {find(name) for name in logged} == set(METRICS)


def test_a_fit_logs_only_listed_names(monkeypatch, tmp_path):
    from fake_fit import FakeFit

    fit = FakeFit(monkeypatch, str(tmp_path), steps="3-4", alert_window=4, max_captures=0)
    fit.epoch(0, [(0.1, 0.2)] * 10)
    fit.end()
    names = {name for out in fit.outcomes for _, metrics in out.metrics for name in metrics if name != "epoch"}
    assert PREFIX + "window/host_step_ms" in names and PREFIX + "rolling/data_wait_ratio" in names
    for name in names:
        find(name)


def test_units_and_the_readers_names():
    assert all(m.unit and m.meaning and m.ranks in ("mean", "max", "") for m in METRICS)
    assert all(find(name) for name in EPOCH_METRICS)  # what profkit report reads back
    assert set(HostFigures.per_step(EVERY_FIGURE)) == {name.split("/", 2)[2] for name in window_metrics(EVERY_FIGURE)}
    with pytest.raises(KeyError):
        find("profkit/no_such_metric")
    assert not math.isnan(reduce_ranks([dict.fromkeys(EXCHANGED, 0.5)])[PREFIX + "data_wait_ratio"])
